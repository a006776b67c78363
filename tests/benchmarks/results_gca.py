"""Seed 002's experiment with its generalization baseline (docs/results-gca.md).

Run as a script::

    python tests/benchmarks/results_gca.py baseline    # k = 2..10, alpha = 0.2..0.6, Ds at k = 5

It runs workflows/gca-adult.yaml through the engine, exactly as ``anonflow run`` with
``--set`` does (one store, so unchanged steps come from the cache), for the settings of SPEC
section 7, with the lattice baseline ('generalized') at 0 % suppression and at the
suppression limits given (then scoring every satisfying node, ``candidates: satisfying``),
and prints Markdown rows: the reconstruction distance Dis of the three methods (the
baseline's over all 10,000 records, a suppressed one counting as err = 1), the baseline's chosen node, its classes and suppressed records, and Ds(T_SA).
Importing the module runs nothing.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "workflows" / "gca-adult.yaml"


def run(store_dir: Path, k: int, alpha: float, suppression: float) -> dict[str, object]:
    from anonflow.runner import Runner
    from anonflow.spec import load_workflow
    from anonflow.store import Store

    sets = [f"graded.k={k}", f"uniform.k={k}", f"uniform.alpha={alpha}", f"generalized.model_params.k={k}",
            f"generalized.model_params.alpha={alpha}", f"generalized.suppression={suppression}"]
    if suppression:
        # with suppression a coarser node may suppress fewer records: score every satisfying node
        sets.append("generalized.candidates=satisfying")
    spec = load_workflow(WORKFLOW, sets)
    store = Store(store_dir / "results.duckdb")
    try:
        result = Runner(store).run(spec, output_dir=store_dir)
    finally:
        store.close()
    m = result.metrics
    notes = next(s["notes"] for s in result.steps if s["step"] == "generalized")
    node = next(n for n in notes if "chosen node" in n).split("chosen node ")[1].split("]")[0] + "]"
    suppressed = next((s["rows"] for s in result.steps if s["step"] == "generalized"), None)
    return {"graded": m["graded-scores.reconstruction-distance"],
            "uniform": m["uniform-scores.reconstruction-distance"],
            # Dis over all 10,000 records, a suppressed one counting as err = 1
            "generalized": m.get("generalized-scores.reconstruction-distance.with_suppressed",
                                 m["generalized-scores.reconstruction-distance"]),
            "cells": m["generalized-scores.reconstruction-distance.mean_cells"],
            "classes": int(m["generalized-scores.k-anonymity.classes"]),
            "published": int(suppressed or 0),
            "ds_graded": m["graded-scores.sensitivity-distance"],
            "ds_uniform": m["uniform-scores.sensitivity-distance"],
            "ds_generalized": m["generalized-scores.sensitivity-distance"],
            "node": node}


def baseline(limits: tuple[float, ...] = (0.0, 0.01, 0.05)) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(tmp)
        settings = [(k, 0.5) for k in range(2, 11)] + [(4, a) for a in (0.2, 0.3, 0.35, 0.4, 0.6)]
        print("| k | alpha | suppression | (alpha_i,k)-GCA Dis | (alpha,k)-GCA Dis | baseline Dis | baseline "
              "mean cells V | classes | published | baseline node |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for k, alpha in settings:
            for limit in limits:
                r = run(store_dir, k, alpha, limit)
                print(f"| {k} | {alpha} | {limit:.0%} | {r['graded']:.4f} | {r['uniform']:.4f} | "
                      f"{r['generalized']:.6f} | {r['cells']:,.0f} | {r['classes']} | {r['published']:,} | "
                      f"{r['node']} |", flush=True)
        print()
        print("| suppression | Ds(T_SA) (alpha_i,k)-GCA | (alpha,k)-GCA, alpha = 0.5 | baseline |   (k = 5)")
        print("| --- | --- | --- | --- |")
        for limit in limits:
            r = run(store_dir, 5, 0.5, limit)
            print(f"| {limit:.0%} | {r['ds_graded']:.4f} | {r['ds_uniform']:.4f} | {r['ds_generalized']:.4f} |",
                  flush=True)


if __name__ == "__main__":
    if (sys.argv[1] if len(sys.argv) > 1 else "baseline") != "baseline":
        sys.exit("usage: results_gca.py baseline")
    baseline()
