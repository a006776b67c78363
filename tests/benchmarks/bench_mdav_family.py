"""Benchmark of the MDAV family (V-MDAV, GRAV, V-GRAV), DLD and refine on Adult.

Run as a script::

    python tests/benchmarks/bench_mdav_family.py [--quick]

On Adult's six numeric columns (45,222 records, z-scored), k = 10:

* wall-clock and CPU seconds of V-MDAV, GRAV and V-GRAV (seed 003's gamma 0.2, zeta 1.8)
  and of V-GRAV with gamma = 1.05 (which does extend groups) on the first 10,000 records;
* the peak memory V-GRAV allocates (``tracemalloc``, which sees numpy's buffers), next to
  what one ``n x n`` float64 matrix would take, and the process's peak RSS;
* DLD of the V-MDAV output (kd-tree, no ``n x n`` matrix);
* ``refine`` of the MDAV partition (descent + 200 kicks).

``--quick`` uses the first 10,000 records.  Importing the module runs nothing.
"""

from __future__ import annotations

import csv
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "workflows" / "data"
ADULT_NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]


def adult() -> np.ndarray:
    with (DATA / "adult" / "adult_full.csv").open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        index = [header.index(c) for c in ADULT_NUMERIC]
        X = np.array([[float(row[i]) for i in index] for row in reader])
    return (X - X.mean(axis=0)) / X.std(axis=0)


def il(X: np.ndarray, labels: np.ndarray) -> float:
    counts = np.bincount(labels)
    sse = sum(float(((X[:, j] - (np.bincount(labels, weights=X[:, j]) / counts)[labels]) ** 2).sum())
              for j in range(X.shape[1]))
    return 100.0 * sse / float(((X - X.mean(axis=0)) ** 2).sum())


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    sys.path.insert(0, str(ROOT / "plugins"))
    from anonflow_std.risk.dld import linked_records
    from anonflow_std.microaggregation.refine import refine_partition
    from anonflow_std.microaggregation.kernels import mdav_partition, vmdav_partition
    from anonflow_std.microaggregation.grey_similarity import Grey

    X = adult()
    if "--quick" in sys.argv:
        X = np.ascontiguousarray(X[:10_000])
    n, k = X.shape[0], 10
    print(f"Adult, {n} records x {X.shape[1]} numeric columns (z-scored), k = {k}")
    print(f"{'algorithm':<28} {'wall s':>8} {'cpu s':>8} {'IL %':>7} {'groups':>7} {'sizes':>9}")
    runs = {
        "MDAV": lambda: mdav_partition(X, k),
        "V-MDAV (gamma 0.2)": lambda: vmdav_partition(X, k, 0.2),
        "GRAV (zeta 1.8)": lambda: mdav_partition(X, k, similarity=Grey(1.8)),
        "V-GRAV (gamma 0.2, zeta 1.8)": lambda: vmdav_partition(X, k, 0.2, similarity=Grey(1.8)),
    }
    labels = {}
    for name, fn in runs.items():
        out, wall, cpu = timed(fn)
        labels[name] = out
        sizes = np.bincount(out)
        print(f"{name:<28} {wall:>8.2f} {cpu:>8.2f} {il(X, out):>7.2f} {sizes.size:>7} "
              f"{f'{sizes.min()}..{sizes.max()}':>9}")
    sub = np.ascontiguousarray(X[:10_000])
    out, wall, cpu = timed(lambda: vmdav_partition(sub, k, 1.05, similarity=Grey(1.8)))
    sizes = np.bincount(out)
    print(f"{'V-GRAV gamma 1.05, 10,000':<28} {wall:>8.2f} {cpu:>8.2f} {il(sub, out):>7.2f} {sizes.size:>7} "
          f"{f'{sizes.min()}..{sizes.max()}':>9}")

    tracemalloc.start()
    vmdav_partition(X, k, 0.2, similarity=Grey(1.8))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\nV-GRAV peak allocation (tracemalloc): {peak / 2**20:.1f} MiB; one n x n float64 matrix: "
          f"{n * n * 8 / 2**30:.1f} GiB; process peak RSS: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")

    group = labels["V-MDAV (gamma 0.2)"]
    means = np.stack([np.bincount(group, weights=X[:, j]) / np.bincount(group) for j in range(X.shape[1])],
                     axis=1)[group]
    linked, wall, cpu = timed(lambda: linked_records(X, means))
    print(f"DLD of the V-MDAV output: {linked.mean():.4f} ({int(linked.sum())} of {n} linked) in "
          f"{wall:.2f} s wall, {cpu:.2f} s cpu")

    res, wall, cpu = timed(lambda: refine_partition(X, labels["MDAV"], k, np.random.default_rng(0), kicks=200,
                                                    seconds=600))
    print(f"refine of MDAV: IL {il(X, labels['MDAV']):.3f} -> {il(X, res.labels):.3f} % "
          f"({res.rounds} rounds, {res.kicks} kicks, {res.kicks_kept} kept) in {wall:.1f} s wall, {cpu:.1f} s cpu")


if __name__ == "__main__":
    main()
