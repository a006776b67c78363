"""The utility measures of perturbed releases (docs/perturbation-utility.md) at scale, each next to
the numpy or DuckDB work it cannot do without (the "floor"), measured in the same run.

Run as a script (after ``pip install '.[test,ml]'``)::

    python tests/benchmarks/bench_perturbation_utility.py [--records 10000000] [--pmse-records 1000000]

1. The data, synthetic and seeded (numpy, seed 1): ``--records`` records with five numeric
   columns (log-normal, correlated through a shared factor: incomes) and three categorical ones
   (8, 16 and 40 values, skewed frequencies: text); the release adds Gaussian noise of 10 % of
   each numeric column's deviation and replaces 10 % of each categorical value by one drawn at
   random (seed 2). Both are in-memory typed tables, as an evaluate step of a run without the
   store would pass them (DuckDB scans the Arrow tables where they lie).
2. Each measure, then its floor:

   * ``il1s``, ``moments-change``, ``eigen-utility``, ``correlation-change`` on the five numeric
     columns; floors: numpy's ``abs(x - x').sum()`` and ``std`` per column (il1s), ``mean`` and
     ``var`` of every column of both tables (moments), one ``X.T @ X`` of each table (the two
     covariance-based measures).
   * ``hellinger`` on the three categorical columns and their joint table; floor: DuckDB's
     ``SELECT col, count(*) GROUP BY col`` of every column, and of the three together, in both
     tables, through the same ``ctx.sql`` (one DuckDB thread, as every plugin query runs).
   * ``pmse`` (model ``squares``: 5 numeric columns and their squares, 61 indicators) on the first
     ``--pmse-records`` records of each table; floor: one ``X.T @ (w * X)`` on the same design
     matrix, what each of Newton's iterations must compute at least.

The machine (CPUs, load average) is printed first and last, and the peak RSS at the end.
Benchmarks print figures; nothing here asserts a timing. Importing this module has no side
effects.
"""

from __future__ import annotations

import os
import resource
import sys
import time


def machine() -> str:
    return f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"


NUMERIC = ["income", "wages", "tax", "savings", "rent"]
CATEGORICAL = {"region": 8, "job": 16, "country": 40}


def synthetic(records: int):
    """The original and released columns (dicts of numpy arrays / Arrow arrays)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(1)
    factor = rng.normal(size=records)
    original: dict = {}
    for j, c in enumerate(NUMERIC):
        original[c] = np.exp(10 + 0.5 * factor + (0.3 + 0.1 * j) * rng.normal(size=records))
    for c, m in CATEGORICAL.items():
        weights = 1.0 / np.arange(1, m + 1)
        codes = rng.choice(m, size=records, p=weights / weights.sum())
        original[c] = codes
    noise = np.random.default_rng(2)
    released: dict = {}
    for c in NUMERIC:
        released[c] = original[c] + noise.normal(0.0, 0.1 * original[c].std(), records)
    for c, m in CATEGORICAL.items():
        codes = original[c].copy()
        hit = noise.random(records) < 0.1
        codes[hit] = noise.integers(0, m, int(hit.sum()))
        released[c] = codes
    labels = {c: pa.array([f"{c}-{i:02d}" for i in range(m)]) for c, m in CATEGORICAL.items()}

    def arrow(cols: dict) -> dict:
        return {c: (pa.array(v) if c in NUMERIC else labels[c].take(pa.array(v))) for c, v in cols.items()}

    return arrow(original), arrow(released)


def timed(label: str, fn, width: int = 34) -> float:
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    shown = ""
    if isinstance(out, dict):
        shown = ", ".join(f"{k}={v:.6g}" for k, v in list(out.items())[:3])
    elif out is not None:
        shown = str(out)
    print(f"  {label:<{width}} {seconds:8.2f} s  {shown}", flush=True)
    return seconds


def main() -> None:
    args = sys.argv[1:]
    records = int(args[args.index("--records") + 1]) if "--records" in args else 10_000_000
    pmse_records = int(args[args.index("--pmse-records") + 1]) if "--pmse-records" in args else 1_000_000

    import duckdb
    import numpy as np

    from anonflow.params import validate_params
    from anonflow.testing import make_context, typed_table
    from anonflow_std.utility.distribution_loss import Hellinger, Pmse, design_matrix
    from anonflow_std.utility.perturbation_loss import CorrelationChange, EigenUtility, Il1s, MomentsChange

    print(f"machine: {machine()}")
    print(f"duckdb {duckdb.__version__}; plugin queries run on one DuckDB thread (ctx.sql)")
    start = time.perf_counter()
    o_cols, r_cols = synthetic(records)
    types = {**{c: "continuous" for c in NUMERIC}, **{c: "nominal" for c in CATEGORICAL}}
    original = typed_table(o_cols, quasi=types)
    released = typed_table(r_cols, quasi=types)
    print(f"data: {records:,} records ({len(NUMERIC)} numeric, {len(CATEGORICAL)} categorical columns) "
          f"in {time.perf_counter() - start:.1f} s")
    ctx = make_context()

    def metric(m, o=original, r=released, **params):
        return lambda: m.compute(o, r, validate_params(m.params, params), ctx)

    xo = [np.asarray(o_cols[c]) for c in NUMERIC]
    xr = [np.asarray(r_cols[c]) for c in NUMERIC]
    print(f"\nnumeric measures, {records:,} records x {len(NUMERIC)} columns")
    timed("il1s", metric(Il1s()))
    timed("floor: numpy |x - x'| sums, std", lambda: sum(float(np.abs(a - b).sum() / a.std(ddof=1))
                                                         for a, b in zip(xo, xr)))
    timed("moments-change", metric(MomentsChange()))
    timed("floor: numpy mean, var x 2 tables", lambda: sum(float(a.mean() + a.var(ddof=1))
                                                           for a in xo + xr))
    timed("eigen-utility", metric(EigenUtility()))
    timed("correlation-change", metric(CorrelationChange()))
    stacked = [np.column_stack(xo), np.column_stack(xr)]
    timed("floor: numpy X.T @ X x 2 tables", lambda: float(sum((X.T @ X).sum() for X in stacked)))
    stacked.clear()

    print(f"\nhellinger, {records:,} records, columns {', '.join(CATEGORICAL)} and their joint table")
    timed("hellinger", metric(Hellinger(), joint=list(CATEGORICAL)))

    def groupby() -> int:
        groups = 0
        for t in (original, released):
            for c in list(CATEGORICAL) + [", ".join(f'"{c}"' for c in CATEGORICAL)]:
                key = c if "," in c else f'"{c}"'
                groups += ctx.sql(f"SELECT {key}, count(*) AS n FROM t GROUP BY ALL", t=t).num_rows
        return groups

    timed("floor: DuckDB GROUP BY x 4 x 2 tables", groupby)

    n = min(pmse_records, records)
    o_small = typed_table({c: v.slice(0, n) for c, v in o_cols.items()}, quasi=types)
    r_small = typed_table({c: v.slice(0, n) for c, v in r_cols.items()}, quasi=types)
    print(f"\npmse, {n:,} + {n:,} records, model squares")
    timed("pmse", metric(Pmse(), o_small, r_small))
    X = design_matrix(o_small, r_small, list(types), model="squares")
    print(f"  design matrix: {X.shape[0]:,} x {X.shape[1]} ({type(X).__name__})")
    w = np.full(X.shape[0], 0.25)
    timed("floor: one X.T @ (w X) (a Newton step)", lambda: float((X.T @ X.multiply(w[:, None])).sum())
          if hasattr(X, "multiply") else float((X.T @ (w[:, None] * X)).sum()))

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS {peak:,.0f} MiB")
    print(f"machine at the end: {machine()}")


if __name__ == "__main__":
    main()
