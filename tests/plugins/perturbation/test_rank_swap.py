"""The ``rank-swap`` algorithm (Moore's rank swapping, block-pair variant): the pairing on a
hand-worked example with fixed draws, the guarantees on the Census data checked with pandas
ranks, the workflow run through the CLI and bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anonflow.errors import InputError
from anonflow.params import ParamError, validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.perturbation.rank_swap import RankSwap, max_rank_distance, swap_sources

from tests.plugins.perturbation.test_noise import census, census_table, declared, repeat_runs
from tests.support.helpers import CENSUS_QI


class Draws:
    """A stand-in generator giving fixed draws: the block offset, then the blocks in a given order
    (the grid ``rng.permuted`` would return: one row per block, -1 for an empty slot)."""

    def __init__(self, offset, grid):
        self.offset, self.grid = offset, np.asarray(grid, dtype=np.int64)

    def integers(self, low, high):
        return self.offset

    def permuted(self, grid, axis):
        assert axis == 1 and grid.shape == self.grid.shape
        assert (np.sort(grid, axis=1) == np.sort(self.grid, axis=1)).all()  # the same blocks, reordered
        return self.grid


def run(params, table, seed=0):
    plugin = RankSwap()
    params = validate_params(plugin.params, params)
    plugin.check(params, table=table)
    return plugin.run(table, params, make_context(seed=seed))


# -- the pairing -----------------------------------------------------------------------------


def test_max_rank_distance_is_p_percent_of_n_rounded_down():
    # 5 % of 1080 = 54; 50 % of 6 = 3; 10 % of 9 = 0.9 -> 0; 7 % of 100 = 7 (not 7.000000000000001 -> 7 either)
    assert [max_rank_distance(p, n) for p, n in ((5, 1080), (50, 6), (10, 9), (7, 100), (100, 3))] == [54, 3, 0, 7, 3]


def test_pairs_within_blocks_of_w_plus_1_ranks_hand_worked():
    # x by record: 50 10 40 20 30 60; sorted: 10 (rec 1), 20 (rec 3), 30 (rec 4), 40 (rec 2), 50 (rec 0), 60 (rec 5).
    # p = 50 %: w = 3, blocks of 4 ranks; offset 1: positions (0 1 2) form block 0, (3 4 5) block 1
    # (grid rows [-1 0 1 2] and [3 4 5 -1]). Block 0 walked as positions 1 0 2 -> pair (1, 0), 2 alone;
    # block 1 walked as 5 3 4 -> pair (5, 3), 4 alone.  Sorted values become 20 10 30 60 50 40, so
    # rec 1 -> 20, rec 3 -> 10, rec 4 -> 30, rec 2 -> 60, rec 0 -> 50, rec 5 -> 40.
    x = np.array([50.0, 10, 40, 20, 30, 60])
    src = swap_sources(x, 3, Draws(1, [[1, -1, 0, 2], [5, -1, 3, 4]]))
    assert x[src].tolist() == [50, 20, 60, 10, 30, 40]
    # offset 0: one block of 4 (positions 0-3) and one of 2 (4, 5), walked in rank order: pairs (0, 1) (2, 3)
    # (4, 5): 10<->20, 30<->40, 50<->60
    src = swap_sources(x, 3, Draws(0, [[0, 1, 2, 3], [4, 5, -1, -1]]))
    assert x[src].tolist() == [60, 20, 30, 10, 40, 50]
    # w = 0: nothing moves, and no draw is taken
    assert np.array_equal(swap_sources(x, 0, None), np.arange(6))


def test_sources_are_pairs_within_w_ranks_on_random_data():
    rng = np.random.default_rng(0)
    for n, w in ((2, 1), (7, 2), (100, 9), (100, 99), (100, 500)):
        for _ in range(20):
            x = rng.normal(size=n)
            src = swap_sources(x, w, rng)
            assert np.array_equal(src[src], np.arange(n))  # swapped in pairs, each record at most once
            rank = np.argsort(np.argsort(x))
            assert np.abs(rank[src] - rank).max() <= w


# -- properties on the Census data -----------------------------------------------------------


def moved_beyond(x: np.ndarray, y: np.ndarray) -> int:
    """The largest rank distance between each record's original and published value, with tied values
    counted at their nearest ranks (pandas' min and max ranks over the original column)."""
    s = pd.Series(x)
    lo = dict(zip(x, s.rank(method="min")))
    hi = dict(zip(x, s.rank(method="max")))
    up = np.array([lo[b] - hi[a] for a, b in zip(x, y)])  # value moved up: from a's last rank to b's first
    down = np.array([lo[a] - hi[b] for a, b in zip(x, y)])
    return int(max(up.max(), down.max(), 0))


@pytest.mark.parametrize("p", [1.0, 5.0, 20.0])
def test_census_marginals_kept_and_no_value_moves_beyond_p_percent(p):
    df = census()
    out = run({"columns": CENSUS_QI, "p": p}, census_table(), seed=3).data.to_pandas()
    w = int(p * len(df) / 100)
    for c in CENSUS_QI:
        x, y = df[c].to_numpy(), out[c].to_numpy()
        assert sorted(x.tolist()) == sorted(y.tolist()), c
        assert moved_beyond(x, y) <= w, c
        assert (x != y).mean() > 0.3, c  # most records did get another value (ties aside)
        assert out[c].dtype == df[c].dtype


def test_p_zero_changes_nothing():
    df = census()
    out = run({"columns": CENSUS_QI, "p": 0}, census_table(), seed=3).data.to_pandas()
    assert np.array_equal(out[CENSUS_QI].to_numpy(), df[CENSUS_QI].to_numpy())
    assert np.array_equal(out["_class"].to_numpy(), np.arange(len(df)))


def test_columns_are_swapped_independently():
    df = census()
    out = run({"columns": ["PEARNVAL", "WSALVAL"], "p": 10}, census_table(), seed=3).data.to_pandas()
    # equal in most source records; swapped apart, they mostly differ
    assert (df["PEARNVAL"] == df["WSALVAL"]).mean() > 0.9
    assert (out["PEARNVAL"] == out["WSALVAL"]).mean() < 0.5
    assert np.array_equal(out["AGI"].to_numpy(), df["AGI"].to_numpy())


def test_declaration():
    p = validate_params(RankSwap.params, {"columns": ["a", "b"], "p": 5})
    assert RankSwap().perturbs(p) == {c: {"kind": "swap", "method": "rank-swap", "variant": "block-pair", "p": 5.0}
                                      for c in ("a", "b")}


def test_workflow_is_reproducible_and_seeded(cli, tmp_path):
    a, b, c = repeat_runs(cli, tmp_path, """\
        perturbed:
          uses: rank-swap
          input: typed
          with: {columns: [AGI, INTVAL], p: 5}
        """)
    assert a == b
    assert a != c
    assert set(declared(tmp_path / "0.duckdb")) == {"AGI", "INTVAL"}
    out = pd.read_csv(pd.io.common.BytesIO(a))
    assert sorted(out["AGI"]) == sorted(census()["AGI"])


def test_bad_parameters_fail_in_one_line():
    for p in (-1, 100.5):
        with pytest.raises(ParamError, match="parameter 'p'"):
            validate_params(RankSwap.params, {"columns": ["a"], "p": p})
    table = typed_table({"x": [1.0, 2.0, 3.0], "s": ["a", "b", "c"], "m": [1.0, None, 2.0]})
    with pytest.raises(InputError, match="'y', which is not a column"):
        run({"columns": ["y"], "p": 5}, table)
    with pytest.raises(InputError, match="column 's' .* not numbers"):
        run({"columns": ["s"], "p": 5}, table)
    with pytest.raises(InputError, match="column 'm' has 1 missing value"):
        run({"columns": ["m"], "p": 50}, table)
