"""Risk measures for perturbed data: ``dbrl`` at 1 million records and ``interval-disclosure``
at 10 million, each next to the floor it cannot do without, measured in the same run.

Run as a script (after ``pip install '.[test]'``)::

    python tests/benchmarks/bench_perturbation_risk.py [--dbrl-records 1000000]
        [--interval-records 10000000] [--rmd-records 100000]

The data: 5 numeric columns, multivariate normal with correlations (seed 1), released as the
original plus Gaussian noise of 0.1 standard deviations per column (seed 2), built in memory as
typed tables (``anonflow.testing.typed_table``). Each part prints wall and CPU seconds:

* ``dbrl`` (Euclidean, the plugin's ``compute``: column reads, z-scores, the distinct originals,
  the kd-tree, ties) and its floor: ``cKDTree(Zo)`` built and queried once (``k=1``) on the
  same z-scored arrays, the least any kd-tree nearest-neighbour linkage does;
  ``dbrl`` with ``distance: mahalanobis`` too.  Target (issue 30): <= 5 minutes at 1M on 2 cores.
* ``interval-disclosure`` (the plugin's ``compute``) and its floor: the same closed-interval test
  ``|x - x'| <= k sd(x')`` written directly in numpy on the arrays already in memory.
* ``interval-disclosure-rmd`` at ``--rmd-records`` (scikit-learn's MCD dominates; it is not a
  10M measure).

The machine (CPUs, load average) is printed first and last. Benchmarks print figures; nothing
here asserts a timing. Importing this module has no side effects.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
COLS = ["c1", "c2", "c3", "c4", "c5"]
COV = np.array([[1.0, 0.6, 0.3, 0.0, 0.1],
                [0.6, 1.0, 0.4, 0.2, 0.0],
                [0.3, 0.4, 1.0, 0.5, 0.2],
                [0.0, 0.2, 0.5, 1.0, 0.3],
                [0.1, 0.0, 0.2, 0.3, 1.0]])


def machine() -> str:
    return f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"


def arrays(n: int) -> tuple[np.ndarray, np.ndarray]:
    X = np.random.default_rng(1).multivariate_normal(np.zeros(5), COV, size=n) * [1, 10, 100, 1000, 5]
    Xm = X + np.random.default_rng(2).normal(size=X.shape) * X.std(axis=0) * 0.1
    return X, Xm


def tables(X: np.ndarray, Xm: np.ndarray):
    from anonflow.testing import typed_table

    quasi = {c: "continuous" for c in COLS}
    return (typed_table({c: X[:, j] for j, c in enumerate(COLS)}, quasi=quasi),
            typed_table({c: Xm[:, j] for j, c in enumerate(COLS)}, quasi=quasi))


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def show(label: str, n: int, wall: float, cpu: float, value: str = "") -> None:
    print(f"  {label:<44} {n:>11,} records  {wall:8.2f} s wall  {cpu:8.2f} s CPU  {value}", flush=True)


def bench_dbrl(n: int) -> None:
    from scipy.spatial import cKDTree

    from anonflow.params import validate_params
    from anonflow.testing import make_context
    from anonflow_std.risk.linkage import Dbrl

    X, Xm = arrays(n)
    original, released = tables(X, Xm)

    def floor():
        mu, sd = X.mean(axis=0), X.std(axis=0)
        Zo, Zm = (X - mu) / sd, (Xm - mu) / sd
        _, idx = cKDTree(Zo).query(Zm, k=1)
        return float(np.mean(idx == np.arange(n)))

    share, wall, cpu = timed(floor)
    show("floor: z-scores + cKDTree build + query k=1", n, wall, cpu, f"(share {share:.4f})")
    for distance in ("euclidean", "mahalanobis"):
        params = validate_params(Dbrl.params, {"distance": distance})
        out, wall, cpu = timed(lambda: Dbrl().compute(original, released, params, make_context()))
        show(f"dbrl ({distance})", n, wall, cpu, f"dbrl = {out['dbrl']:.4f}")


def bench_interval(n: int) -> None:
    from anonflow.params import validate_params
    from anonflow.testing import make_context
    from anonflow_std.risk.interval import IntervalDisclosure

    X, Xm = arrays(n)
    original, released = tables(X, Xm)

    def floor():
        half = 0.05 * Xm.std(axis=0, ddof=1)
        return float(np.mean((np.abs(X - Xm) <= half).all(axis=1)))

    share, wall, cpu = timed(floor)
    show("floor: numpy |x - x'| <= k sd(x'), all columns", n, wall, cpu, f"(share {share:.4f})")
    params = validate_params(IntervalDisclosure.params, {})
    out, wall, cpu = timed(lambda: IntervalDisclosure().compute(original, released, params, make_context()))
    show("interval-disclosure (k = 0.05)", n, wall, cpu, f"= {out['interval-disclosure']:.4f}")


def bench_rmd(n: int) -> None:
    from anonflow.params import validate_params
    from anonflow.testing import make_context
    from anonflow_std.risk.interval import IntervalDisclosureRmd

    X, Xm = arrays(n)
    original, released = tables(X, Xm * 1.0)
    params = validate_params(IntervalDisclosureRmd.params, {})
    out, wall, cpu = timed(lambda: IntervalDisclosureRmd().compute(original, released, params, make_context()))
    show("interval-disclosure-rmd (MCD: scikit-learn)", n, wall, cpu, f"= {out['interval-disclosure-rmd']:.4f}")


def option(args: list[str], name: str, default: int) -> int:
    return int(args[args.index(name) + 1]) if name in args else default


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT / "plugins"))
    sys.path.insert(0, str(ROOT))
    print(f"machine: {machine()}", flush=True)
    bench_dbrl(option(argv, "--dbrl-records", 1_000_000))
    bench_interval(option(argv, "--interval-records", 10_000_000))
    bench_rmd(option(argv, "--rmd-records", 100_000))
    print(f"machine: {machine()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
