"""sdcMicro's risk measures: ``individual-risk`` on scaled Adult and ``suda2`` on Adult, each next
to the DuckDB ``GROUP BY`` it cannot do without (the "floor").

Run as a script (after ``pip install '.[test]'``)::

    python tests/benchmarks/bench_risk.py [--records 1000000] [--work DIR] [--keep]

1. The data: ARX's Adult (``workflows/data/arx/adult.csv``, 30,162 records, 8 QIs: sex, age,
   race, marital-status, education, native-country, workclass, occupation) and the same scaled
   to ``--records`` records by ``make_scaled.py`` (seed 1), written as Parquet in WORK (default
   ``anonflow-risk`` in the system's temp folder) with a sampling-weight column ``w`` (uniform in
   [1, 1000], seed 2) added.
2. Each measurement runs in its own subprocess, which reads the Parquet file into an Arrow table
   (as an in-memory typed table; DuckDB scans it where it lies), then runs the part; it prints
   the part's wall seconds and the subprocess's peak RSS, and the peak RSS of a subprocess that
   only reads the file (``load``), so the difference is what the part adds (reading the file
   and the imports usually set the peak); then it runs the part again under ``tracemalloc``
   and prints the peak of what Python and numpy allocate in it ("traced"; DuckDB's memory is
   not traced).

   * ``all-risk``: every risk metric a release is scored with, one after the other on the
     scaled file: ``reidentification-risk`` (threshold 0.2), ``sample-uniqueness``,
     ``population-uniqueness`` (ARX's USA population, 317,238,626), ``individual-risk``
     (``population_size`` 317,238,626) and ``individual-risk`` (``weight: w``); the seconds of
     each are printed too (target: all of them together within 10 s on 1M records).
   * ``individual-risk`` (``weight: w``, method approx, then exact) on the scaled file; floor:
     ``SELECT count(*), sum(w) FROM t GROUP BY <8 QIs>`` through the same ``ctx.sql`` (one
     DuckDB thread, as every plugin query runs).
   * ``suda2`` (``max_size`` 3, then all 8 sizes) on Adult; floor: the counts of every
     combination of up to 3 QIs, ``GROUP BY GROUPING SETS`` (92 sets), through ``ctx.sql``.

The machine (CPUs, load average) is printed first and last. Benchmarks print figures; nothing
here asserts a timing. Importing this module has no side effects.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT / "workflows" / "data" / "arx" / "adult.csv"
QIS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]


def machine() -> str:
    return f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"


def prepare(work: Path, records: int) -> tuple[Path, Path]:
    """The scaled file with weights and Adult with weights, as Parquet in ``work``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).parent))
    from make_scaled import read_source, scaled_chunks

    source, _ = read_source(ADULT)
    adult = work / "adult-w.parquet"
    scaled = work / f"adult-arx-{records}-1-w.parquet"
    rng = np.random.default_rng(2)
    if not adult.exists():
        pq.write_table(source.append_column("w", pa.array(rng.uniform(1, 1000, source.num_rows))), adult)
    if not scaled.exists():
        chunks = [c for c in scaled_chunks(source, records, 1)]
        table = pa.concat_tables(chunks)
        table = table.append_column("w", pa.array(np.random.default_rng(2).uniform(1, 1000, table.num_rows)))
        pq.write_table(table, scaled)
    return scaled, adult


def part(name: str, path: str) -> None:
    """One measurement, in this (sub)process: prints a JSON line."""
    import pyarrow.parquet as pq

    from anonflow.params import validate_params
    from anonflow.testing import make_context, typed_table
    from anonflow_std.risk.individual import IndividualRisk
    from anonflow_std.risk.reidentification import (PopulationUniquenessMetric, ReidentificationRisk,
                                                    SampleUniqueness)
    from anonflow_std.risk.suda import Suda2

    data = pq.read_table(path)
    t = typed_table({c: data.column(c) for c in data.column_names}, quasi={q: "nominal" for q in QIS})
    ctx = make_context()
    by = ", ".join(f'"{q}"' for q in QIS)
    usa = 317_238_626  # ARX's default population model (ARXPopulationModel.Region.USA)
    every = [(ReidentificationRisk, {"threshold": 0.2}), (SampleUniqueness, {}),
             (PopulationUniquenessMetric, {"population_size": usa}),
             (IndividualRisk, {"population_size": usa}), (IndividualRisk, {"weight": "w"})]

    def all_risk() -> dict:
        values: dict = {}
        for cls, params in every:
            start = time.perf_counter()
            out = cls().compute(None, t, validate_params(cls.params, params), ctx)
            label = cls.name + (".w" if "weight" in params else "")
            values[f"seconds.{label}"] = time.perf_counter() - start
            values.update({f"{label}" if k == cls.name else f"{label}.{k.split('.', 1)[1]}": v
                           for k, v in out.items()})
        return values

    runs = {
        "load": lambda: None,
        "all-risk": all_risk,
        "individual-approx": lambda: IndividualRisk().compute(
            None, t, validate_params(IndividualRisk.params, {"weight": "w"}), ctx),
        "individual-exact": lambda: IndividualRisk().compute(
            None, t, validate_params(IndividualRisk.params, {"weight": "w", "method": "exact"}), ctx),
        "groupby": lambda: ctx.sql(f"SELECT count(*) AS f, sum(w) AS F FROM t GROUP BY {by}", t=t).num_rows,
        "suda2-3": lambda: Suda2().compute(None, t, validate_params(Suda2.params, {"max_size": 3}), ctx),
        "suda2-all": lambda: Suda2().compute(None, t, validate_params(Suda2.params, {"max_size": None}), ctx),
        "grouping-sets": lambda: ctx.sql(
            "SELECT count(*) AS n FROM t GROUP BY GROUPING SETS ("
            + ", ".join("(" + ", ".join(f'"{QIS[j]}"' for j in S) + ")"
                        for k in (1, 2, 3) for S in combinations(range(len(QIS)), k)) + ")", t=t).num_rows,
    }
    start = time.perf_counter()
    out = runs[name]()
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()  # a second run, traced: numpy's and Python's allocations (not DuckDB's)
    runs[name]()
    traced = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    summary = {k: v for k, v in out.items() if "." not in k or k.count(".") == 1 or name == "all-risk"} \
        if isinstance(out, dict) else out
    print(json.dumps({"part": name, "records": data.num_rows, "seconds": wall, "peak_rss_mib": peak,
                      "traced_mib": traced,
                      "values": summary}))


def measure(name: str, path: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--part", name, str(path)], capture_output=True, text=True)
    if proc.returncode:
        print(proc.stderr)
        raise SystemExit(f"part {name} failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--part"]:
        part(args[1], args[2])
        return
    records = int(args[args.index("--records") + 1]) if "--records" in args else 1_000_000
    work = Path(args[args.index("--work") + 1]) if "--work" in args else Path(tempfile.gettempdir()) / "anonflow-risk"
    created = not work.exists()
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}")
    import duckdb

    print(f"duckdb {duckdb.__version__}; plugin queries run on one DuckDB thread (ctx.sql)")
    start = time.perf_counter()
    scaled, adult = prepare(work, records)
    print(f"data: {scaled.name}, {adult.name} ready in {time.perf_counter() - start:.1f} s")
    for path, parts in ((scaled, ("load", "groupby", "all-risk", "individual-approx", "individual-exact")),
                        (adult, ("load", "grouping-sets", "suda2-3", "suda2-all"))):
        print(f"\n{path.name}")
        print(f"{'part':<20} {'records':>9} {'seconds':>8} {'peak RSS MiB':>13} {'traced MiB':>11}  values")
        for name in parts:
            r = measure(name, path)
            vals = r["values"]
            if isinstance(vals, dict):
                keep = [k for k in vals if k.split(".")[-1] in (
                    "individual-risk", "expected_reidentifications", "max", "above_threshold", "keys",
                    "suda2", "records_with_msu", "msus", "dis_max", "score_max")]
                shown = ", ".join(f"{k.split('.', 1)[-1]}={vals[k]:.6g}" for k in keep)
                if name == "all-risk":  # each metric's seconds and headline, in full
                    shown = ", ".join(f"{k}={vals[k]:.6g}" for k in vals if k.startswith("seconds.") or k in (
                        "reidentification-risk", "reidentification-risk.classes",
                        "reidentification-risk.prosecutor.records_at_risk", "sample-uniqueness",
                        "population-uniqueness", "population-uniqueness.dankar_model", "individual-risk",
                        "individual-risk.w"))
            else:
                shown = "" if vals is None else f"groups={vals}"
            print(f"{name:<20} {r['records']:>9,} {r['seconds']:>8.3f} {r['peak_rss_mib']:>13.0f} "
                  f"{r['traced_mib']:>11.1f}  {shown}")
    print(f"\nmachine at the end: {machine()}")
    if created and "--keep" not in args:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
