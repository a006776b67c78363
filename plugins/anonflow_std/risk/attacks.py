"""Attack-based risks measured against a held-out control set, after anonymeter (Giomi,
Boenisch, Wehmeyer and Tasnádi, "A Unified Framework for Quantifying Privacy Risk in
Synthetic Data", PoPETs 2023): ``linkability-risk`` and ``inference-risk``.

An attacker runs the same attack twice against the release: once on *target* records, the
original records the release was made from, and once on *control* records, original records
of the same population that were **not** used to make it (another source or step of the
workflow, named by ``control``). What the attack achieves on the control records it achieves
from what the release says about the population; only the excess on the targets is what the
release leaks about them::

    risk = (attack_rate - control_rate) / (1 - control_rate)

with each rate the Wilson score estimate of a success count (not the plain fraction) and the
risk's error propagated from both rates' (anonymeter's ``stats/confidence.py``); the risk and
its confidence interval are clipped to [0, 1].  Without a control set the rate on the targets
alone would count as leaked what any release of the population gives away, so the metrics
refuse to run without one.

The attacks (anonymeter's ``linkability_evaluator.py`` and ``inference_evaluator.py``):

* linkability: the attacker holds two datasets covering the same people on disjoint columns
  (``aux_a`` and ``aux_b``) and tries to join them through the release: for each attacked
  record, the ``n_neighbors`` released records nearest on ``aux_a`` and those nearest on
  ``aux_b``; the attack succeeds when the two sets share a record.
* inference: the attacker knows ``aux`` of a record and guesses its ``secret`` as the secret of
  the released record nearest on ``aux``; a guess succeeds when it equals the secret (a
  missing secret guessed missing counts) or, with ``regression`` (by default when the secret
  is numeric: anonymeter 1.0's default; anonymeter 1.1 defaults to exact comparison), when
  ``|guess - secret| / (|guess| + 1e-12) <= tolerance`` (anonymeter divides by ``guess +
  1e-12``, which for a negative guess counts every guess right; we take its absolute value).

Distance (anonymeter's ``MixedTypeKNeighbors``): over the named columns, the sum of ``|a - b| /
range`` for a numeric column (the range over the released records and the attacked records
together, so each term is at most 1; a constant column's range taken as 1), and ``0`` or ``1``
for a categorical one (equal or not; a missing value is a category of its own).  A missing
numeric cell is at distance 1 from anything (anonymeter counts two missing cells 1 and one
missing cell NaN, which sorts the candidate last).  A column is numeric when its Arrow type is
an integer, floating or decimal type (pandas' ``number`` dtypes, as anonymeter decides), else
categorical; both tables must agree.  The terms are added in anonymeter's order (numeric
columns by name, then categorical ones by name) so the distances are bit for bit its own.

Nearest neighbours: for numeric-only columns and one neighbour, ``scipy.spatial.cKDTree`` with
the L1 metric over the distinct released points (each standing for its lowest-index record);
the queries whose second-nearest distinct point lies within a relative ``1e-9`` of the nearest
are searched again exactly.  Otherwise an exact blockwise search: the distances from a block of
attacked records to every released record, block by block, so memory stays bounded
(:data:`BLOCK_CELLS` distances at a time) but time is ``O(n_attacks * n_released * columns)``.
Ties are broken towards the lowest released index (anonymeter breaks them by numba's
quicksort order, which we cannot reproduce vectorized; its results differ from ours only where
distances tie exactly).

Sampling: ``n_attacks`` records (without replacement) of the targets and of the control set
each, drawn from ``ctx.rng`` in that order, then the baseline's draws; by default, and in a set
of at most ``n_attacks`` records, every record is attacked (each set's rate over its own number
of attacks, as anonymeter 1.1 does).  The baseline is anonymeter's random guesser:
``n_neighbors`` random released records per half (linkability), a random released record's
secret (inference); it is reported, not used in the risk.
"""

from __future__ import annotations

from math import sqrt
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable

from .. import __version__

__all__ = ["BLOCK_CELLS", "LinkabilityRisk", "InferenceRisk", "wilson", "attack_risk", "encode", "nearest",
           "link_successes", "inference_successes", "secret_values"]

#: distances held at once by the blockwise search (8 bytes each, two arrays: 64 MB)
BLOCK_CELLS = 4_000_000
#: two kd-tree distances closer than this (relative) are searched again exactly
TIE_REL = 1e-9


# -- the risk and its interval (anonymeter's stats/confidence.py) --------------------------


def wilson(n_success: float, n_total: int, confidence: float) -> tuple[float, float]:
    """The Wilson score estimate of a success rate and its error bound:
    ``rate = (s + z^2/2) / (n + z^2)``, ``error = z / (n + z^2) * sqrt(s (n - s) / n + z^2 / 4)``
    with ``z`` the normal quantile of ``(1 + confidence) / 2``."""
    from scipy.stats import norm

    z = float(norm.ppf(0.5 * (1.0 + confidence)))
    z2 = z * z
    var = n_success * (n_total - n_success) / n_total
    denominator = n_total + z2
    return (n_success + 0.5 * z2) / denominator, (z / denominator) * sqrt(var + 0.25 * z2)


def attack_risk(name: str, n_attack: int, s_attack: int, n_control: int, s_control: int,
                n_baseline: int, s_baseline: int, confidence: float) -> dict[str, float]:
    """The metric's values: the residual risk ``(a - c) / (1 - c)`` of the Wilson rates, its
    error ``sqrt((ea / (1 - c))^2 + (ec (a - 1) / (1 - c)^2)^2)``, both clipped to [0, 1]."""
    a, ea = wilson(s_attack, n_attack, confidence)
    c, ec = wilson(s_control, n_control, confidence)
    b, _ = wilson(s_baseline, n_baseline, confidence)
    risk = (a - c) / (1.0 - c)  # c < 1 always: the Wilson rate is below 1 even for n successes in n
    err = sqrt((ea / abs(1.0 - c)) ** 2 + (ec * (a - 1.0) / (1.0 - c) ** 2) ** 2)

    def clip(v: float) -> float:
        return min(max(v, 0.0), 1.0)

    return {name: clip(risk), f"{name}.ci_low": clip(risk - err), f"{name}.ci_high": clip(risk + err),
            f"{name}.residual": risk, f"{name}.attack_rate": a, f"{name}.control_rate": c,
            f"{name}.baseline_rate": b, f"{name}.attacks": float(n_attack),
            f"{name}.attack_successes": float(s_attack), f"{name}.control_attacks": float(n_control),
            f"{name}.control_successes": float(s_control), f"{name}.baseline_successes": float(s_baseline)}


# -- the columns and the distance ----------------------------------------------------------


def _array(table: TypedTable, column: str) -> pa.Array:
    col = table.column(column)
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def encode(tables: Sequence[TypedTable], columns: Sequence[str], metric: str,
           what: Sequence[str]) -> tuple[list[np.ndarray], int]:
    """The ``columns`` of each table as one float64 array ``(n_i, d)``: the numeric columns
    first, by name (raw values, NaN for missing), then the categorical ones by name (codes
    shared by all the tables, missing a code of its own). Returns the arrays and the number of
    numeric columns. ``what`` names the tables in error messages."""
    kinds: dict[str, bool] = {}
    arrays: dict[str, list[pa.Array]] = {}
    for c in columns:
        arrs = []
        for t, label in zip(tables, what):
            if c not in t.columns:
                raise InputError(f"{metric}: column {c!r} is not in the {label} table")
            arrs.append(_array(t, c))
        numeric = {_is_numeric(a.type) for a in arrs if not pa.types.is_null(a.type)} or {True}  # all missing
        if len(numeric) > 1:
            types = ", ".join(f"{label} {a.type}" for a, label in zip(arrs, what))
            raise InputError(f"{metric}: column {c!r} is numeric in one table and not in another ({types}); the "
                             "distance needs one kind per column (a generalized release has text labels: measure "
                             "the table before generalization, or leave the column out)")
        kinds[c] = numeric.pop()
        arrays[c] = arrs
    num = sorted(c for c in columns if kinds[c])
    cat = sorted(c for c in columns if not kinds[c])
    out = [np.empty((t.num_rows, len(columns)), dtype=np.float64) for t in tables]
    for j, c in enumerate(num):
        for i, a in enumerate(arrays[c]):
            out[i][:, j] = (np.full(len(a), np.nan) if pa.types.is_null(a.type) else  # a column all missing
                            np.asarray(pc.cast(a, pa.float64(), safe=False).to_numpy(zero_copy_only=False),
                                       dtype=np.float64))
    for j, c in enumerate(cat, start=len(num)):
        arrs = [a.cast(pa.string()) if not pa.types.is_string(a.type) else a for a in arrays[c]]
        codes = pc.dictionary_encode(pa.chunked_array(arrs, type=pa.string())).combine_chunks().indices
        codes = np.asarray(pc.fill_null(codes, -1).to_numpy(zero_copy_only=False), dtype=np.float64)
        start = 0
        for i, a in enumerate(arrs):
            out[i][:, j] = codes[start:start + len(a)]
            start += len(a)
    return out, len(num)


def scale(candidates: np.ndarray, queries: np.ndarray, n_num: int) -> tuple[np.ndarray, np.ndarray]:
    """The numeric columns divided by their range over both arrays (anonymeter's
    ``_scale_numerical``: ``x / (max - min)``, a zero range taken as 1)."""
    C, Q = candidates.copy(), queries.copy()
    if n_num:
        both = np.vstack([candidates[:, :n_num], queries[:, :n_num]])
        with np.errstate(invalid="ignore"):
            rng = np.nanmax(both, axis=0) - np.nanmin(both, axis=0) if both.size else np.ones(n_num)
        rng = np.where((rng == 0) | np.isnan(rng), 1.0, rng)
        C[:, :n_num] /= rng
        Q[:, :n_num] /= rng
    return C, Q


def distances(C: np.ndarray, Q: np.ndarray, n_num: int) -> np.ndarray:
    """The ``(len(Q), len(C))`` mixed distances, summed column by column in order."""
    D = np.zeros((Q.shape[0], C.shape[0]), dtype=np.float64)
    term = np.empty_like(D)
    for j in range(C.shape[1]):
        if j < n_num:
            np.subtract(Q[:, j, None], C[None, :, j], out=term)
            np.abs(term, out=term)
            if np.isnan(Q[:, j]).any() or np.isnan(C[:, j]).any():
                np.nan_to_num(term, copy=False, nan=1.0)
            D += term
        else:
            D += Q[:, j, None] != C[None, :, j]
    return D


def _k_lowest(D: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the ``k`` smallest entries' columns, by distance then by column (lowest first)."""
    if k == 1:
        idx = D.argmin(axis=1)[:, None]
        return idx, np.take_along_axis(D, idx, axis=1)
    kth = np.partition(D, k - 1, axis=1)[:, k - 1:k]
    below = D < kth
    need = k - below.sum(axis=1, keepdims=True)  # how many of the entries equal to the kth to take
    equal = D == kth
    take = below | (equal & (np.cumsum(equal, axis=1) <= need))
    cols = np.nonzero(take)[1].reshape(D.shape[0], k)  # row-major: each row's columns in index order
    d = np.take_along_axis(D, cols, axis=1)
    order = np.argsort(d, axis=1, kind="stable")  # by distance; equal ones stay in index order
    return np.take_along_axis(cols, order, axis=1), np.take_along_axis(d, order, axis=1)


def _brute(C: np.ndarray, Q: np.ndarray, n_num: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.empty((Q.shape[0], k), dtype=np.int64)
    dist = np.empty((Q.shape[0], k), dtype=np.float64)
    step = max(1, BLOCK_CELLS // max(C.shape[0], 1))
    for start in range(0, Q.shape[0], step):
        stop = min(start + step, Q.shape[0])
        idx[start:stop], dist[start:stop] = _k_lowest(distances(C, Q[start:stop], n_num), k)
    return idx, dist


def nearest(candidates: np.ndarray, queries: np.ndarray, n_num: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For each query, the indices and distances of its ``k`` nearest candidates (the columns
    already scaled), ties broken towards the lowest index; see the module docstring."""
    k = min(k, candidates.shape[0])
    n_cols = candidates.shape[1]
    if k == 1 and n_num == n_cols and candidates.shape[0] > 1 and not (
            np.isnan(candidates).any() or np.isnan(queries).any()):
        from scipy.spatial import cKDTree

        points, first = np.unique(candidates, axis=0, return_index=True)  # first: each point's lowest index
        if points.shape[0] >= 2:
            tree = cKDTree(points)
            d, i = tree.query(queries, k=2, p=1)
            idx = first[i[:, 0]][:, None].astype(np.int64)
            dist = d[:, :1].copy()
            tied = np.flatnonzero(d[:, 1] <= d[:, 0] * (1.0 + TIE_REL) + 1e-12)
            if tied.size:  # distinct points (nearly) as near: the exact search decides
                idx[tied], dist[tied] = _brute(candidates, queries[tied], n_num, 1)
            # the kd-tree's own sum may differ from the column-by-column one in the last bit
            untied = np.setdiff1d(np.arange(queries.shape[0]), tied)
            dist[untied, 0] = distances_pairs(candidates[idx[untied, 0]], queries[untied], n_num)
            return idx, dist
    return _brute(candidates, queries, n_num, k)


def distances_pairs(A: np.ndarray, B: np.ndarray, n_num: int) -> np.ndarray:
    """The mixed distance between ``A[i]`` and ``B[i]``, row by row, in the same column order."""
    out = np.zeros(A.shape[0], dtype=np.float64)
    for j in range(A.shape[1]):
        if j < n_num:
            term = np.abs(B[:, j] - A[:, j])
            np.nan_to_num(term, copy=False, nan=1.0)
            out += term
        else:
            out += A[:, j] != B[:, j]
    return out


# -- the attacks -----------------------------------------------------------------------------


def link_successes(idx_a: np.ndarray, idx_b: np.ndarray) -> np.ndarray:
    """Whether each attacked record's neighbour sets through the two halves share a record."""
    return (idx_a[:, :, None] == idx_b[:, None, :]).any(axis=(1, 2))


def inference_successes(guesses: np.ndarray, secrets: np.ndarray, regression: bool,
                        tolerance: float) -> np.ndarray:
    """Whether each guess is right: equal (categorical: both arrays hold codes), or
    ``|g - s| / (|g| + 1e-12) <= tolerance`` (numeric); NaN is a missing value, and a missing
    secret guessed missing counts right."""
    g_missing = np.isnan(guesses)
    s_missing = np.isnan(secrets)
    with np.errstate(invalid="ignore"):
        if regression:
            match = np.abs(guesses - secrets) / (np.abs(guesses) + 1e-12) <= tolerance
        else:
            match = guesses == secrets
    return match | (g_missing & s_missing)


def secret_values(arrays: Sequence[pa.Array], regression: bool) -> list[np.ndarray]:
    """The secret column of each table as float64: numbers, or codes of a dictionary shared by
    all the tables; NaN where a value is missing."""
    if regression:
        return [np.asarray(pc.cast(a, pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64)
                for a in arrays]
    text = [a.cast(pa.string()) for a in arrays]
    codes = pc.dictionary_encode(pa.chunked_array(text, type=pa.string())).combine_chunks().indices
    codes = np.asarray(pc.cast(codes, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    return list(np.split(codes, np.cumsum([len(a) for a in arrays])[:-1]))


def random_subsets(rng: np.random.Generator, n_rows: int, population: int, k: int) -> np.ndarray:
    """``k`` distinct random indices below ``population`` per row (Floyd's algorithm, vectorized
    over the rows; its ``k`` steps are the only loop)."""
    k = min(k, population)
    out = np.empty((n_rows, k), dtype=np.int64)
    for step, j in enumerate(range(population - k, population)):
        t = rng.integers(0, j + 1, size=n_rows)
        taken = (out[:, :step] == t[:, None]).any(axis=1)
        out[:, step] = np.where(taken, j, t)
    return out


# -- the metrics -----------------------------------------------------------------------------

CONTROL = Param("control", "step", default=None, nullable=True,
                help="the source or step holding the control records: original records of the same population "
                     "NOT used to make the release (required)")
N_ATTACKS = Param("n_attacks", "int", default=None, nullable=True, min=1,
                  help="records attacked in the targets and in the control set each, drawn at random (default, or "
                       "more than a set holds: all of its records)")
CONFIDENCE = Param("confidence", "float", default=0.95, above=0.0, max=0.999999,
                   help="confidence level of the interval on the risk")


def control_table(params: Mapping[str, Any], ctx: StepContext, metric: str) -> TypedTable:
    name = params.get("control")
    if not name:
        raise InputError(f"{metric} needs a control set: name with control: a source or step holding original "
                         "records NOT used to make the release (e.g. a filter step keeping the records the release "
                         "left out); without one, what any release of the population reveals would count as leaked")
    return ctx.table(name)


def pick(rng: np.random.Generator, n: int, n_attacks: int | None, what: str, metric: str) -> np.ndarray | None:
    """The attacked records of a set of ``n``: ``n_attacks`` drawn without replacement, or all of
    them in order (None) when ``n_attacks`` is not given or not smaller than ``n`` (anonymeter
    1.1 attacks ``min(n_attacks, n)`` records of each set)."""
    if n == 0:
        raise InputError(f"{metric}: the {what} table holds no records")
    if n_attacks is None or n_attacks >= n:
        return None
    return np.sort(rng.choice(n, size=n_attacks, replace=False))


def _columns(params: Mapping[str, Any], key: str, metric: str) -> list[str]:
    cols = params.get(key)
    if not cols:
        raise InputError(f"{metric} needs {key}: the columns the attacker knows (a list of column names)")
    if len(set(cols)) != len(cols):
        raise InputError(f"{metric}: {key} names a column twice")
    return list(cols)


class LinkabilityRisk(Metric):
    name = "linkability-risk"
    version = __version__
    description = ("anonymeter's linkability attack: joining two datasets on disjoint columns (aux_a, aux_b) "
                   "through their nearest released records, its success on the targets beyond that on a control set.")
    category = "risk"
    params = (
        Param("aux_a", "list", items="str", default=None, nullable=True,
              help="the columns of the attacker's first dataset"),
        Param("aux_b", "list", items="str", default=None, nullable=True,
              help="the columns of the second dataset (disjoint from aux_a)"),
        CONTROL,
        Param("n_neighbors", "int", default=1, min=1,
              help="released records nearest to each half that may share a record"),
        N_ATTACKS,
        CONFIDENCE,
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        if original is None:
            original = anonymized
        a = _columns(params, "aux_a", self.name)
        b = _columns(params, "aux_b", self.name)
        if set(a) & set(b):
            raise InputError(f"{self.name}: aux_a and aux_b share {sorted(set(a) & set(b))}; the attacker's two "
                             "datasets hold disjoint columns")
        control = control_table(params, ctx, self.name)
        k = int(params.get("n_neighbors") or 1)
        n_att = params.get("n_attacks")
        t_pick = pick(ctx.rng, original.num_rows, n_att, "original", self.name)
        c_pick = pick(ctx.rng, control.num_rows, n_att, "control", self.name)
        what = ("released", "original", "control")
        succ = {}
        for half in (a, b):
            (R, T, C), n_num = encode((anonymized, original, control), half, self.name, what)
            if anonymized.num_rows == 0:
                raise InputError(f"{self.name}: the released table holds no records")
            for label, X, sel in (("targets", T, t_pick), ("control", C, c_pick)):
                X = X if sel is None else X[sel]
                Rs, Xs = scale(R, X, n_num)
                succ.setdefault(label, []).append(nearest(Rs, Xs, n_num, k)[0])
        s_t = int(link_successes(*succ["targets"]).sum())
        s_c = int(link_successes(*succ["control"]).sum())
        n_t = original.num_rows if t_pick is None else t_pick.size
        n_c = control.num_rows if c_pick is None else c_pick.size
        base = link_successes(random_subsets(ctx.rng, n_t, anonymized.num_rows, k),
                              random_subsets(ctx.rng, n_t, anonymized.num_rows, k))
        ctx.note(f"{self.name}: {s_t} of {n_t} targets and {s_c} of {n_c} control records linked through "
                 f"{k} nearest released record(s) on [{', '.join(a)}] and [{', '.join(b)}]")
        return attack_risk(self.name, n_t, s_t, n_c, s_c, n_t, int(base.sum()),
                           float(params.get("confidence") or 0.95))


class InferenceRisk(Metric):
    name = "inference-risk"
    version = __version__
    description = ("anonymeter's inference attack: guessing a secret column from the released record nearest "
                   "on the aux columns, its success on the targets beyond that on a control set.")
    category = "risk"
    params = (
        Param("aux", "list", items="str", default=None, nullable=True, help="the columns the attacker knows"),
        Param("secret", "str", default=None, nullable=True, help="the column the attacker guesses"),
        CONTROL,
        Param("regression", "bool", default=None, nullable=True,
              help="whether the secret is guessed as a number (within tolerance) rather than exactly "
                   "(default: when the secret column is numeric)"),
        Param("tolerance", "float", default=0.05, min=0.0,
              help="a numeric guess g is right when |g - secret| <= tolerance * |g|"),
        N_ATTACKS,
        CONFIDENCE,
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        if original is None:
            original = anonymized
        aux = _columns(params, "aux", self.name)
        secret = params.get("secret")
        if not secret:
            raise InputError(f"{self.name} needs secret: the column the attacker guesses")
        if secret in aux:
            raise InputError(f"{self.name}: the secret {secret!r} is among the aux columns the attacker knows")
        control = control_table(params, ctx, self.name)
        what = ("released", "original", "control")
        values = []
        for t, label in zip((anonymized, original, control), what):
            if secret not in t.columns:
                raise InputError(f"{self.name}: secret column {secret!r} is not in the {label} table")
            values.append(_array(t, secret))
        numeric = {_is_numeric(v.type) for v in values}
        regression = params.get("regression")
        if regression is None:
            regression = numeric == {True}
        elif regression and numeric != {True}:
            raise InputError(f"{self.name}: regression: true needs a numeric secret, and {secret!r} is not numeric "
                             "in every table")
        R_s, T_s, C_s = secret_values(values, regression)
        n_att = params.get("n_attacks")
        t_pick = pick(ctx.rng, original.num_rows, n_att, "original", self.name)
        c_pick = pick(ctx.rng, control.num_rows, n_att, "control", self.name)
        (R, T, C), n_num = encode((anonymized, original, control), aux, self.name, what)
        if anonymized.num_rows == 0:
            raise InputError(f"{self.name}: the released table holds no records")
        tol = float(params.get("tolerance") if params.get("tolerance") is not None else 0.05)
        counts = []
        for X, S, sel in ((T, T_s, t_pick), (C, C_s, c_pick)):
            if sel is not None:
                X, S = X[sel], S[sel]
            Rs, Xs = scale(R, X, n_num)
            guess = R_s[nearest(Rs, Xs, n_num, 1)[0][:, 0]]
            counts.append((X.shape[0], int(inference_successes(guess, S, regression, tol).sum())))
        (n_t, s_t), (n_c, s_c) = counts
        targets_s = T_s if t_pick is None else T_s[t_pick]
        rand = ctx.rng.choice(anonymized.num_rows, size=n_t, replace=n_t > anonymized.num_rows)
        s_b = int(inference_successes(R_s[rand], targets_s, regression, tol).sum())
        ctx.note(f"{self.name}: {s_t} of {n_t} targets' and {s_c} of {n_c} control records' {secret!r} guessed "
                 f"({'within ' + format(tol, 'g') + ' relative' if regression else 'exactly'}) from the nearest "
                 f"released record on [{', '.join(aux)}]")
        return attack_risk(self.name, n_t, s_t, n_c, s_c, n_t, s_b, float(params.get("confidence") or 0.95))


PLUGINS = [LinkabilityRisk(), InferenceRisk()]
