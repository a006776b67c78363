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
* ``singling-out-risk`` with ``mode: multivariate`` (``n_cols`` 3, ``--singling-attacks`` 2000
  queries) on ``--singling-records`` (22,000) Adult training records released as they are, with
  as many control records (Adult in an order drawn with seed 4). Then the counting alone, the
  same 2000 attack queries over the 22,000 training records, five ways: rank codes in blocks
  (the plugin's ``Ranks.counts``), the same with the 1-in-16 prefilter the plugin uses to decide
  "exactly one" (``Ranks.single``), float comparisons of every query with every row in blocks of
  200 queries (``conjunction_counts_dense``), DuckDB (conditions as a table joined to the data
  in long form on the column, grouped by query and record, then by query), and pandas
  ``DataFrame.query`` per query (100 queries, the time scaled to 2000): what a Python loop of
  full scans costs. And the generator's work: one batch of 1000 attempts (nearly all failing)
  with full rank counts and with the prefilter.

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


def bench_singling(n: int, n_attacks: int) -> None:
    import pandas as pd

    from anonflow.params import validate_params
    from anonflow.testing import make_context, typed_table
    from anonflow_std.risk.attacks import encode
    from anonflow_std.risk.attacks_singling import SinglingOutRisk, distinct_records
    from anonflow_std.risk.singling_multi import (EQ, GE, GT, LE, LT, NE, NOT_NULL, NULL, Ranks,
                                                  conjunction_counts_dense, multivariate_queries)

    frame = pd.read_csv(ROOT / "workflows" / "data" / "adult" / "adult_full.csv")
    order = np.random.default_rng(4).permutation(len(frame))
    train, control = frame.iloc[order[:n]], frame.iloc[order[n:2 * n]]
    T = typed_table({c: train[c].to_numpy() for c in train.columns})
    C = typed_table({c: control[c].to_numpy() for c in control.columns})
    m = SinglingOutRisk()
    params = validate_params(m.params, {"control": "control", "n_attacks": n_attacks, "mode": "multivariate"})
    ctx = make_context(seed=1)
    ctx.tables = {"control": C}.__getitem__
    out, wall, cpu = timed(lambda: m.compute(T, T, params, ctx))
    show("singling-out-risk multivariate (n_cols 3)", n, wall, cpu,
         f"= {out['singling-out-risk']:.4f}, {int(out['singling-out-risk.attempts'])} attempts for "
         f"{int(out['singling-out-risk.queries'])} queries")

    (X,), n_num = encode((T,), list(train.columns), "bench", ("original",))
    X[:, n_num:][X[:, n_num:] == -1] = np.nan
    X = distinct_records(X)
    numeric = np.arange(X.shape[1]) < n_num
    (qc, qo, qv), _ = multivariate_queries(X, numeric, np.random.default_rng(1), n_attacks, 3, None)
    ranks = Ranks(X)
    counts, wall, cpu = timed(lambda: ranks.counts(qc, qo, qv))
    show(f"count {len(qc)} queries: rank codes (Ranks.counts)", len(X), wall, cpu, f"(single {(counts == 1).sum()})")
    single, wall, cpu = timed(lambda: ranks.single(qc, qo, qv))
    show("  exactly one: rank codes + 1/16 prefilter", len(X), wall, cpu, f"(single {single.sum()})")

    def dense():
        return np.concatenate([conjunction_counts_dense(X, qc[i:i + 200], qo[i:i + 200], qv[i:i + 200])
                               for i in range(0, len(qc), 200)])
    d, wall, cpu = timed(dense)
    show("  floats, every query x every row (blocks)", len(X), wall, cpu, f"(same counts: {(d == counts).all()})")

    def duck():
        import duckdb
        import pyarrow as pa

        con = duckdb.connect()
        con.execute("SET threads TO 2")
        rows, cols = np.indices(X.shape)
        present = ~np.isnan(X.ravel())
        data = pa.table({"r": rows.ravel(), "c": cols.ravel(),
                         "v": pa.array(X.ravel(), mask=~present)})
        queries = pa.table({"q": np.repeat(np.arange(len(qc)), 3), "c": qc.ravel(), "op": qo.ravel(),
                            "v": qv.ravel()})
        con.register("data", data)
        con.register("queries", queries)
        got = con.execute(f"""
            WITH hits AS (
              SELECT q.q, d.r FROM queries q JOIN data d ON d.c = q.c
              WHERE CASE q.op WHEN {EQ} THEN d.v = q.v WHEN {NE} THEN d.v <> q.v WHEN {GT} THEN d.v > q.v
                              WHEN {LT} THEN d.v < q.v WHEN {GE} THEN d.v >= q.v WHEN {LE} THEN d.v <= q.v
                              WHEN {NULL} THEN d.v IS NULL WHEN {NOT_NULL} THEN d.v IS NOT NULL END
              GROUP BY q.q, d.r HAVING count(*) = 3)
            SELECT q, count(*) AS n FROM hits GROUP BY q""").fetchnumpy()
        out = np.zeros(len(qc), dtype=np.int64)
        out[got["q"]] = got["n"]
        return out
    d, wall, cpu = timed(duck)
    show("  DuckDB: join on the column, group by", len(X), wall, cpu, f"(same counts: {(d == counts).all()})")

    df = pd.DataFrame(X, columns=[f"c{j}" for j in range(X.shape[1])])
    sym = {EQ: "==", NE: "!=", GT: ">", LT: "<", GE: ">=", LE: "<="}

    def loop():
        def text(c, o, v):
            return " and ".join(f"c{j} {sym[op]} {x!r}" for j, op, x in zip(c.tolist(), o.tolist(), v.tolist()))
        return np.array([len(df.query(text(c, o, v))) for c, o, v in zip(qc[:100], qo[:100], qv[:100])])
    d, wall, cpu = timed(loop)
    show("  pandas .query per query (100, x20)", len(X), wall * len(qc) / 100, cpu * len(qc) / 100,
         f"(same counts: {(d == counts[:100]).all()})")

    # the generator's work: 1000 attempts (random records and columns), nearly all failing
    rng = np.random.default_rng(2)
    med = np.array([np.median(X[~np.isnan(X[:, j]), j]) if numeric[j] else np.nan for j in range(X.shape[1])])
    rows = rng.integers(0, len(X), 1000)
    ac = np.sort(np.argsort(rng.random((1000, X.shape[1])), axis=1)[:, :3], axis=1)
    av = X[rows[:, None], ac]
    ao = np.where(numeric[ac], np.where(av > med[ac], GE, LE), EQ)
    full, wall, cpu = timed(lambda: ranks.counts(ac, ao, av) == 1)
    show("1000 attempts: rank codes, full counts", len(X), wall, cpu, f"(single {full.sum()})")
    pre, wall, cpu = timed(lambda: ranks.single(ac, ao, av))
    show("  rank codes + 1/16 prefilter", len(X), wall, cpu, f"(single {pre.sum()}, same: {(pre == full).all()})")


def option(args: list[str], name: str, default: int) -> int:
    return int(args[args.index(name) + 1]) if name in args else default


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT / "plugins"))
    sys.path.insert(0, str(ROOT))
    print(f"machine: {machine()}", flush=True)
    if "--singling-only" in argv:
        bench_singling(option(argv, "--singling-records", 22_000), option(argv, "--singling-attacks", 2000))
        print(f"machine: {machine()}", flush=True)
        return
    bench_dbrl(option(argv, "--dbrl-records", 1_000_000))
    bench_interval(option(argv, "--interval-records", 10_000_000))
    bench_rmd(option(argv, "--rmd-records", 100_000))
    bench_singling(option(argv, "--singling-records", 22_000), option(argv, "--singling-attacks", 2000))
    print(f"machine: {machine()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
