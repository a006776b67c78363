"""Partitioned runs at scale: the clustering algorithms on scaled Adult, once per fragment, on
worker processes; and the speedup of the per-fragment phase from one worker to two.

Run as a script (from a fresh clone, after ``pip install '.[test]'``)::

    python tests/benchmarks/bench_partitioned.py [--only mdav,gca,maasae,lcl,speedup]
        [--records mdav=10000000,gca=10000000,maasae=1000000,lcl=1000000]
        [--speedup-records 1000000] [--speedup-algorithms mdav,maasae] [--executor processes:2]
        [--max-records N] [--memory 2GB] [--work DIR] [--keep]

Each case writes seed 004's Adult scaled to N records (``make_scaled.py N 1 --source full``,
reused when already in WORK), builds a workflow from a shipped one with its source replaced by
the scaled file and a ``partition`` step (``max_records`` = ``--max-records``, default the
engine's) in front of the algorithm, and runs it with ``anonflow run --json --no-cache
--executor ...`` in a subprocess, under ``resources: {memory: ...}``:

* ``mdav``: ``workflows/adult-mdav.yaml`` (6 numeric QIs, k = 10; evaluate sse-il and
  k-anonymity; publish Parquet);
* ``gca``: ``workflows/gca-adult.yaml``'s ``uniform`` step ((alpha,k)-GCA, k = 4, alpha = 0.5)
  on the scaled records (its training filter and sample step removed: they would undo the
  scaling), evaluated (reconstruction-distance, alpha-k-anonymity) and published as a lossy join;
* ``maasae``: ``workflows/maasae-adult.yaml`` (k = 10, p = 5);
* ``lcl``: ``workflows/l-clustering-adult.yaml`` (l = 5).

For each run it prints the steps' seconds, the wall seconds, the algorithm step's phases (from
its note: fragments written, run, merged; the work summed over fragments), and the peak RSS of
the anonflow process and of its largest worker (the process tree sampled every 0.1 s).

``speedup`` runs each of ``--speedup-algorithms`` on ``--speedup-records`` records with
``processes:1`` and ``processes:2`` and prints the per-fragment phase's seconds and their
ratio (the phase includes starting the worker processes).

The machine (CPUs, memory, load average) is printed first and the load average after each run:
another job on this machine slows everything. Nothing here asserts a timing. Files this run
creates are removed at the end unless ``--keep``. Importing this module has no side effects.
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
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
CASES = ("mdav", "gca", "maasae", "lcl")
DEFAULT_RECORDS = {"mdav": 10_000_000, "gca": 10_000_000, "maasae": 1_000_000, "lcl": 1_000_000}
PHASES = re.compile(r"fragments written in ([0-9.]+) s, run in ([0-9.]+) s \(([0-9.]+) s of work in (\d+) "
                    r"process\(es\)\), merged in ([0-9.]+) s")


def _yaml() -> Any:
    import yaml

    return yaml


def load(name: str) -> dict[str, Any]:
    return _yaml().safe_load((WORKFLOWS / name).read_text())


def absolute(value: Any) -> Any:
    """Parameters naming files of the shipped workflows, made absolute."""
    if isinstance(value, str) and (WORKFLOWS / value).is_file():
        return str(WORKFLOWS / value)
    if isinstance(value, dict):
        return {k: absolute(v) for k, v in value.items()}
    if isinstance(value, list):
        return [absolute(v) for v in value]
    return value


def workflow(case: str, data: Path, max_records: int | None, memory: str) -> dict[str, Any]:
    """The workflow of one case on the scaled file ``data``."""
    if case == "mdav":
        w, algo, typed = load("adult-mdav.yaml"), "grouped", "typed"
    elif case == "maasae":
        w, algo, typed = load("maasae-adult.yaml"), "grouped", "typed"
    elif case == "lcl":
        w, algo, typed = load("l-clustering-adult.yaml"), "clustered", "typed"
    else:
        g = load("gca-adult.yaml")
        steps = g["steps"]
        typed_step = copy.deepcopy(steps["typed"])
        typed_step["input"] = "adult"
        w = {"name": "gca-scaled", "seed": g["seed"], "sources": g["sources"],
             "steps": {"typed": typed_step, "uniform": steps["uniform"],
                       "scores": {"uses": "evaluate", "input": ["typed", "uniform"],
                                  "with": {"metrics": ["reconstruction-distance", "alpha-k-anonymity"]}},
                       "published": {"uses": "publish", "input": "uniform",
                                     "with": {"publisher": "lossy-join", "path": "gca-scaled",
                                              "format": "parquet"}}}}
        algo, typed = "uniform", "typed"
    w = absolute(copy.deepcopy(w))
    (src,) = w["sources"].values()
    src["path"] = str(data)
    w["name"] = f"{w['name']}-partitioned"
    w["resources"] = {"memory": memory}
    part = {"uses": "partition", "input": typed, "with": {} if max_records is None else {"max_records": max_records}}
    steps: dict[str, Any] = {}
    for name, step in w["steps"].items():
        if name == algo:
            steps["fragments"] = part
            step = dict(step, input="fragments")
        steps[name] = step
    w["steps"] = steps
    return w


class Peak:
    """The peak RSS of a process and of each of its descendants, sampled every 0.1 s."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.peaks: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psutil

        while not self.stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                break
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    self.peaks[p.pid] = max(self.peaks.get(p.pid, 0), rss)
                    self.names.setdefault(p.pid, " ".join(p.cmdline()[:3])[-60:])
                except psutil.Error:
                    pass
            time.sleep(0.1)

    def finish(self) -> tuple[int, int, int]:
        """(peak of the root, largest peak of another process, processes seen)."""
        self.stop.set()
        self.thread.join()
        root = self.peaks.get(self.root.pid, 0)
        others = [v for k, v in self.peaks.items() if k != self.root.pid]
        return root, max(others, default=0), len(self.peaks)


def run(case: str, records: int, work: Path, executor: str, max_records: int | None, memory: str,
        created: list[Path]) -> dict[str, Any] | None:
    data = scaled(records, work, created)
    tag = f"{case}-{records}-{executor.replace(':', '')}"
    wf = work / f"partitioned-{tag}.yaml"
    wf.write_text(_yaml().safe_dump(workflow(case, data, max_records, memory), sort_keys=False))
    db, out = work / f"partitioned-{tag}.duckdb", work / f"out-{tag}"
    for p in (db, Path(f"{db}.wal"), out):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    created += [wf, db, Path(f"{db}.wal"), out]
    cmd = [sys.executable, "-m", "anonflow", "run", str(wf), "--json", "--no-cache", "--db", str(db),
           "--out-dir", str(out), "--executor", executor]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work)
    peak = Peak(proc.pid)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    root, worker, seen = peak.finish()
    print(f"\n{case} on {records:,} records, {executor}: wall {wall:.1f} s; peak RSS anonflow {root / 2**30:.2f} GB, "
          f"largest other process {worker / 2**30:.2f} GB ({seen} processes); load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if proc.returncode != 0:
        print(f"  failed (exit {proc.returncode}): {stderr.strip().splitlines()[-1] if stderr.strip() else stdout}")
        return None
    result = json.loads(stdout)
    phases = None
    for s in result["steps"]:
        print(f"  {s['step']:<12} {s['uses']:<14} {s['seconds']:8.2f} s  {s.get('rows') or ''}")
        for note in s.get("notes") or []:
            m = PHASES.search(note)
            if m:
                phases = dict(zip(("write", "run", "work", "processes", "merge"), map(float, m.groups())))
            if "fragment(s) of" in note or m:
                print(f"  {'':<12} {note}")
    for key in sorted(result["metrics"]):
        if key.count(".") == 1 and not key.endswith(".holds"):
            print(f"  {key:<40} {result['metrics'][key]:.6g}")
    return {"wall": wall, "phases": phases, "peak_root": root, "peak_worker": worker}


def scaled(records: int, work: Path, created: list[Path]) -> Path:
    path = work / f"adult-full-{records}-1.csv"
    if not path.exists():
        subprocess.run([sys.executable, str(ROOT / "tests" / "benchmarks" / "make_scaled.py"), str(records), "1",
                        "--source", "full", "--out", str(path)], check=True)
        created.append(path)
    return path


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join((*CASES, "speedup")))
    ap.add_argument("--records", default="", help="case=N,... (defaults: "
                    + ", ".join(f"{k}={v}" for k, v in DEFAULT_RECORDS.items()) + ")")
    ap.add_argument("--speedup-records", type=int, default=1_000_000)
    ap.add_argument("--speedup-algorithms", default="mdav,maasae")
    ap.add_argument("--executor", default="processes:2")
    ap.add_argument("--max-records", type=int, default=None)
    ap.add_argument("--memory", default="2GB")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "anonflow-partitioned")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    only = [x for x in args.only.split(",") if x]
    records = dict(DEFAULT_RECORDS)
    for item in filter(None, args.records.split(",")):
        k, _, v = item.partition("=")
        records[k] = int(v)
    args.work.mkdir(parents=True, exist_ok=True)
    import duckdb
    import psutil

    print(f"machine: {os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.1f} GB; duckdb "
          f"{duckdb.__version__}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    created: list[Path] = []
    try:
        for case in CASES:
            if case in only:
                run(case, records[case], args.work, args.executor, args.max_records, args.memory, created)
        if "speedup" in only:
            for case in filter(None, args.speedup_algorithms.split(",")):
                one = run(case, args.speedup_records, args.work, "processes:1", args.max_records, args.memory,
                          created)
                two = run(case, args.speedup_records, args.work, "processes:2", args.max_records, args.memory,
                          created)
                if one and two and one["phases"] and two["phases"]:
                    a, b = one["phases"]["run"], two["phases"]["run"]
                    print(f"\nspeedup {case} on {args.speedup_records:,} records: per-fragment phase {a:.1f} s with "
                          f"1 worker, {b:.1f} s with 2: {a / b:.2f}x (work summed: {one['phases']['work']:.1f} s, "
                          f"{two['phases']['work']:.1f} s); whole run {one['wall']:.1f} s -> {two['wall']:.1f} s")
    finally:
        if not args.keep:
            for p in created:
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
