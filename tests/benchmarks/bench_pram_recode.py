"""Benchmark of ``pram``, ``top-bottom-coding`` and ``global-recode`` at 10 million synthetic
records, each next to a floor measured in the same run:

- PRAM: the floor is the least any implementation does: dictionary-encode the column (Arrow),
  one uniform per record and an inverse-CDF ``searchsorted`` (numpy), the new values taken
  (Arrow), and the table written back with the new column (DuckDB ``POSITIONAL JOIN``);
- the recodes: the floor is the same ``CASE`` written as a plain DuckDB ``CREATE TABLE AS``
  (and the numpy ``np.where`` / ``np.searchsorted`` on the column in memory, for scale).

The records live in a DuckDB store on disk, as a step's input does in a run; each plugin runs
through ``make_context`` on that store. Run::

    python tests/benchmarks/bench_pram_recode.py [--records N]

Importing this module has no side effects.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

RECORDS = 10_000_000


def synthetic(n: int, seed: int = 0) -> pa.Table:
    """``n`` records: ``cat12`` (12 categories, skewed), ``cat40`` (40, uniform), ``region`` (5
    strata), ``income`` (float, lognormal) and ``age`` (int 0..99)."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, 13)
    cat12 = rng.choice(12, n, p=w / w.sum())
    names12 = pa.array([f"c{i:02d}" for i in range(12)])
    names40 = pa.array([f"k{i:02d}" for i in range(40)])
    regions = pa.array(["north", "south", "east", "west", "centre"])
    return pa.table({
        "_row": pa.array(np.arange(n, dtype=np.int64)),
        "cat12": names12.take(pa.array(cat12)),
        "cat40": names40.take(pa.array(rng.integers(0, 40, n))),
        "region": regions.take(pa.array(rng.integers(0, 5, n))),
        "income": pa.array(rng.lognormal(10, 1, n)),
        "age": pa.array(rng.integers(0, 100, n)),
    })


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run(n: int = RECORDS) -> list[tuple[str, float, float]]:
    """(what, plugin seconds, floor seconds) per benchmark."""
    from anonflow.api import Attribute, Typing, TypedTable
    from anonflow.params import validate_params
    from anonflow.store import Store
    from anonflow.testing import make_context
    from anonflow_std.perturbation.pram import Pram
    from anonflow_std.perturbation.recode import GlobalRecode, TopBottomCoding

    folder = Path(tempfile.mkdtemp(prefix="bench-pram-"))
    store = Store(folder / "bench.duckdb")
    data = synthetic(n)
    stored = store.derive_table("SELECT * FROM src", src=data)
    del data
    typing = Typing((Attribute("cat12", "quasi", "nominal"), Attribute("cat40", "quasi", "nominal"),
                     Attribute("region", "insensitive"), Attribute("income", "quasi", "continuous"),
                     Attribute("age", "quasi", "continuous")))
    table = TypedTable(None, typing, stored=stored.stored)
    results = []

    def plugin(algo: Any, params: dict[str, Any]) -> float:
        ctx = make_context(store=store, seed=1)
        p = validate_params(algo.params, params)
        seconds, out = timed(lambda: algo.run(table, p, ctx))
        store.discard(out)
        return seconds

    def pram_floor(column: str) -> float:
        def work() -> None:
            col = table.column(column)
            enc = pc.dictionary_encode(col.combine_chunks())
            codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            L = len(enc.dictionary)
            M = np.full((L, L), 0.2 / (L - 1))
            np.fill_diagonal(M, 0.8)
            flat = (np.cumsum(M, axis=1) + np.arange(L)[:, None]).ravel()
            u = np.random.default_rng(0).random(codes.size)
            new = np.searchsorted(flat, codes + u, side="right") - codes * L
            gen = pa.table({column: enc.dictionary.take(pa.array(new))})
            others = ", ".join(f't."{c}"' for c in table.columns if c != column)
            out = store.derive_table(f'SELECT {others}, g."{column}" FROM base t POSITIONAL JOIN gen g',
                                     base=table, gen=gen)
            store.discard(out)
        return timed(work)[0]

    def sql_floor(expr: str) -> float:
        def work() -> None:
            out = store.derive_table(f"SELECT *, {expr} AS x FROM base", base=table)
            store.discard(out)
        return timed(work)[0]

    results.append(("pram cat40 (invariant, 40 categories)",
                    plugin(Pram(), {"columns": ["cat40"]}), pram_floor("cat40")))
    results.append(("pram cat12 + 5 strata + linked cat40",
                    plugin(Pram(), {"columns": ["cat12"], "strata": ["region"], "linked": {"cat12": ["cat40"]}}),
                    pram_floor("cat12")))
    results.append(("top-bottom-coding income (top and bottom)",
                    plugin(TopBottomCoding(), {"columns": {"income": {"top": 200000, "bottom": 1000,
                                                                      "bottom_value": 0}}}),
                    sql_floor("CASE WHEN income > 200000 THEN 200000 WHEN income < 1000 THEN 0 ELSE income END")))
    breaks = [-1, 17, 25, 35, 45, 55, 65, 99]
    case = " ".join(f"WHEN age > {a} AND age <= {b} THEN '({a},{b}]'" for a, b in zip(breaks, breaks[1:]))
    results.append(("global-recode age (7 intervals, bounds)",
                    plugin(GlobalRecode(), {"columns": {"age": {"breaks": breaks}}}),
                    sql_floor(f"CASE {case} END")))
    results.append(("global-recode cat40 (merge 20 into 2)",
                    plugin(GlobalRecode(), {"columns": {"cat40": {"merge": {
                        "low": [f"k{i:02d}" for i in range(10)], "high": [f"k{i:02d}" for i in range(30, 40)]}}}}),
                    sql_floor("CASE WHEN cat40 IN ('k00','k01','k02') THEN 'low' ELSE cat40 END")))
    # numpy, on the column in memory, for scale
    age = table.column("age").to_numpy()
    results.append(("  (numpy: searchsorted of age into the breaks)", float("nan"),
                    timed(lambda: np.searchsorted(np.array(breaks), age, side="left"))[0]))
    store.close()
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    args = parser.parse_args()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"{args.records:,} synthetic records, {os.cpu_count()} CPU(s); load before: {load}")
    for what, seconds, floor in run(args.records):
        ratio = f"{seconds / floor:5.1f}x" if seconds == seconds else "     "
        plugin = f"{seconds:7.2f} s" if seconds == seconds else "        "
        print(f"  {what:46s} {plugin}   floor {floor:6.2f} s  {ratio}")
    print(f"load after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
