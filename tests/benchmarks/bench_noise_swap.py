"""The continuous perturbation algorithms -- ``noise`` (additive, correlated, exact-moments), ``rank-swap``
and ``shuffle`` -- on 10 million synthetic records, each next to the numpy work it cannot do
without (the "floor"), measured in the same run.

Run as a script (after ``pip install '.[test]'``, or with the source tree on ``PYTHONPATH``)::

    python tests/benchmarks/bench_noise_swap.py [--records 10000000] [--columns 4] [--only noise]

(``--only WORD``: only the rows whose name starts with it, e.g. ``noise`` or ``rank-swap``.)

The data: ``--columns`` correlated income-like integer columns (``exp`` of correlated normals,
rounded; seed 1) and one more column left alone, as an in-memory typed table (what a partitioned
or stored table gives an algorithm once read). Each algorithm runs once through its ``run`` with
a step context seeded 0:

* ``noise additive`` on every column; floor: drawing the same number of normals
  (``rng.standard_normal(n * d)``);
* ``noise correlated`` and ``noise exact-moments``; floor: one ``rng.multivariate_normal`` of ``n`` rows;
* ``noise additive0`` and ``noise correlated2``; floor: the same number of normals;
* ``noise restr``; floor: one ``rng.multivariate_normal`` of ``n`` rows;
* ``noise ROMM`` (the default ``block_size``, and 64); floor: the ``n * block_size`` normals of
  its matrices ``M`` (one ``b x b`` matrix per ``b`` records), without their QR;
* ``noise outdect``; floor: the columns' 99 % quantiles (``np.quantile``), without the MCD;
* ``rank-swap`` (p = 5) on every column; floor: one ``np.argsort`` per column (numpy's default,
  unstable sort; the plugin needs a stable one, so that tied values are ordered alike everywhere);
* ``shuffle`` of half the columns given the other half; floor: one ``np.argsort`` per column
  (the ranks it needs) and one per shuffled column (the reverse mapping).

The machine (CPUs, load average) is printed first and last. Nothing here asserts a timing (the
issue's target: each algorithm within 1 minute at 10 million records on 2 cores). Importing this
module runs nothing.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def machine() -> str:
    return f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"


def option(args: list[str], name: str, default: int) -> int:
    return int(args[args.index(name) + 1]) if name in args else default


def synthetic(n: int, d: int):
    """``d`` correlated lognormal integer columns ``x0 ..`` and an untouched ``id`` column."""
    from anonflow.testing import typed_table

    rng = np.random.default_rng(1)
    cov = 0.6 * np.ones((d, d)) + 0.4 * np.eye(d)
    Z = rng.multivariate_normal(np.zeros(d), cov, size=n, method="cholesky")
    cols = {f"x{j}": np.round(np.exp(10 + Z[:, j])).astype(np.int64) for j in range(d)}
    cols["id"] = np.arange(n, dtype=np.int64)
    return typed_table(cols, quasi={f"x{j}": "continuous" for j in range(d)})


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def romm_floor(rng: np.random.Generator, n: int, b: int) -> None:
    """The normals ROMM's matrices need (``n * b``), drawn in chunks of about 4 million."""
    per = max(1, 4_000_000 // (b * b)) * b * b
    for s in range(0, n * b, per):
        rng.standard_normal(min(per, n * b - s))


def main(argv: list[str]) -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
    from anonflow.params import validate_params
    from anonflow.testing import make_context
    from anonflow_std.perturbation.noise import ROMM_BLOCK, Noise
    from anonflow_std.perturbation.rank_swap import RankSwap
    from anonflow_std.perturbation.shuffle import Shuffle

    n, d = option(argv, "--records", 10_000_000), option(argv, "--columns", 4)
    print(f"machine: {machine()}")
    t = time.perf_counter()
    table = synthetic(n, d)
    cols = [f"x{j}" for j in range(d)]
    print(f"data: {n:,} records x {d} columns, made in {time.perf_counter() - t:.1f} s")
    ints = [table.column(c).to_numpy() for c in cols]
    S = np.cov(np.column_stack(ints).astype(np.float64), rowvar=False)

    def algo(plugin, params):
        p = validate_params(plugin.params, params)
        return lambda: plugin.run(table, p, make_context(seed=0))

    rng = np.random.default_rng(0)
    rows = [
        ("noise additive", algo(Noise(), {"columns": cols, "method": "additive"}),
         "normals", lambda: rng.standard_normal(n * d)),
        ("noise correlated", algo(Noise(), {"columns": cols, "method": "correlated"}),
         "multivariate_normal", lambda: rng.multivariate_normal(np.zeros(d), S, size=n, method="eigh")),
        ("noise exact-moments", algo(Noise(), {"columns": cols, "method": "exact-moments"}),
         "multivariate_normal", lambda: rng.multivariate_normal(np.zeros(d), S, size=n, method="eigh")),
        ("noise additive0", algo(Noise(), {"columns": cols, "method": "additive0"}),
         "normals", lambda: rng.standard_normal(n * d)),
        ("noise correlated2", algo(Noise(), {"columns": cols, "method": "correlated2"}),
         "normals", lambda: rng.standard_normal(n * d)),
        ("noise restr", algo(Noise(), {"columns": cols, "method": "restr"}),
         "multivariate_normal", lambda: rng.multivariate_normal(np.zeros(d), S, size=n, method="eigh")),
        (f"noise ROMM b={ROMM_BLOCK}", algo(Noise(), {"columns": cols, "method": "ROMM"}),
         f"{ROMM_BLOCK} normals/record", lambda: romm_floor(rng, n, ROMM_BLOCK)),
        ("noise ROMM b=64", algo(Noise(), {"columns": cols, "method": "ROMM", "block_size": 64}),
         "64 normals/record", lambda: romm_floor(rng, n, 64)),
        ("noise outdect", algo(Noise(), {"columns": cols, "method": "outdect"}),
         "99% quantiles", lambda: np.quantile(np.column_stack(ints), 0.99, axis=0)),
        ("rank-swap p=5", algo(RankSwap(), {"columns": cols, "p": 5}),
         f"{d} argsorts", lambda: [np.argsort(v) for v in ints]),
        ("shuffle", algo(Shuffle(), {"columns": cols[: d // 2], "given": cols[d // 2:]}),
         f"{d + d // 2} argsorts", lambda: [np.argsort(ints[j % d]) for j in range(d + d // 2)]),
    ]
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    print(f"{'algorithm':<20} {'seconds':>8}   {'floor':<22} {'seconds':>8}  ratio")
    for name, run, floor_name, floor in rows:
        if not name.startswith(only):
            continue
        a, f = timed(run), timed(floor)
        print(f"{name:<20} {a:8.2f}   {floor_name:<22} {f:8.2f}  {a / f:5.1f}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
    print(f"peak RSS {peak:.1f} GiB")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main(sys.argv[1:])
