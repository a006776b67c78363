"""Benchmark of the ``maasae`` plugin on all of UCI Adult (SPEC section 4's setup).

37,290 records (Adult without missing values, fnlwgt with exactly 6 digits); QI = age
(continuous), sex, race, education, native-country, workclass (nominal), fnlwgt (semantic);
S = occupation; k = 10, p = 5. Runs the plugin as a workflow step does (``check`` then
``run`` with a seeded context) once per objective and prints wall-clock and CPU seconds::

    python tests/benchmarks/bench_maasae.py              # apf, apf-safe, min-il
    python tests/benchmarks/bench_maasae.py apf 12 7     # one objective, k, p

The requirement is under 60 s per run on the project's 2-core machine. Importing this
module has no side effects.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

ADULT = Path(__file__).resolve().parents[2] / "workflows" / "data" / "adult" / "adult_full.csv"
QI = {"age": "continuous", "sex": "nominal", "race": "nominal", "education": "nominal",
      "native-country": "nominal", "workclass": "nominal", "fnlwgt": "semantic"}


def load_adult(path: Path = ADULT) -> Any:
    """Typed Adult restricted to 6-digit fnlwgt (read as text), S = occupation."""
    from anonflow.schema import ROW, Attribute, Typing
    from anonflow.table import TypedTable

    table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types={"fnlwgt": pa.string()}))
    table = table.filter(pc.equal(pc.utf8_length(table["fnlwgt"]), 6)).select([*QI, "occupation"])
    table = table.add_column(0, ROW, pa.array(np.arange(table.num_rows), pa.int64()))
    attrs = tuple(Attribute(c, "quasi", t) for c, t in QI.items()) + (Attribute("occupation", "sensitive", "nominal"),)
    return TypedTable(table, Typing(attrs))


def run_once(table: Any, k: int, p: int, objective: str, seed: int = 0) -> tuple[Any, float, float, list[str]]:
    """(output, wall seconds, CPU seconds, notes) of one run of the plugin."""
    from anonflow.testing import make_context
    from anonflow_std.microaggregation.maasae import Maasae

    params = {"k": k, "p": p, "objective": objective}
    algo = Maasae()
    ctx = make_context(seed=seed)
    t0, c0 = time.perf_counter(), time.process_time()
    algo.check(params, table=table)
    out = algo.run(table, params, ctx)
    return out.replace(claims=algo.claims(params)), time.perf_counter() - t0, time.process_time() - c0, ctx.notes


def main(argv: list[str]) -> None:
    objectives = argv[:1] or ["apf", "apf-safe", "min-il"]
    k = int(argv[1]) if len(argv) > 1 else 10
    p = int(argv[2]) if len(argv) > 2 else 5
    table = load_adult()
    print(f"Adult: {table.num_rows} records, |QI| = {len(QI)}, k = {k}, p = {p}")
    for objective in objectives:
        _, wall, cpu, notes = run_once(table, k, p, objective)
        print(f"{objective:9s} {wall:6.1f} s wall  {cpu:6.1f} s CPU   {'; '.join(notes)}")


if __name__ == "__main__":
    main(sys.argv[1:])
