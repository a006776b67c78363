"""``dp-aggregates`` on 10 million synthetic records: a 2-way marginal and a bounded sum, each
next to the DuckDB query it cannot do without (the "floor"), measured in the same run.

Run as a script (with OpenDP installed: ``pip install '.[dp]'``, or the source tree on ``PYTHONPATH``)::

    python tests/benchmarks/bench_dp_aggregates.py [--records 10000000]

The data: ``edu`` (16 categories) and ``country`` (42 categories), dictionary-encoded text
columns drawn at random (seed 1), and ``hours``, integers in 1..99, as an in-memory typed table
that DuckDB scans through Arrow. Timed, once each after one warm-up:

* floor: ``SELECT edu, country, count(*) FROM t GROUP BY ALL``; the publisher: the 2-way marginal
  (672 cells, discrete Laplace, ε = 1), written as CSV;
* floor: ``SELECT sum(hours) FROM t``; the publisher: the sum of ``hours`` clamped to [1, 99]
  (rounded to the grid 1, summed as HUGEINT), noised and written.

The machine (CPUs, load average, ``uptime``) is printed first and last. Nothing here asserts a
timing (the issue's target: 10 million records within a minute on 2 cores). Importing this module
runs nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def machine() -> str:
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return f"{os.cpu_count()} CPUs; uptime: {up}"


def option(args: list[str], name: str, default: int) -> int:
    return int(args[args.index(name) + 1]) if name in args else default


def synthetic(n: int):
    import pyarrow as pa

    from anonflow.api import ROW, Attribute, TypedTable, Typing

    rng = np.random.default_rng(1)
    edu = [f"edu{i:02d}" for i in range(16)]
    country = [f"country{i:02d}" for i in range(42)]
    cols = {ROW: pa.array(np.arange(n, dtype=np.int64)),
            "edu": pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 16, n, dtype=np.int32)), pa.array(edu)),
            "country": pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 42, n, dtype=np.int32)),
                                                      pa.array(country)),
            "hours": pa.array(rng.integers(1, 100, n, dtype=np.int64))}
    typing = Typing((Attribute("edu", "quasi", "nominal"), Attribute("country", "quasi", "nominal"),
                     Attribute("hours", "insensitive")))
    return TypedTable(pa.table(cols), typing), edu, country


def timed(fn) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(args: list[str]) -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
    from anonflow.api import validate_params
    from anonflow.store import Store
    from anonflow.testing import make_context

    from anonflow_std.dp.aggregates import DpAggregates

    n = option(args, "--records", 10_000_000)
    print(f"machine: {machine()}")
    t0 = time.perf_counter()
    table, edu, country = synthetic(n)
    print(f"{n:,} records made in {time.perf_counter() - t0:.1f} s")
    store = Store(":memory:")
    ctx = make_context(store=store)

    def fresh():  # a new output folder per call (a publisher never writes over a file)
        return make_context(store=store, output_dir=Path(tempfile.mkdtemp(prefix="bench-dp-")))
    pub = DpAggregates()
    marginal = validate_params(pub.params, {"path": "m", "marginals": [["edu", "country"]], "epsilon": 1.0,
                                            "domain": {"edu": edu, "country": country}})
    total = validate_params(pub.params, {"path": "s", "sums": ["hours"], "bounds": {"hours": [1, 99]},
                                         "epsilon": 1.0})
    rows = [
        ("2-way marginal (672 cells)", lambda: ctx.sql("SELECT edu, country, count(*) AS n FROM t GROUP BY ALL",
                                                       t=table),
         lambda: pub.publish(table, marginal, fresh())),
        ("bounded sum", lambda: ctx.sql("SELECT sum(hours) AS s FROM t", t=table),
         lambda: pub.publish(table, total, fresh())),
    ]
    print(f"{'query':28} {'DuckDB floor s':>15} {'dp-aggregates s':>16} {'ratio':>7}")
    for name, floor, full in rows:
        f, p = timed(floor), timed(full)
        print(f"{name:28} {f:15.3f} {p:16.3f} {p / f:7.1f}")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main(sys.argv[1:])
