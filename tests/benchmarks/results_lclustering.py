"""The L-clustering experiment of seed 001 on all of UCI Adult (docs/results-lclustering.md).

Run as a script::

    python tests/benchmarks/results_lclustering.py sweep    # l = 2..12 at |QI| = 2, 5, 8
    python tests/benchmarks/results_lclustering.py sweep 3,4,6,7   # ... at other |QI|
    python tests/benchmarks/results_lclustering.py reruns   # 20 seeds at |QI| = 5, l = 7

It runs the ``l-clustering`` plugin as the step ``clustered`` of
workflows/l-clustering-adult.yaml does (same code, same step seed), so every row can be
reproduced with ``anonflow run`` and ``--set``; the reruns are the workflow run with
``--seed 1`` .. ``--seed 20``. It prints Markdown rows: L(D, D*), RL (in %), the number of
classes and the wall seconds. Importing the module runs nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT / "workflows" / "data" / "adult" / "adult_full.csv"
QI = ["age", "sex", "race", "marital-status", "education", "native-country", "workclass", "income"]
SEED = 20261125


def runner():
    try:
        from anonflow_std.lclustering import GeneralizationLoss, LClustering
    except ImportError:
        sys.path.insert(0, str(ROOT / "plugins"))
        from anonflow_std.lclustering import GeneralizationLoss, LClustering
    from anonflow.runner import step_seed
    from anonflow.testing import make_context, typed_table

    data = pacsv.read_csv(ADULT)

    def run(d: int, l: int, seed: int) -> dict[str, float]:
        qi = QI[:d]
        # the columns in the file's order, as the typing step keeps them (the order of the
        # QIs decides which distinct QI tuple the seeded tie order puts first)
        keep = [c for c in data.column_names if c in qi or c == "occupation"]
        table = typed_table({c: data.column(c) for c in keep},
                            quasi={c: "continuous" if c == "age" else "nominal" for c in qi},
                            sensitive={"occupation": "nominal"})
        params = {"l": l, "weights": None, "resolution": None}
        algo = LClustering()
        algo.check(params, table=table)
        t0 = time.perf_counter()
        out = algo.run(table, params, make_context(seed=step_seed(seed, "clustered")))
        seconds = time.perf_counter() - t0
        g = GeneralizationLoss().compute(table, out, {"weights": None, "resolution": None}, make_context())
        loss, full = g["generalization-loss"], g["generalization-loss.full"]
        return {"loss": loss, "rl": 100.0 * loss / full, "classes": int(out.classes().max()) + 1,
                "seconds": seconds}

    return run


def main(what: str, dims: tuple[int, ...] = (2, 5, 8)) -> None:
    run = runner()
    if what == "sweep":
        print("| \\|QI\\| | l | L(D,D*) | RL (%) | classes | seconds |")
        print("| --- | --- | --- | --- | --- | --- |")
        for d in dims:
            for l in range(2, 13):
                r = run(d, l, SEED)
                print(f"| {d} | {l} | {r['loss']:.0f} | {r['rl']:.4f} | {r['classes']} | {r['seconds']:.1f} |",
                      flush=True)
    else:
        d, l = 5, 7
        print(f"| seed | L(D,D*) | RL (%) | classes | seconds |   (|QI| = {d}, l = {l})")
        print("| --- | --- | --- | --- | --- |")
        for seed in range(1, 21):
            r = run(d, l, seed)
            print(f"| {seed} | {r['loss']:.0f} | {r['rl']:.4f} | {r['classes']} | {r['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sweep",
         tuple(int(x) for x in sys.argv[2].split(",")) if len(sys.argv) > 2 else (2, 5, 8))
