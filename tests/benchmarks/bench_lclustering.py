"""Benchmark of the ``l-clustering`` algorithm plugin on all of UCI Adult.

Run as a script::

    python tests/benchmarks/bench_lclustering.py            # |QI| = 8, l = 2, 5, 12
    python tests/benchmarks/bench_lclustering.py 2 5 8      # also |QI| = 2 and 5

It runs the plugin (encoding, clustering, publication of the readable and structured
values) on the 45,222 records with the paper's attributes (age ordered; sex, race,
marital-status, education, native-country, workclass, income unordered; S = occupation)
and prints wall and CPU seconds, the number of classes and RL. The requirement is under
60 s for |QI| = 8, l = 5 on a 2-core machine. Importing the module runs nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT / "workflows" / "data" / "adult" / "adult_full.csv"
QI = ["age", "sex", "race", "marital-status", "education", "native-country", "workclass", "income"]
LS = (2, 5, 12)


def main(dims: list[int]) -> None:
    try:
        from anonflow_std.clustering.lclustering import LClustering
        from anonflow_std.utility.generalized_loss import RelativeLoss
    except ImportError:
        sys.path.insert(0, str(ROOT / "plugins"))
        from anonflow_std.clustering.lclustering import LClustering
        from anonflow_std.utility.generalized_loss import RelativeLoss
    from anonflow.testing import make_context, typed_table

    data = pacsv.read_csv(ADULT)
    print(f"{'|QI|':>4} {'l':>3} {'wall s':>7} {'cpu s':>7} {'classes':>8} {'RL':>9}")
    for d in dims:
        qi = QI[:d]
        table = typed_table({c: data.column(c) for c in qi + ["occupation"]},
                            quasi={c: "continuous" if c == "age" else "nominal" for c in qi},
                            sensitive={"occupation": "nominal"})
        for l in LS:
            params = {"l": l, "weights": None, "resolution": None}
            algo = LClustering()
            algo.check(params, table=table)
            w0, c0 = time.perf_counter(), time.process_time()
            out = algo.run(table, params, make_context(seed=20261125))
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            rl = RelativeLoss().compute(table, out, {"weights": None, "resolution": None}, make_context())
            classes = int(out.classes().max()) + 1
            print(f"{d:>4} {l:>3} {wall:7.2f} {cpu:7.2f} {classes:>8} {rl['relative-loss']:9.5f}", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [8])
