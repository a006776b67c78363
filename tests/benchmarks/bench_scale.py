"""Census-scale benchmark: whole workflows on scaled Adult (1M, 3M, 10M records) under a memory
limit, next to what DuckDB alone needs to load, count and write the same data (the "floor").

Run as a script (from a fresh clone, after ``pip install '.[test]'``)::

    python tests/benchmarks/bench_scale.py [--sizes 1000000,3000000,10000000] [--memory 2GB]
        [--threads N] [--work DIR] [--format csv|parquet] [--mdav-records 1000000]
        [--gca-records N] [--only lattice,mdav,gca,floor] [--keep]

For each size N of ``--sizes``:

1. The data: ``make_scaled.py N 1 --source arx`` writes ARX's Adult scaled to N records as
   ``WORK/adult-arx-N-1.csv`` (``.parquet`` with ``--format parquet``); a file already there
   is reused. ``--work`` defaults to ``anonflow-scale`` in the system's temp folder.
2. ``floor``: in a subprocess, DuckDB under the same memory limit (and threads, if given)
   reads the file into a table of a fresh database file in WORK (standing in for loading),
   COPYs it to Parquet, counts the classes of the 8 QIs with a GROUP BY, and writes the table
   sorted (ORDER BY ALL) to CSV and to Parquet with COPY. Prints each part's seconds, the
   total (the floor) and, apart, "sorted COPY" (the two sorted writes).
3. ``lattice``: ARX's workflow (``workflows/arx-adult-k5.yaml``: its typing and hierarchy files)
   on the scaled file with ``resources: {memory, threads}``: the lattice search for
   k-anonymity, k = 5, no suppression, utility loss; an evaluate step (k-anonymity, distinct
   l-diversity with l = 2, loss; ``enforce: false``, since the search does not aim at
   l-diversity and a miss would fail the run); publication to CSV and to Parquet. It is written to
   ``WORK/scale-lattice-N.yaml`` and run by ``anonflow run ... --json --no-cache`` in a
   subprocess (store ``WORK/scale-N.duckdb``, outputs in ``WORK/out-N``; both removed first).
   Prints each step's seconds, the end-to-end wall seconds of the subprocess, the search
   seconds (from the lattice step's note), the time outside the search (wall - search), the
   subprocess's peak RSS, and the ratios (time outside the search) / floor and (publish CSV +
   publish Parquet) / sorted COPY.

Then, once: ``mdav`` on seed 004's Adult scaled to ``--mdav-records`` (default 1,000,000;
``workflows/adult-mdav.yaml``: 6 numeric QIs, k = 10, evaluate sse-il and k-anonymity, publish
Parquet), and ``gca`` only if ``--gca-records N`` is given (``workflows/gca-adult.yaml`` on
that many scaled records; its ``training`` filter and ``sample`` step are removed, so typing
reads the source: the filter keeps rows 0..30,161 only, which would undo the scaling). Each
prints its steps' seconds, wall seconds and peak RSS.

``--only`` picks the parts (default all four). The machine (CPUs, memory, load average, DuckDB
version) is printed first, the load average again at the end. Files this run creates (data,
stores, outputs) are removed at the end unless ``--keep``; files that were already in WORK are
kept. A failed workflow run prints its error and the benchmark goes on. Benchmarks print
figures; nothing here asserts a timing. Importing this module has no side effects.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from script_args import listed_option

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
MAKE_SCALED = ROOT / "tests" / "benchmarks" / "make_scaled.py"
ARX_QI = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]
PARTS = ("lattice", "mdav", "gca", "floor")
RSS_MARK = "@@bench_scale peak_rss_kib"

#: ``python -c`` wrapper: ``anonflow run ...`` in this process, its peak RSS on stderr at exit.
RUN_WRAPPER = f"""
import atexit, resource, sys
atexit.register(lambda: print("{RSS_MARK}", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                              file=sys.stderr, flush=True))
from anonflow.cli import main
main(sys.argv[1:], prog_name="anonflow")
"""

#: ``python -c`` floor: argv = data file, format, database file, output prefix, memory, threads.
FLOOR_CODE = f"""
import json, os, resource, sys, time
import duckdb
data, fmt, db, prefix, memory, threads = sys.argv[1:7]
lit = lambda s: "'" + s.replace("'", "''") + "'"
con = duckdb.connect(db)
con.execute("SET memory_limit = " + lit(memory))
if threads:
    con.execute("SET threads = " + str(int(threads)))
qi = ", ".join('"' + c + '"' for c in {ARX_QI!r})
parts, out = {{}}, {{}}
def timed(name, sql):
    t0 = time.perf_counter()
    row = con.execute(sql).fetchone()
    parts[name] = time.perf_counter() - t0
    return row
source = ("read_csv(" + lit(data) + ", delim = ';', header = true)" if fmt == "csv"
          else "read_parquet(" + lit(data) + ")")
timed("load", "CREATE TABLE t AS SELECT * FROM " + source)
timed("copy parquet", "COPY t TO " + lit(prefix + ".parquet") + " (FORMAT parquet, COMPRESSION zstd)")
out["classes"] = timed("count classes", "SELECT count(*) FROM (SELECT 1 FROM t GROUP BY " + qi + ")")[0]
timed("sorted csv", "COPY (SELECT * FROM t ORDER BY ALL) TO " + lit(prefix + "-sorted.csv")
      + " (HEADER, DELIMITER ',')")
timed("sorted parquet", "COPY (SELECT * FROM t ORDER BY ALL) TO " + lit(prefix + "-sorted.parquet")
      + " (FORMAT parquet, COMPRESSION zstd)")
out["rows"] = con.execute("SELECT count(*) FROM t").fetchone()[0]
con.close()
out["parts"] = parts
out["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out))
"""


# -- options ------------------------------------------------------------------------------

def _option(args: list[str], name: str, default: Any, kind: Any = str) -> Any:
    """Take ``name VALUE`` out of ``args``."""
    if name in args:
        i = args.index(name)
        if i + 1 >= len(args):
            raise SystemExit(f"bench_scale: {name} needs a value")
        value = kind(args[i + 1])
        del args[i: i + 2]
        return value
    return default


def parse(argv: list[str]) -> dict[str, Any]:
    args = list(argv)
    opts = {
        "sizes": listed_option(args, "--sizes", (1_000_000, 3_000_000, 10_000_000), int),
        "only": listed_option(args, "--only", PARTS),
        "memory": _option(args, "--memory", "2GB"),
        "threads": _option(args, "--threads", None, int),
        "work": Path(_option(args, "--work", str(Path(tempfile.gettempdir()) / "anonflow-scale"))),
        "format": _option(args, "--format", "csv"),
        "mdav_records": _option(args, "--mdav-records", 1_000_000, int),
        "gca_records": _option(args, "--gca-records", None, int),
        "keep": "--keep" in args,
    }
    if opts["keep"]:
        args.remove("--keep")
    if args:
        if args in (["-h"], ["--help"]):
            print(__doc__)
            raise SystemExit(0)
        raise SystemExit(f"bench_scale: unexpected argument(s) {' '.join(args)}\n\n{__doc__}")
    if opts["format"] not in ("csv", "parquet"):
        raise SystemExit("bench_scale: --format is csv or parquet")
    unknown = set(opts["only"]) - set(PARTS)
    if unknown:
        raise SystemExit(f"bench_scale: --only takes {','.join(PARTS)}, not {','.join(sorted(unknown))}")
    if any(n < 1 for n in opts["sizes"]):
        raise SystemExit("bench_scale: --sizes must be positive")
    return opts


# -- helpers ------------------------------------------------------------------------------

def machine() -> str:
    import duckdb

    cpus = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
        mem_text = f"{mem:.1f} GB"
    except (ValueError, OSError, AttributeError):
        mem_text = "unknown"
    return (f"machine: {cpus} CPUs ({usable} usable), {mem_text} memory, load average "
            f"{load()}, DuckDB {duckdb.__version__}, Python {sys.version.split()[0]}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def scaled(n: int, source: str, fmt: str, work: Path, created: list[Path]) -> Path:
    """The scaled file, made with make_scaled.py unless it is already in ``work``."""
    path = work / f"adult-{source}-{n}-1.{fmt}"
    if path.exists():
        print(f"data: reusing {path}")
        return path
    proc = subprocess.run([sys.executable, str(MAKE_SCALED), str(n), "1", "--source", source, "--out", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_scale: make_scaled.py failed: {proc.stderr.strip() or proc.stdout.strip()}")
    created.append(path)
    print(f"data: {proc.stdout.strip()}")
    return path


def gb(kib: int | None) -> str:
    return "n/a" if kib is None else f"{kib * 1024 / 1e9:.2f}"


def source_spec(path: Path) -> dict[str, Any]:
    spec: dict[str, Any] = {"path": str(path)}
    if path.suffix == ".csv":
        with open(path, encoding="utf-8") as fh:
            if ";" in fh.readline():
                spec["delimiter"] = ";"
    return spec


def absolute_files(params: Any) -> Any:
    """A step's parameters with every hierarchy (``arx:``) and grading file made absolute, as
    the shipped workflow (in ``workflows/``) means them."""
    if isinstance(params, dict):
        return {k: (str((WORKFLOWS / v).resolve()) if k in ("arx", "grading") and isinstance(v, str)
                    else absolute_files(v)) for k, v in params.items()}
    if isinstance(params, list):
        return [absolute_files(v) for v in params]
    return params


def shipped(name: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))


def resources(opts: dict[str, Any]) -> dict[str, Any]:
    res: dict[str, Any] = {"memory": opts["memory"]}
    if opts["threads"] is not None:
        res["threads"] = opts["threads"]
    return res


def write_workflow(path: Path, wf: dict[str, Any]) -> None:
    import yaml

    path.write_text("# written by tests/benchmarks/bench_scale.py\n" + yaml.safe_dump(wf, sort_keys=False),
                    encoding="utf-8")


def run_workflow(workflow: Path, tag: str, work: Path, created: list[Path]) -> dict[str, Any]:
    """``anonflow run`` in a subprocess: its JSON (or an error), wall seconds and peak RSS."""
    db, out = work / f"scale-{tag}.duckdb", work / f"out-{tag}"
    for p in (db, db.with_name(db.name + ".wal"), out):
        remove(p)
    created.extend([db, db.with_name(db.name + ".wal"), out])
    cmd = [sys.executable, "-c", RUN_WRAPPER, "run", str(workflow), "--db", str(db), "--out-dir", str(out),
           "--json", "--no-cache"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    wall = time.perf_counter() - t0
    rss, err_lines = None, []
    for line in proc.stderr.splitlines():
        if line.startswith(RSS_MARK):
            rss = int(line.split()[-1])
        elif line.strip():
            err_lines.append(line)
    result: dict[str, Any] = {"wall": wall, "rss": rss, "rc": proc.returncode}
    try:
        result["json"] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        result["json"] = None
        if proc.stdout.strip():
            err_lines.append(f"unreadable output: {proc.stdout.strip()[:300]!r}")
    js = result["json"]
    if proc.returncode != 0 or js is None or js.get("status") != "succeeded":
        result["error"] = ((js or {}).get("error") or (err_lines[-1] if err_lines else None)
                           or f"exit status {proc.returncode}, no message")
    return result


def print_steps(res: dict[str, Any]) -> dict[str, float]:
    """Each step's seconds; returns them by step name."""
    seconds: dict[str, float] = {}
    steps = (res["json"] or {}).get("steps") or []
    for s in steps:
        seconds[s["step"]] = float(s.get("seconds") or 0.0)
        print(f"  {s['step']:<20} {s.get('uses', ''):<14} {s.get('status', ''):<9} {seconds[s['step']]:>9.2f} s")
    print(f"  {'end to end (wall)':<45} {res['wall']:>9.2f} s")
    print(f"  {'peak RSS':<45} {gb(res['rss']):>9} GB")
    if res.get("error"):
        print(f"  FAILED: {res['error']}")
    return seconds


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}"


# -- parts --------------------------------------------------------------------------------

def floor(data: Path, fmt: str, n: int, opts: dict[str, Any], created: list[Path]) -> dict[str, Any] | None:
    work = opts["work"]
    db, prefix = work / f"floor-{n}.duckdb", work / f"floor-{n}"
    outputs = [db, db.with_name(db.name + ".wal"), Path(f"{prefix}.parquet"), Path(f"{prefix}-sorted.csv"),
               Path(f"{prefix}-sorted.parquet")]
    for p in outputs:
        remove(p)
    created.extend(outputs)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", FLOOR_CODE, str(data), fmt, str(db), str(prefix), opts["memory"],
                           str(opts["threads"] or "")], capture_output=True, text=True, cwd=work)
    wall = time.perf_counter() - t0
    print(f"floor (DuckDB alone, memory {opts['memory']}), N = {n:,}")
    if proc.returncode != 0:
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        print(f"  FAILED: {lines[-1] if lines else f'exit status {proc.returncode}'}")
        return None
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    parts = out["parts"]
    for name, s in parts.items():
        print(f"  {name:<20} {s:>9.2f} s")
    out["total"] = sum(parts.values())
    out["sorted_copy"] = parts["sorted csv"] + parts["sorted parquet"]
    print(f"  {'floor (total)':<20} {out['total']:>9.2f} s   ({out['rows']:,} rows, {out['classes']:,} classes; "
          f"subprocess {wall:.2f} s, peak RSS {gb(out['peak_rss_kib'])} GB)")
    print(f"  {'sorted COPY':<20} {out['sorted_copy']:>9.2f} s")
    return out


def lattice(data: Path, n: int, opts: dict[str, Any], fl: dict[str, Any] | None, created: list[Path]) -> None:
    arx = shipped("arx-adult-k5.yaml")
    steps = arx["steps"]
    wf = {
        "name": f"scale-lattice-{n}",
        "seed": arx.get("seed", 1),
        "resources": resources(opts),
        "sources": {"adult": source_spec(data)},
        "steps": {
            "typed": {**steps["typed"], "input": "adult"},
            "hier": absolute_files(steps["hier"]),
            "anon": {"uses": "lattice", "input": "hier",
                     "with": {"model": "k-anonymity", "model_params": {"k": 5}, "suppression": 0.0,
                              "utility": "loss"}},
            "scores": {"uses": "evaluate", "input": ["hier", "anon"],
                       # l = 2 is measured, not required: the search is for k-anonymity only
                       "with": {"metrics": ["k-anonymity", {"l-diversity": {"l": 2}}, "loss"],
                                "enforce": False}},
            "publish-csv": {"uses": "publish", "input": "anon",
                            "with": {"publisher": "csv", "path": f"scale-{n}.csv"}},
            "publish-parquet": {"uses": "publish", "input": "anon",
                                "with": {"publisher": "parquet", "path": f"scale-{n}.parquet"}},
        },
    }
    path = opts["work"] / f"scale-lattice-{n}.yaml"
    write_workflow(path, wf)
    res = run_workflow(path, str(n), opts["work"], created)
    threads = "" if opts["threads"] is None else f", threads {opts['threads']}"
    print(f"lattice workflow ({path.name}, memory {opts['memory']}{threads}), N = {n:,}")
    seconds = print_steps(res)
    search = None
    for s in (res["json"] or {}).get("steps") or []:
        if s["step"] == "anon":
            m = re.search(r"search (\d+(?:\.\d+)?) s", " ".join(s.get("notes") or []))
            search = float(m.group(1)) if m else None
    outside = None if search is None else res["wall"] - search
    print(f"  {'search (lattice note)':<45} {'n/a' if search is None else f'{search:.2f}':>9} s")
    print(f"  {'outside the search (wall - search)':<45} {'n/a' if outside is None else f'{outside:.2f}':>9} s")
    print(f"  {'outside the search / floor':<45} {ratio(outside, fl and fl['total']):>9}")
    publish = (seconds["publish-csv"] + seconds["publish-parquet"]
               if "publish-csv" in seconds and "publish-parquet" in seconds else None)
    print(f"  {'(publish CSV + Parquet) / sorted COPY':<45} {ratio(publish, fl and fl['sorted_copy']):>9}")
    evaluate = f"{seconds['scores']:.2f}" if "scores" in seconds else "n/a"
    print(f"  {'evaluate (scores)':<45} {evaluate:>9} s")
    metrics = (res["json"] or {}).get("metrics") or {}
    shown = [f"{k.split('.', 1)[1]} {v:.6g}" for k, v in metrics.items()
             if k.count(".") == 1 and k.startswith("scores.")]
    if shown:
        print(f"  scores: {', '.join(shown)}")
    for o in (res["json"] or {}).get("outputs") or []:
        print(f"  output {Path(o['path']).name}: {o.get('rows')} rows")


def mdav(opts: dict[str, Any], created: list[Path]) -> None:
    n = opts["mdav_records"]
    data = scaled(n, "full", opts["format"], opts["work"], created)
    wf = shipped("adult-mdav.yaml")
    wf.update(name=f"scale-mdav-{n}", resources=resources(opts), sources={"adult": source_spec(data)})
    wf = {k: wf[k] for k in ("name", "seed", "resources", "sources", "steps")}
    wf["steps"]["grouped"]["with"] = {"k": 10}
    wf["steps"]["published"]["with"] = {"publisher": "parquet", "path": f"scale-mdav-{n}.parquet"}
    path = opts["work"] / f"scale-mdav-{n}.yaml"
    write_workflow(path, wf)
    res = run_workflow(path, f"mdav-{n}", opts["work"], created)
    print(f"mdav workflow ({path.name}, 6 numeric QIs, k = 10, memory {opts['memory']}), N = {n:,}")
    print_steps(res)


def gca(opts: dict[str, Any], created: list[Path]) -> None:
    n = opts["gca_records"]
    data = scaled(n, "full", opts["format"], opts["work"], created)
    wf = copy.deepcopy(shipped("gca-adult.yaml"))
    steps = {name: absolute_files(step) for name, step in wf["steps"].items() if name not in ("training", "sample")}
    steps["typed"]["input"] = "adult"
    steps["published"]["with"]["path"] = f"scale-gca-{n}"
    wf = {"name": f"scale-gca-{n}", "seed": wf.get("seed", 1), "resources": resources(opts),
          "sources": {"adult": source_spec(data)}, "steps": steps}
    path = opts["work"] / f"scale-gca-{n}.yaml"
    write_workflow(path, wf)
    res = run_workflow(path, f"gca-{n}", opts["work"], created)
    print(f"gca workflow ({path.name}, no training filter, no sample, memory {opts['memory']}), N = {n:,}")
    print_steps(res)


def main(argv: list[str]) -> int:
    opts = parse(argv)
    work: Path = opts["work"]
    work.mkdir(parents=True, exist_ok=True)
    only, fmt = opts["only"], opts["format"]
    created: list[Path] = []
    print(machine())
    print(f"work folder {work}, format {fmt}, memory {opts['memory']}, threads {opts['threads'] or 'default'}, "
          f"parts {','.join(p for p in PARTS if p in only)}")
    try:
        if "lattice" in only or "floor" in only:
            for n in opts["sizes"]:
                print()
                print(f"== N = {n:,} ==")
                data = scaled(n, "arx", fmt, work, created)
                fl = floor(data, fmt, n, opts, created) if "floor" in only else None
                if "lattice" in only:
                    lattice(data, n, opts, fl, created)
        if "mdav" in only:
            print()
            mdav(opts, created)
        if "gca" in only:
            print()
            if opts["gca_records"] is None:
                print("gca: skipped; run it with --gca-records N (e.g. --gca-records 100000 --only gca)")
            else:
                gca(opts, created)
    finally:
        if not opts["keep"]:
            for p in created:
                remove(p)
            if created:
                print()
                print(f"removed the data, stores and outputs this run made in {work} (--keep keeps them)")
    print(f"load average at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
