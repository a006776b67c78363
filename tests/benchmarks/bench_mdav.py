"""Benchmark of the MDAV kernel ``anonflow_std.microaggregation.kernels.mdav_partition``.

Run as a script::

    python tests/benchmarks/bench_mdav.py

It times the kernel on Adult's six numeric columns (z-scored) for the first
10,000 records and for all 45,222, with k = 5 and k = 10 (best of 3 runs), and
prints the information loss (100 * SSE / SST) reached on the sdcMicro test
sets next to the values published for MDAV.  Importing the module runs
nothing.
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "workflows" / "data"

ADULT_NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]

#: MDAV information loss published for the sdcMicro test sets.
LITERATURE_IL = {
    "Census": {3: 5.69, 5: 9.09, 10: 14.16},
    "Tarragona": {3: 16.93, 5: 22.46, 10: 33.19},
    "EIA": {3: 0.48, 5: 1.67, 10: 3.84},
}

Kernel = Callable[[np.ndarray, int], np.ndarray]


def load_kernel() -> Kernel:
    """``mdav_partition``, from the installed package or the source tree."""
    try:
        from anonflow_std.microaggregation.kernels import mdav_partition
    except ImportError:
        sys.path.insert(0, str(ROOT / "plugins"))
        from anonflow_std.microaggregation.kernels import mdav_partition
    return mdav_partition


def read_columns(path: Path, columns: list[str] | None = None) -> np.ndarray:
    """Numeric columns of a CSV file (all of them by default) as float64."""
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        index = [header.index(name) for name in (header if columns is None else columns)]
        return np.array([[float(row[i]) for i in index] for row in reader], dtype=np.float64)


def zscore(X: np.ndarray) -> np.ndarray:
    """Standardize every column with the population standard deviation."""
    return (X - X.mean(axis=0)) / X.std(axis=0)


def sdcmicro_sets() -> dict[str, np.ndarray]:
    """The z-scored sdcMicro test sets: Census, Tarragona and EIA."""
    eia = DATA / "sdcmicro" / "EIA.csv"
    with eia.open(newline="") as handle:
        header = next(csv.reader(handle))
    eia_columns = ["UTILITYID"] + [c for c in header if c.endswith(("REVENUE", "SALES"))]
    return {
        "Census": zscore(read_columns(DATA / "sdcmicro" / "CASCrefmicrodata.csv")),
        "Tarragona": zscore(read_columns(DATA / "sdcmicro" / "Tarragona.csv")),
        "EIA": zscore(read_columns(eia, eia_columns)),
    }


def information_loss(X: np.ndarray, labels: np.ndarray) -> float:
    """100 * SSE / SST of a partition."""
    counts = np.bincount(labels)
    sse = 0.0
    for j in range(X.shape[1]):
        means = np.bincount(labels, weights=X[:, j]) / counts
        sse += float(((X[:, j] - means[labels]) ** 2).sum())
    return 100.0 * sse / float(((X - X.mean(axis=0)) ** 2).sum())


def best_time(kernel: Kernel, X: np.ndarray, k: int, repeat: int = 3) -> tuple[float, np.ndarray]:
    """Best wall-clock time of ``repeat`` runs, and the labels."""
    best = float("inf")
    labels = np.zeros(0, dtype=np.int64)
    for _ in range(repeat):
        start = time.perf_counter()
        labels = kernel(X, k)
        best = min(best, time.perf_counter() - start)
    return best, labels


def main() -> None:
    kernel = load_kernel()
    adult = read_columns(DATA / "adult" / "adult_full.csv", ADULT_NUMERIC)

    print("MDAV on Adult (6 numeric columns, z-scored), best of 3")
    print(f"{'n':>7} {'k':>3} {'seconds':>9} {'records/s':>11} {'IL %':>7}")
    for n in (10_000, adult.shape[0]):
        X = zscore(adult[:n])
        for k in (5, 10):
            seconds, labels = best_time(kernel, X, k)
            print(f"{n:>7} {k:>3} {seconds:>9.3f} {n / seconds:>11,.0f} {information_loss(X, labels):>7.2f}")

    print()
    print("Information loss (%) on the sdcMicro test sets: ours / literature")
    print(f"{'data':<10} {'k':>3} {'ours':>7} {'lit.':>7} {'diff':>7}")
    for name, X in sdcmicro_sets().items():
        for k, published in LITERATURE_IL[name].items():
            ours = information_loss(X, kernel(X, k))
            print(f"{name:<10} {k:>3} {ours:>7.2f} {published:>7.2f} {ours - published:>+7.3f}")


if __name__ == "__main__":
    main()
