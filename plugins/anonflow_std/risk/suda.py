"""SUDA2: minimal sample uniques and the SUDA and DIS-SUDA scores, as sdcMicro's ``suda2``
(``R/suda2.R``, ``src/Suda2.h``; Elliot et al., "SUDA: a program for detecting special
uniques"; Manning, Haglin and Keane 2008).

For a set ``S`` of key columns (quasi-identifiers), record ``r`` is *unique on S* when no other
record has its values on every column of ``S``. ``S`` is a *minimal sample unique* (MSU) of
``r`` when ``r`` is unique on ``S`` and on none of its proper subsets; since a record unique on
``T`` is unique on every superset of ``T``, it suffices that ``r`` is unique on none of the
``|S| - 1``-subsets of ``S``. MSUs are searched up to ``max_size`` columns (default 3;
``null``: all ``m`` key columns, as sdcMicro always does).

Scores (sdcMicro with its default ``original_scores = TRUE``; ``m`` is the number of key
columns, but at least 3, since sdcMicro pads a table of 1 or 2 key columns with constant
columns, which change only these weights)::

    SUDA score of r      s_r = sum over the MSUs of r of (m - |S|)!
    Q                    = 1 + (8 - m) / 20
    U                    = records unique on all m columns
    P                    = records whose values on all m columns are shared by exactly one other
                           record (the records of the keys of size 2)
    DIS fraction         D = U d / (U d + P (1 - d))            (d = dis_fraction, default 0.01)
    DIS-SUDA score       dis_r = 1 / (1 + (U / D - U) / (s_r^Q * A)),  A = sum_{s_t > 0} s_t^-Q
                               = 1 / (1 + P (1 - d) / (d * s_r^Q * A))
                         dis_r = 0 when s_r = 0

(``U / D - U = P (1 - d) / d``: we compute the second form, in double precision; sdcMicro
computes ``D`` in single precision, so its DIS scores can differ in the 7th digit.) The
contribution of key column ``v`` is ``100 * sum of (m - |S|)! over every MSU S containing v,
divided by the sum of all SUDA scores`` (sdcMicro's ``attribute_contributions``; the
contributions add up to more than 100 when MSUs have several columns).

With ``max_size`` below ``m``, MSUs of more columns are not found, so a record's score (and the
DIS scores, through ``A``) can be lower than sdcMicro's, which searches every size; the score
weights stay ``(m - |S|)!``.

Missing values: a key column holding a null (a suppressed cell, a wildcard: docs/algorithms.md,
"Suppressed cells as wildcards") is refused in one line: sdcMicro never puts a missing value in
an MSU, which is not implemented here, and counting the null as a value of its own would find
uniques an attacker cannot see. A published generalized label is a value like any other.

The search is vectorized over records: every column subset of up to ``max_size`` columns gets
each record's key id (built from its subset without the last column, ``np.unique``) and the
records unique on it; the loops run over column subsets (``sum_k C(m, k)`` of them: 92 for 8
columns and ``max_size`` 3), never over records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable

from anonflow_std import __version__
from anonflow_std.common.wildcard import refuse_nulls

__all__ = ["Suda2", "Suda2Result", "encode_keys", "minimal_sample_uniques", "suda2", "score_weights",
           "DIS_BINS"]

#: most column subsets the search may visit (sum_k C(m, k) for k <= max_size)
MAX_SUBSETS = 100_000
#: the DIS-score bins of sdcMicro's ``print.suda2``: == 0, (0, 0.1], ..., (0.6, 0.7], > 0.7
DIS_BINS = ("eq_0", "upto_0.1", "upto_0.2", "upto_0.3", "upto_0.4", "upto_0.5", "upto_0.6", "upto_0.7",
            "above_0.7")
_DIS_EDGES = np.arange(8) / 10 + np.finfo(np.float64).eps


def encode_keys(table: TypedTable | pa.Table, columns: Sequence[str]) -> np.ndarray:
    """``(n, m)`` int64: each record's value of each column as a code (equal values, equal
    codes; a null is a value of its own)."""
    n = table.num_rows
    out = np.empty((n, len(columns)), dtype=np.int64)
    for j, name in enumerate(columns):
        col = table.column(name)
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        enc = pc.dictionary_encode(arr, null_encoding="encode")
        out[:, j] = enc.indices.to_numpy(zero_copy_only=False)
    return out


def score_weights(m: int, max_size: int) -> np.ndarray:
    """``w[k - 1] = (m' - k)!`` for MSU sizes ``k = 1 .. max_size``, ``m' = max(m, 3)``
    (sdcMicro's ``original_scores = TRUE`` weights)."""
    m_eff = max(m, 3)
    return np.array([float(math.factorial(m_eff - k)) for k in range(1, max_size + 1)])


def _unique_ids(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids of ``keys`` and whether each record's key occurs once."""
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    return inverse.astype(np.int64, copy=False), counts[inverse] == 1


def minimal_sample_uniques(codes: np.ndarray, max_size: int) -> dict[tuple[int, ...], np.ndarray]:
    """Every column subset ``S`` (a sorted tuple of column indices, ``1 <= |S| <= max_size``) that
    is an MSU of at least one record, with the boolean mask of those records."""
    n, m = codes.shape
    max_size = min(max_size, m)
    found: dict[tuple[int, ...], np.ndarray] = {}
    if n == 0 or m == 0:
        return found
    card = codes.max(axis=0) + 1
    ids: dict[tuple[int, ...], np.ndarray] = {}
    unique: dict[tuple[int, ...], np.ndarray] = {}
    for j in range(m):
        ids[(j,)], unique[(j,)] = _unique_ids(codes[:, j])
        if unique[(j,)].any():
            found[(j,)] = unique[(j,)]
    for k in range(2, max_size + 1):
        next_ids: dict[tuple[int, ...], np.ndarray] = {}
        next_unique: dict[tuple[int, ...], np.ndarray] = {}
        for S in combinations(range(m), k):
            head, last = S[:-1], S[-1]
            if k < max_size:
                next_ids[S], next_unique[S] = _unique_ids(ids[head] * card[last] + codes[:, last])
                uniq = next_unique[S]
            else:  # the last size: no ids needed for a next round
                _, inverse, counts = np.unique(ids[head] * card[last] + codes[:, last], return_inverse=True,
                                               return_counts=True)
                uniq = counts[inverse.reshape(-1)] == 1
                next_unique[S] = uniq
            if not uniq.any():
                continue
            msu = uniq.copy()
            for drop in range(k):
                msu &= ~unique[S[:drop] + S[drop + 1:]]
            if msu.any():
                found[S] = msu
        ids, unique = next_ids, next_unique
    return found


@dataclass
class Suda2Result:
    """Record-level SUDA2 results (arrays over the records, in table order)."""

    #: ``(n, max_size)``: MSUs of each size per record
    msu_counts: np.ndarray
    #: SUDA score per record
    score: np.ndarray
    #: DIS-SUDA score per record
    dis: np.ndarray
    #: per key column: the percentage of the total SUDA score coming from MSUs containing it
    contribution: np.ndarray
    #: records unique on all key columns (U), and in keys of exactly two records (P)
    uniques: int
    pairs: int
    #: the MSUs found: column-index tuple -> mask of the records it is an MSU of
    msus: dict[tuple[int, ...], np.ndarray]


def suda2(codes: np.ndarray, max_size: int | None = 3, dis_fraction: float = 0.01) -> Suda2Result:
    """SUDA2 on the ``(n, m)`` value codes (see the module docstring)."""
    codes = np.asarray(codes, dtype=np.int64)
    n, m = codes.shape
    size = m if max_size is None else min(int(max_size), m)
    msus = minimal_sample_uniques(codes, size)
    weights = score_weights(m, size)
    counts = np.zeros((n, size), dtype=np.int64)
    contrib = np.zeros(m, dtype=np.float64)
    for S, mask in msus.items():
        counts[:, len(S) - 1] += mask
        w = float(mask.sum()) * weights[len(S) - 1]
        for v in S:
            contrib[v] += w
    score = counts @ weights if size else np.zeros(n)
    total = float(score.sum())
    contribution = 100.0 * contrib / total if total > 0 else np.zeros(m)
    # U and P over the full key
    if n and m:
        _, inverse, full = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
        per_record = full[inverse.reshape(-1)]
        uniques, pairs = int((per_record == 1).sum()), int((per_record == 2).sum())
    else:
        uniques = pairs = 0
    dis = np.zeros(n, dtype=np.float64)
    pos = score > 0
    if pos.any():
        q = 1.0 + (8.0 - max(m, 3)) / 20.0
        sq = score[pos] ** q
        adj = float(np.sum(1.0 / sq))
        dis[pos] = 1.0 / (1.0 + pairs * (1.0 - dis_fraction) / (dis_fraction * sq * adj))
    return Suda2Result(counts, score, dis, contribution, uniques, pairs, msus)


def suda2_values(result: Suda2Result, columns: Sequence[str], name: str = "suda2") -> dict[str, float]:
    """The metric's summary values of a SUDA2 result."""
    n = result.score.size
    has = result.msu_counts.sum(axis=1) > 0
    out = {
        name: float(result.dis.mean()) if n else 0.0,
        f"{name}.records": float(n),
        f"{name}.records_with_msu": float(has.sum()),
        f"{name}.msus": float(result.msu_counts.sum()),
        f"{name}.score_mean": float(result.score.mean()) if n else 0.0,
        f"{name}.score_max": float(result.score.max()) if n else 0.0,
        f"{name}.dis_mean": float(result.dis.mean()) if n else 0.0,
        f"{name}.dis_max": float(result.dis.max()) if n else 0.0,
        f"{name}.sample_uniques": float(result.uniques),
        f"{name}.pairs": float(result.pairs),
    }
    for k in range(result.msu_counts.shape[1]):
        out[f"{name}.msus_size_{k + 1}"] = float(result.msu_counts[:, k].sum())
    bins = np.bincount(np.searchsorted(_DIS_EDGES, result.dis, side="left"), minlength=len(DIS_BINS))
    for label, count in zip(DIS_BINS, bins):
        out[f"{name}.dis_{label}"] = float(count)
    for col, c in zip(columns, result.contribution):
        out[f"{name}.contribution.{col}"] = float(c)
    return out


class Suda2(Metric):
    """SUDA2 minimal sample uniques with SUDA and DIS-SUDA scores, as sdcMicro's ``suda2`` (see
    the module docstring). Nulls in a quasi-identifier count as a value of their own (for now;
    sdcMicro keeps missing values out of MSUs). Measures the table it is given over its
    quasi-identifiers; the headline value is the mean DIS-SUDA score."""

    name = "suda2"
    version = __version__
    description = ("SUDA2 (as sdcMicro): minimal sample uniques up to max_size columns, SUDA and DIS-SUDA scores; "
                   "mean and highest DIS score, records with an MSU, DIS-score bins, column contributions.")
    category = "risk"
    requires_original = False
    params = (
        Param("max_size", "int", default=3, nullable=True, min=1,
              help="largest MSU searched, in columns (null: all key columns, as sdcMicro)"),
        Param("dis_fraction", "float", default=0.01, above=0.0, max=1.0,
              help="sampling fraction of the DIS score (sdcMicro's DisFraction)"),
        Param("columns", "list", items="str", default=None, nullable=True,
              help="key columns (default: the quasi-identifiers)"),
    )

    def _columns(self, table: TypedTable, params: Mapping[str, Any]) -> list[str]:
        cols = list(params.get("columns") or table.typing.quasi)
        if not cols:
            raise InputError("suda2 needs at least one quasi-identifier; name them under 'quasi' in the typing step, "
                             "or list the key columns with columns:")
        missing = [c for c in cols if c not in table.columns]
        if missing:
            raise InputError(f"suda2: column {missing[0]!r} is not in the table")
        size = len(cols) if params.get("max_size") is None else min(int(params["max_size"]), len(cols))
        subsets = sum(math.comb(len(cols), k) for k in range(1, size + 1))
        if subsets > MAX_SUBSETS:
            raise InputError(f"suda2: {len(cols)} key columns with max_size {size} means {subsets:,} column subsets "
                             f"(at most {MAX_SUBSETS:,}); lower max_size")
        return cols

    def check(self, params: Mapping[str, Any], **tables: TypedTable) -> None:
        table = tables.get("anonymized") or tables.get("typed")
        if table is not None:
            self._columns(table, params)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        cols = self._columns(anonymized, params)
        refuse_nulls(ctx, anonymized, cols, self.name, "sdcMicro keeps a missing value out of every minimal sample "
                     "unique, which is not implemented; evaluate it on a table without suppressed cells, or use "
                     "sample-uniqueness or individual-risk (nulls as wildcards)")
        codes = encode_keys(anonymized.select(cols), cols)
        result = suda2(codes, params.get("max_size", 3), float(params.get("dis_fraction", 0.01)))
        return suda2_values(result, cols, self.name)


PLUGINS = [Suda2()]
