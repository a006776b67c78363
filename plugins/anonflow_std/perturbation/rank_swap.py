"""Rank swapping (Moore 1996; sdcMicro ``rankSwap``), per column, vectorized.

Moore's algorithm, as sdcMicro's C++ runs it, walks the ranks of a column in order: each
record not yet swapped picks a partner uniformly among the records not yet swapped whose rank
lies within ``w = floor(p * n / 100)`` above its own, and the two exchange values. That walk is
sequential (each choice depends on the earlier ones). This module keeps its guarantees and
draws the pairs at once:

1. sort the column (``w`` as above; ``w = 0`` changes nothing);
2. cut the sorted ranks into blocks of ``w + 1`` consecutive ranks, the first block starting at
   a random offset in ``0 .. w`` (so the cuts fall at random places);
3. within each block, pair the records at random (a random order within each block, then
   neighbours in that order form pairs; in a block of odd size one record keeps its value);
4. the two records of a pair exchange values.

As in Moore's algorithm every record is swapped at most once, two swapped records' ranks differ
by at most ``w`` (they lie in one block of ``w + 1`` ranks), and each column's multiset of values
is kept exactly. The distribution of a pair's rank distance differs: Moore's is about uniform on
``1 .. w``, here it is that of two random ranks of one block (smaller on average, at most ``w``).
We call it "rank swapping, block-pair variant" and say so in the declaration.

sdcMicro's other options (``TopPercent``/``BottomPercent``, which replace the extreme values by
their mean, and ``R0``/``K0``, which derive ``p`` from a target correlation or mean change) are
not offered; ``top-bottom-coding`` does the former as a step of its own.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import Algorithm, InputError, Param, StepContext, TypedTable

from .. import __version__
from .noise import default_columns, perturbed_columns, publish_columns


def max_rank_distance(p: float, n: int) -> int:
    """``w = floor(p * n / 100)``: the most ranks a value may move (p in percent of n)."""
    return int(np.floor(p * n / 100 + 1e-9))


def swap_sources(x: np.ndarray, w: int, rng: np.random.Generator) -> np.ndarray:
    """For each record ``i``, the record whose value it publishes (``x[src]`` is the swapped
    column). Draws: one integer (the blocks' offset), then one ``rng.permuted`` of the blocks laid
    out as the rows of a grid (a random order within each block)."""
    n = x.size
    src = np.arange(n, dtype=np.int64)
    if w < 1 or n < 2:
        return src
    b = w + 1
    order = np.argsort(x, kind="stable")  # order[s]: the record at sorted position s (ties: record order)
    offset = int(rng.integers(0, b))
    # sorted position s sits in slot s + offset of a grid of rows of b slots: row k is block k (the
    # first block has b - offset positions, the last what is left); empty slots hold -1
    rows = -(-(n + offset) // b)
    grid = np.full(rows * b, -1, dtype=np.int64)
    grid[offset:offset + n] = np.arange(n, dtype=np.int64)
    walk = rng.permuted(grid.reshape(rows, b), axis=1).reshape(-1)
    walk = walk[walk >= 0]                # sorted positions, block by block, in random order within each
    i = np.arange(n, dtype=np.int64)      # the walk visits each block's positions within its own range,
    block = (i + offset) // b             # so walk index i lies in the block of sorted position i
    local = i - np.maximum(block * b - offset, 0)
    end = np.minimum((block + 1) * b - offset, n)
    first = np.flatnonzero((local % 2 == 0) & (i + 1 < end))  # each pair's first walk index
    a, c = order[walk[first]], order[walk[first + 1]]         # the pair's records
    src[a], src[c] = c, a
    return src


class RankSwap(Algorithm):
    name = "rank-swap"
    version = __version__
    description = ("Rank swapping (Moore; sdcMicro rankSwap), block-pair variant: per column, values exchanged "
                   "in random pairs whose ranks differ by at most p % of the records.")
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="the numeric columns to swap, each on its own (default: the continuous quasi-identifiers)"),
        Param("p", "float", min=0, max=100,
              help="the most a value may move, in percent of the records' ranks (sdcMicro's P)"),
    )
    per_fragment = False

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        perturbed_columns(table, params["columns"], self.name)

    def perturbs(self, params: Mapping[str, Any], table: TypedTable | None = None) -> dict[str, dict[str, Any]]:
        what = {"kind": "swap", "method": "rank-swap", "variant": "block-pair", "p": float(params["p"])}
        cols = params["columns"] if params["columns"] is not None else default_columns(table, self.name)
        return {c: dict(what) for c in cols}

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        cols = perturbed_columns(table, params["columns"], self.name)
        n = table.num_rows
        w = max_rank_distance(float(params["p"]), n)
        new: dict[str, pa.Array] = {}
        for c in cols:
            col = table.column(c)
            if col.null_count:
                raise InputError(f"rank-swap: column {c!r} has {col.null_count} missing value(s); drop or impute "
                                 "them first (the typing step's 'missing' policy)")
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            x = arr.to_numpy(zero_copy_only=False)
            if x.dtype.kind == "f" and np.isnan(x).any():
                raise InputError(f"rank-swap: column {c!r} holds NaN values")
            new[c] = arr.take(pa.array(swap_sources(x, w, ctx.rng)))
        ctx.note(f"rank-swap: p = {params['p']:g} % of {n} records: values move at most {w} rank(s)")
        return publish_columns(table, new, ctx)


PLUGINS = [RankSwap()]
