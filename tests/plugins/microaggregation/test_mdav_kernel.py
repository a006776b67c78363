"""Tests of the MDAV kernel ``anonflow_std.microaggregation.kernels.mdav_partition``.

The fast kernel is checked label for label against ``reference_mdav`` below, a
deliberately naive implementation that follows the algorithm's definition
literally (boolean masks over all records, one full scan per step), and its
information loss against published values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from anonflow_std.microaggregation.kernels import mdav_partition

from tests.support import data

DATA = Path(__file__).resolve().parents[3] / "workflows" / "data"

ADULT_NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]

# Information loss (100 * SSE / SST, z-scored data) of MDAV in the literature.
LITERATURE_IL = {
    ("census", 3): 5.69,
    ("census", 5): 9.09,
    ("census", 10): 14.16,
    ("tarragona", 3): 16.93,
    ("tarragona", 5): 22.46,
    ("tarragona", 10): 33.19,
    ("eia", 3): 0.48,
    ("eia", 5): 1.67,
    ("eia", 10): 3.84,
}


# -- data ------------------------------------------------------------------


def read_columns(table: pa.Table, columns: list[str] | None = None) -> np.ndarray:
    """Numeric columns of a shipped table (all of them by default) as float64."""
    return np.column_stack([table.column(c).to_numpy().astype(np.float64) for c in columns or table.column_names])


def zscore(X: np.ndarray) -> np.ndarray:
    """Standardize every column with the population standard deviation."""
    return (X - X.mean(axis=0)) / X.std(axis=0)


def load(name: str) -> np.ndarray:
    """A standardized benchmark data set of the sdcMicro / Adult collection."""
    if name in ("census", "tarragona"):
        return zscore(read_columns(data.sdcmicro(name)))
    if name == "eia":
        eia = data.sdcmicro("eia")
        wanted = ["UTILITYID"] + [c for c in eia.column_names if c.endswith(("REVENUE", "SALES"))]
        return zscore(read_columns(eia, wanted))
    if name == "adult":
        return zscore(read_columns(data.adult_full(), ADULT_NUMERIC))
    raise KeyError(name)


def information_loss(X: np.ndarray, labels: np.ndarray) -> float:
    """100 * SSE / SST of a partition."""
    counts = np.bincount(labels)
    sse = 0.0
    for j in range(X.shape[1]):
        means = np.bincount(labels, weights=X[:, j]) / counts
        sse += float(((X[:, j] - means[labels]) ** 2).sum())
    sst = float(((X - X.mean(axis=0)) ** 2).sum())
    return 100.0 * sse / sst


# -- reference implementation ------------------------------------------------


def _sqdist(X: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Squared distances from ``q`` to ``X[rows]``, summed column by column."""
    out = np.zeros(rows.size)
    for j in range(X.shape[1]):
        out += (X[rows, j] - q[j]) ** 2
    return out


def reference_mdav(X: np.ndarray, k: int) -> np.ndarray:
    """MDAV straight from its definition; slow (a full scan per step)."""
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    remaining = np.ones(n, dtype=bool)
    group = 0

    def farthest(q: np.ndarray, candidates: np.ndarray) -> int:
        rows = np.flatnonzero(candidates)
        dist = _sqdist(X, rows, q)
        return int(rows[dist == dist.max()].min())  # ties: lowest row index

    def nearest_group(i: int) -> np.ndarray:
        rows = np.flatnonzero(remaining)
        dist = _sqdist(X, rows, X[i])
        dist[rows == i] = -1.0  # the record itself always belongs to its group
        return rows[np.lexsort((rows, dist))[:k]]  # ties: lowest row index

    def form(members: np.ndarray) -> None:
        nonlocal group
        labels[members] = group
        remaining[members] = False
        group += 1

    while remaining.sum() >= 3 * k:
        c = X[remaining].mean(axis=0)
        r = farthest(c, remaining)
        s = farthest(X[r], remaining)  # chosen before r's group is removed
        first = nearest_group(r)
        if s in first:  # only possible through ties: take the next farthest
            outside = remaining.copy()
            outside[first] = False
            s = farthest(X[r], outside)
        form(first)
        form(nearest_group(s))
    if remaining.sum() >= 2 * k:
        c = X[remaining].mean(axis=0)
        form(nearest_group(farthest(c, remaining)))
    if remaining.any():
        form(np.flatnonzero(remaining))
    return labels


# -- helpers -----------------------------------------------------------------


def assert_valid_partition(labels: np.ndarray, n: int, k: int) -> None:
    """Groups numbered 0..g-1; all of size k except the last (k..2k-1)."""
    assert labels.dtype == np.int64
    assert labels.shape == (n,)
    assert labels.min() == 0
    sizes = np.bincount(labels)
    assert (sizes > 0).all()
    if n < 2 * k:
        assert sizes.tolist() == [n]
        return
    assert (sizes[:-1] == k).all()
    assert k <= sizes[-1] <= 2 * k - 1


def random_cases() -> list[tuple[str, np.ndarray, int]]:
    """Small arrays, many of them full of exact ties."""
    rng = np.random.default_rng(20240611)
    cases: list[tuple[str, np.ndarray, int]] = []
    for n, d, k in [(7, 2, 3), (9, 3, 3), (10, 1, 2), (40, 2, 3), (61, 3, 5), (150, 4, 7), (300, 2, 10)]:
        cases.append((f"gaussian-{n}x{d}-k{k}", rng.standard_normal((n, d)), k))
    for n, d, k, levels in [(30, 2, 3, 2), (64, 3, 4, 3), (120, 2, 5, 4), (200, 1, 3, 5), (257, 3, 6, 3)]:
        grid = rng.integers(0, levels, size=(n, d)).astype(np.float64)
        cases.append((f"grid{levels}-{n}x{d}-k{k}", grid, k))
    base = rng.standard_normal((25, 3))
    dup = base[rng.integers(0, 25, size=180)]
    cases.append(("duplicated-rows-180x3-k4", dup, 4))
    cases.append(("all-identical-50x2-k3", np.ones((50, 2)), 3))
    sym = np.array([[-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]] * 12)
    cases.append(("symmetric-48x2-k3", sym, 3))
    wide = rng.integers(0, 3, size=(90, 13)).astype(np.float64)
    cases.append(("grid3-90x13-k5", wide, 5))
    return cases


RANDOM_CASES = random_cases()


# -- tests -------------------------------------------------------------------


@pytest.mark.parametrize("k", [3, 5, 10])
@pytest.mark.parametrize("name", ["census", "tarragona"])
def test_labels_equal_reference_on_real_data(name: str, k: int) -> None:
    X = load(name)
    labels = mdav_partition(X, k)
    np.testing.assert_array_equal(labels, reference_mdav(X, k))
    assert_valid_partition(labels, X.shape[0], k)


@pytest.mark.parametrize("name,k", sorted(LITERATURE_IL))
def test_information_loss_matches_the_literature(name: str, k: int) -> None:
    X = load(name)
    labels = mdav_partition(X, k)
    assert_valid_partition(labels, X.shape[0], k)
    assert information_loss(X, labels) == pytest.approx(LITERATURE_IL[name, k], abs=0.05)


@pytest.mark.parametrize("name,X,k", RANDOM_CASES, ids=[case[0] for case in RANDOM_CASES])
def test_labels_equal_reference_on_small_arrays_with_ties(name: str, X: np.ndarray, k: int) -> None:
    labels = mdav_partition(X, k)
    np.testing.assert_array_equal(labels, reference_mdav(X, k))
    assert_valid_partition(labels, X.shape[0], k)


def test_labels_equal_reference_on_a_slice_of_adult() -> None:
    X = zscore(load("adult")[:3000])
    np.testing.assert_array_equal(mdav_partition(X, 7), reference_mdav(X, 7))


@pytest.mark.parametrize("n", [3, 5, 6, 7, 8, 9, 11, 12, 14, 15])
def test_group_sizes_at_the_boundaries(n: int) -> None:
    # n < 2k: one group; 2k <= n < 3k: two groups; then pairs of groups.
    k = 3
    X = np.random.default_rng(n).standard_normal((n, 2))
    labels = mdav_partition(X, k)
    assert_valid_partition(labels, n, k)
    np.testing.assert_array_equal(labels, reference_mdav(X, k))


def test_group_sizes_on_adult() -> None:
    X = load("adult")
    labels = mdav_partition(X, 10)
    assert_valid_partition(labels, X.shape[0], 10)
    assert labels.max() + 1 == X.shape[0] // 10


def test_deterministic() -> None:
    X = load("census")
    first = mdav_partition(X, 5)
    second = mdav_partition(X.copy(), 5)
    np.testing.assert_array_equal(first, second)


def test_group_ids_follow_formation_order() -> None:
    # The first group holds the record farthest from the centroid.
    X = load("tarragona")
    labels = mdav_partition(X, 5)
    far = int(np.argmax(((X - X.mean(axis=0)) ** 2).sum(axis=1)))
    assert labels[far] == 0


def test_progress_is_throttled_monotone_and_complete() -> None:
    X = load("eia")
    calls: list[int] = []
    mdav_partition(X, 3, progress=calls.append)
    assert 1 <= len(calls) <= 101
    assert calls == sorted(calls)
    assert calls[-1] == X.shape[0]


def test_k_equal_to_n_and_k_one() -> None:
    X = np.random.default_rng(0).standard_normal((5, 2))
    np.testing.assert_array_equal(mdav_partition(X, 5), np.zeros(5, dtype=np.int64))
    labels = mdav_partition(X, 1)
    assert sorted(labels.tolist()) == list(range(5))
    np.testing.assert_array_equal(labels, reference_mdav(X, 1))


def test_no_columns_means_all_records_coincide() -> None:
    X = np.zeros((8, 0))
    np.testing.assert_array_equal(mdav_partition(X, 3), reference_mdav(X, 3))


@pytest.mark.parametrize(
    "X,k",
    [
        (np.zeros(5), 2),
        (np.zeros((5, 2)), 0),
        (np.zeros((5, 2)), 6),
        (np.array([[0.0, np.nan], [1.0, 1.0], [2.0, 2.0]]), 1),
    ],
)
def test_rejects_invalid_input(X: np.ndarray, k: int) -> None:
    with pytest.raises(ValueError):
        mdav_partition(X, k)
