"""Benchmark of (alpha_i,k)-GCA and (alpha,k)-GCA on all 45,222 Adult records.

QI: age (continuous), workclass, education, marital-status, relationship, race (nominal) --
seed 002's first six; S = occupation with the grading of SPEC section 2. Prints the
wall-clock seconds of each run (the issue's budget: under 10 s), the number of classes and
of suppressed records, and the lossy-join reconstruction distance::

    python tests/benchmarks/bench_gca.py

Importing this module has no side effects.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT / "workflows" / "data" / "adult" / "adult_full.csv"
GRADING = ROOT / "workflows" / "data" / "gradings" / "adult-occupation.yaml"
QI = {"age": "continuous", "workclass": "nominal", "education": "nominal", "marital-status": "nominal",
      "relationship": "nominal", "race": "nominal"}


def load_adult(path: Path = ADULT, rows: int | None = None) -> Any:
    """Adult typed for GCA (first ``rows`` records, default all 45,222)."""
    from anonflow.grading import load_grading
    from anonflow.schema import ROW, Attribute, Typing
    from anonflow.table import TypedTable

    table = pacsv.read_csv(path).select([*QI, "occupation"])
    if rows is not None:
        table = table.slice(0, rows)
    table = table.add_column(0, ROW, pa.array(np.arange(table.num_rows), pa.int64()))
    grading = load_grading(str(GRADING), GRADING.parent, where="bench")
    attrs = tuple(Attribute(c, "quasi", t) for c, t in QI.items()) + (
        Attribute("occupation", "sensitive", "nominal", options={"grading": grading}),)
    return TypedTable(table, Typing(attrs))


def run_once(table: Any, algorithm: str, params: dict[str, Any], seed: int = 0) -> dict[str, float]:
    from anonflow.testing import make_context
    from anonflow_std.utility.reconstruction import ReconstructionDistance
    from anonflow_std.clustering.gca import AlphaIKGca, AlphaKGca

    algo = {"alpha-i-k-gca": AlphaIKGca(), "alpha-k-gca": AlphaKGca()}[algorithm]
    full = {"choice": "nearest", "sensitive": None, **({"per": "value"} if algorithm == "alpha-i-k-gca" else {}),
            **params}
    ctx = make_context(seed=seed)
    algo.check(full, table=table)
    t0 = time.perf_counter()
    out = algo.run(table, full, ctx)
    seconds = time.perf_counter() - t0
    labels = out.data.column("_class")
    dis = ReconstructionDistance().compute(None, out, {"form": "lossy-join", "sensitive": None}, ctx)
    return {"seconds": seconds, "classes": float(dis["reconstruction-distance.classes"]),
            "suppressed": float(labels.null_count), "dis": dis["reconstruction-distance"]}


def main() -> None:
    table = load_adult()
    print(f"Adult: {table.num_rows} records, QI = {', '.join(QI)}; S = occupation")
    print(f"{'algorithm':<15} {'params':<28} {'seconds':>8} {'classes':>8} {'suppr.':>7} {'Dis':>8}")
    runs = [("alpha-i-k-gca", {"k": k}) for k in (2, 4, 10)]
    runs += [("alpha-i-k-gca", {"k": 4, "choice": "random"}), ("alpha-i-k-gca", {"k": 4, "per": "level"})]
    runs += [("alpha-k-gca", {"k": k, "alpha": 0.5}) for k in (2, 4, 10)]
    runs += [("alpha-k-gca", {"k": 4, "alpha": 0.2})]
    for algorithm, params in runs:
        r = run_once(table, algorithm, params)
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        print(f"{algorithm:<15} {shown:<28} {r['seconds']:8.2f} {r['classes']:8.0f} {r['suppressed']:7.0f} "
              f"{r['dis']:8.4f}")


if __name__ == "__main__":
    main()
