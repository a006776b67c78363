"""Partitioned runs against unpartitioned ones: every per-fragment algorithm's paper metric on
Adult, whole and cut by the ``partition`` step (docs/results.md section 6).

Run as a script::

    python tests/benchmarks/results_partitioned.py sweep --cache part.jsonl          # every algorithm (about 11 min)
    python tests/benchmarks/results_partitioned.py sweep --algorithms mdav,grav --sizes 5000,10000
    python tests/benchmarks/results_partitioned.py seeds --cache part.jsonl          # 4 more seeds (about 12 min)
    python tests/benchmarks/results_partitioned.py all --cache part.jsonl            # both, one process (about 25 min)
    python tests/benchmarks/results_partitioned.py table --cache part.jsonl          # the tables only, no runs

``sweep`` runs, for each algorithm, the shipped workflow's data steps (source, filter, sample,
typing) and its algorithm step unpartitioned, then with a step
``typed-part: {uses: partition, input: typed, with: {max_records: N}}`` feeding the algorithm
(``--sizes``, default 2000, 5000, 10000, 20000, 40000), scored by an ``evaluate`` step on
``[typed, <algorithm step>]`` -- through the engine (``Runner``, local executor, a temporary
store, nothing from the step cache), exactly as ``anonflow run`` runs such a workflow. The
algorithms (``--algorithms``) and their settings:

* ``mdav``, ``v-mdav``, ``grav``, ``v-grav``: workflows/adult-mdav.yaml (45,222 records, six
  numeric QIs, k = 10) with seed 003's gamma 0.2 and zeta 1.8 (workflows/microaggregation-*.yaml);
  SSE-IL (``sse-il``, %);
* ``refine``: refine (its defaults: 1,000 kicks, 60 s limit) of the MDAV partition, both steps
  fed by the partitioned table; ``refine-descent`` the same with ``kicks: 0`` (the plain
  descent); SSE-IL;
* ``maasae``: workflows/maasae-adult.yaml (37,290 records, k = 10, p = 5, apf); AVG-IL, AVG-Ent;
* ``l-clustering``: workflows/l-clustering-adult.yaml (45,222 records, |QI| = 8, l = 5); RL (%);
* ``alpha-k-gca``, ``alpha-i-k-gca``: workflows/gca-adult.yaml (the 10,000-record sample, k = 4,
  alpha = 0.5); reconstruction distance Dis.

``seeds`` runs the same settings with other workflow seeds (``--seeds``, default 1,2,3,4;
``--algorithms`` default the randomized ones that come near 2 %: maasae, l-clustering and the
two GCAs, whose seed also draws the 10,000-record sample) and prints, per max_records, the
relative change of each seed's partitioned run against the same seed's whole-table run: mean,
smallest, largest over the workflow's own seed and the seeds given, and the spread of the
whole-table runs over the seeds (the noise a single comparison carries: a partitioned run
draws its fragments' generators from other seeds than the whole-table step).

Each run's metrics, the number of fragments (partition step) and of fragment groups the
algorithm ran on, the algorithm step's wall seconds, its notes, the load average and the code
(a digest of anonflow/ and plugins/ as the process imported them) go to the ``--cache`` file
as one JSON line; runs already there are reused (a failed run is retried), so an interrupted
sweep resumes. ``sweep`` prints the Markdown tables of the docs: every run; the relative change
(%) per max_records; and, per algorithm, the smallest max_records whose metric moves by at most
2 % (relative) either way, and the smallest at which no metric is more than 2 % worse (lower
is better but for AVG-Ent). ``seeds`` prints its table and the same two thresholds by the mean
change; ``all`` runs both in one process (one state of the code for every run); ``table``
prints what the cache holds. Importing the module runs nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from script_args import listed_option

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
SIZES = (2000, 5000, 10000, 20000, 40000)
TOLERANCE = 2.0  # % relative

MDAV_FAMILY = {"mdav": {"uses": "mdav", "with": {"k": 10}},
               "v-mdav": {"uses": "v-mdav", "with": {"k": 10, "gamma": 0.2}},
               "grav": {"uses": "grav", "with": {"k": 10, "zeta": 1.8}},
               "v-grav": {"uses": "v-grav", "with": {"k": 10, "zeta": 1.8, "gamma": 0.2}}}

#: algorithm -> (workflow, {step: definition or None to take the workflow's}, the timed step,
#: metrics) ; the first step listed is fed by the (partitioned) typed table
ALGORITHMS: dict[str, tuple[str, dict[str, dict | None], str, tuple[str, ...]]] = {
    **{name: ("adult-mdav.yaml", {"grouped": step}, "grouped", ("sse-il",)) for name, step in MDAV_FAMILY.items()},
    "refine": ("adult-mdav.yaml", {"mdav": MDAV_FAMILY["mdav"], "refined": {"uses": "refine"}}, "refined",
               ("sse-il",)),
    "refine-descent": ("adult-mdav.yaml", {"mdav": MDAV_FAMILY["mdav"],
                                           "refined": {"uses": "refine", "with": {"kicks": 0}}}, "refined",
                       ("sse-il",)),
    "maasae": ("maasae-adult.yaml", {"grouped": None}, "grouped", ("avg-il", "avg-ent")),
    "l-clustering": ("l-clustering-adult.yaml", {"clustered": None}, "clustered", ("relative-loss",)),
    "alpha-k-gca": ("gca-adult.yaml", {"uniform": None}, "uniform", ("reconstruction-distance",)),
    "alpha-i-k-gca": ("gca-adult.yaml", {"graded": None}, "graded", ("reconstruction-distance",)),
}
LABELS = {"sse-il": "SSE-IL (%)", "avg-il": "AVG-IL", "avg-ent": "AVG-Ent", "relative-loss": "RL (%)",
          "reconstruction-distance": "Dis"}
DATA_STEPS = ("filter", "sample", "typing")
HIGHER_IS_BETTER = {"avg-ent"}
MICROAGGREGATION = {"mdav", "v-mdav", "grav", "v-grav", "refine", "refine-descent"}


def _absolute(node, base: Path):
    """The workflow's relative file names (sources, gradings) made absolute, so the derived
    workflow can live in a temporary folder."""
    if isinstance(node, dict):
        return {k: (str(base / v) if k in ("path", "grading", "arx") and isinstance(v, str)
                    and not Path(v).is_absolute() and (base / v).exists() else _absolute(v, base))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_absolute(v, base) for v in node]
    return node


def workflow(algorithm: str, size: int | None) -> dict:
    """The shipped workflow's sources and data steps, a partition step when ``size`` is given,
    the algorithm's step(s) and one evaluate step ``score``."""
    name, steps, timed, metrics = ALGORITHMS[algorithm]
    shipped = yaml.safe_load((WORKFLOWS / name).read_text())
    out_steps = {s: d for s, d in shipped["steps"].items() if d["uses"] in DATA_STEPS}
    assert "typed" in out_steps, name
    feed = "typed"
    if size is not None:
        out_steps["typed-part"] = {"uses": "partition", "input": "typed", "with": {"max_records": size}}
        feed = "typed-part"
    previous = None
    for step, definition in steps.items():
        d = copy.deepcopy(definition if definition is not None else shipped["steps"][step])
        d["input"] = feed if previous is None else [feed, previous]
        out_steps[step] = d
        previous = step
    out_steps["score"] = {"uses": "evaluate", "input": ["typed", timed], "with": {"metrics": list(metrics)}}
    return _absolute({"name": f"{shipped['name']}-partitioned", "seed": shipped["seed"],
                      "sources": shipped["sources"], "steps": out_steps}, WORKFLOWS)


_CODE: list[str] = []


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "anonflow").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:10]


def code_state() -> str:
    """HEAD and a digest of the engine's and the plugins' sources, taken once, around importing
    all of them (the engine, its executors and every plugin): the code this process runs, even
    if the files change meanwhile."""
    if not _CODE:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
        before = _sources_digest()
        import importlib

        for module in ("anonflow.runner", "anonflow.steps"):
            importlib.import_module(module)
        from anonflow.registry import get_registry

        get_registry()
        if _sources_digest() != before:
            sys.exit("anonflow/ or plugins/ changed while they were imported; run again")
        _CODE.append(f"{head} (sources {before})")
    return _CODE[0]


def run_one(algorithm: str, size: int | None, tmp: Path, seed: int | None = None) -> dict:
    from anonflow.errors import AnonflowError
    from anonflow.runner import Runner
    from anonflow.workflow.spec import load_workflow
    from anonflow.store import Store

    _, _, timed, metrics = ALGORITHMS[algorithm]
    folder = Path(tempfile.mkdtemp(dir=tmp))
    path = folder / "workflow.yaml"
    path.write_text(yaml.safe_dump(workflow(algorithm, size), sort_keys=False))
    row = {"algorithm": algorithm, "max_records": size, "seed": seed, "load": os.getloadavg()[0],
           "code": code_state(),
           "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    store = Store(folder / "results.duckdb")
    t0 = time.perf_counter()
    try:
        result = Runner(store).run(load_workflow(path, seed=seed), use_cache=False, output_dir=folder / "out")
    except AnonflowError as exc:
        row.update(error=f"{type(exc).__name__}: {exc}", total_seconds=time.perf_counter() - t0)
        return row
    finally:
        store.close()
    row["total_seconds"] = time.perf_counter() - t0
    steps = {s["step"]: s for s in result.steps}
    row["metrics"] = {m: result.metrics[f"score.{m}"] for m in metrics}
    row["rows"] = steps["typed"]["rows"]
    row["seconds"] = steps[timed]["seconds"]
    row["all_seconds"] = {s: steps[s]["seconds"] for s in ALGORITHMS[algorithm][1]}
    row["notes"] = steps[timed]["notes"]
    if size is not None:
        row["partition_seconds"] = steps["typed-part"]["seconds"]
        part = " ".join(steps["typed-part"]["notes"])
        row["fragments"] = int(re.search(r"(\d+) fragment\(s\) of", part)[1])
        row["partition_note"] = next(n for n in steps["typed-part"]["notes"] if "fragment(s) of" in n)
        ran = re.search(r"ran on (\d+) fragment group\(s\)", " ".join(steps[timed]["notes"]))
        row["groups"] = int(ran[1]) if ran else None
    return row


def load(cache: Path | None) -> dict[tuple, dict]:
    rows = {}
    if cache is not None and cache.exists():
        for line in cache.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows[(r["algorithm"], r["max_records"], r.get("seed"))] = r  # the last line of a setting wins
    return rows


def sweep(algorithms, sizes, cache: Path | None, seeds=(None,), rows: dict | None = None) -> dict[tuple, dict]:
    """Run what the cache (or ``rows``) lacks or what failed: every algorithm, whole and at every
    size, at every seed (None: the workflow's own)."""
    rows = load(cache) if rows is None else rows
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for algorithm in algorithms:
                for size in (None, *sizes):
                    key = (algorithm, size, seed)
                    r = rows.get(key)
                    if r is not None and "error" not in r:
                        continue
                    r = rows[key] = run_one(algorithm, size, Path(tmp), seed)
                    if cache is not None:
                        with cache.open("a") as fh:
                            fh.write(json.dumps(r) + "\n")
                    shown = r.get("error") or ", ".join(f"{m} {v:.6g}" for m, v in r["metrics"].items())
                    print(f"{algorithm} max_records={size}" + (f" seed={seed}" if seed is not None else "")
                          + f": {shown} ({r.get('seconds', 0):.1f} s step, {r['total_seconds']:.1f} s run, "
                            f"load {r['load']:.2f})", flush=True)
    return rows


def _change(r: dict, base: dict, metric: str) -> float:
    return 100.0 * (r["metrics"][metric] / base["metrics"][metric] - 1.0)


def _value(v: float, metric: str) -> str:
    return f"{v:.4f}" if metric in ("sse-il", "relative-loss", "reconstruction-distance") else f"{v:.5f}"


def _refine_stop(r: dict) -> str:
    """How refine stopped (from its notes): the kicks, the rounds, the time limit."""
    text = " ".join(r.get("notes") or ())
    return "time limit" if "time limit" in text else ""


def _worse(change: float, metric: str) -> float:
    """How much worse (%, negative: better) a relative change makes the metric: lower is better,
    but for AVG-Ent (the sensitive values' entropy in a class) higher is."""
    return -change if metric in HIGHER_IS_BETTER else change


def thresholds(changes: dict[tuple, dict[str, float]], algorithms, sizes, records: dict[str, int]) -> None:
    """Per algorithm, the smallest max_records meeting the tolerance, by two readings: every metric
    within TOLERANCE % either way, and no metric more than TOLERANCE % worse."""
    readings = (("moves by at most", lambda c, m: abs(c)), ("is at most", _worse))
    for words, amount in readings:
        print(f"\nThe smallest max_records whose metric {words} {TOLERANCE:g} % "
              + ("(relative, either way; in brackets the largest |change|)" if words.startswith("moves")
                 else "worse (relative; better counts as met; in brackets how much worse)")
              + ":\n")
        meets_all = set(sizes)
        for algorithm in algorithms:
            if algorithm not in records:
                print(f"- {algorithm}: no unpartitioned run")
                meets_all = set()
                continue
            n = records[algorithm]
            ok = {}
            for s in sizes:
                if (algorithm, s) in changes:
                    c = changes[(algorithm, s)]
                    worst = max(amount(v, m) for m, v in c.items())
                    ok[s] = (worst <= TOLERANCE, worst)
            meeting = [s for s in sizes if s in ok and ok[s][0]]
            meets_all &= set(meeting)
            # the smallest size from which every larger size meets it too
            stable = next((s for i, s in enumerate(sizes) if all(ok.get(t, (False,))[0] for t in sizes[i:])), None)
            whole = [s for s in sizes if s >= n]
            cut = [s for s in sizes if s < n]
            misses = [s for s in cut if s in ok and not ok[s][0]]
            met = [s for s in cut if s in ok and ok[s][0]]
            if met:
                text = f"smallest {met[0]:,}"
                if stable != met[0]:
                    text += f", but not every larger size: all from {stable:,}" if stable else \
                        ", but not every larger size"
            else:
                text = "no size below the table's meets it"
            if misses:
                text += "; misses it at " + ", ".join(f"{s:,} ({ok[s][1]:.2f} %)" for s in misses)
            if whole:
                text += f"; {', '.join(f'{s:,}' for s in whole)}: one fragment"
            print(f"- {algorithm} ({n:,} records): {text}")
        print("\nmax_records meeting it for every algorithm: "
              + (", ".join(f"{s:,}" for s in sorted(meets_all)) or "none"))
        rest = [a for a in algorithms if a in records and a not in MICROAGGREGATION]
        if rest != [a for a in algorithms if a in records]:
            fine = set(sizes)
            for algorithm in rest:
                fine &= {s for s in sizes if (algorithm, s) in changes
                         and max(amount(v, m) for m, v in changes[(algorithm, s)].items()) <= TOLERANCE}
            print(f"for every algorithm but the microaggregation family ({', '.join(rest)}): "
                  + (", ".join(f"{s:,}" for s in sorted(fine)) or "none"))


def table(all_rows: dict[tuple, dict], algorithms, sizes) -> None:
    rows = {(a, n): r for (a, n, seed), r in all_rows.items() if seed is None}
    print("| algorithm | metric | max_records | fragments: records | value | change | algorithm step, s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for algorithm in algorithms:
        metrics = ALGORITHMS[algorithm][3]
        base = rows.get((algorithm, None))
        for size in (None, *sizes):
            r = rows.get((algorithm, size))
            if r is None:
                continue
            label = "whole" + (f" ({r['rows']:,})" if "rows" in r else "") if size is None else f"{size:,}"
            if "error" in r:
                print(f"| {algorithm} | | {label} | | failed: {r['error']} | | |")
                continue
            frags = "1" if size is None else f"{r['fragments']}" + (
                f" ({r['groups']} groups)" if r.get("groups") not in (None, r["fragments"]) else "")
            if size is not None and r["fragments"] > 1:
                frags += ": " + re.search(r"fragment\(s\) of ([\d,.]+)", r["partition_note"])[1]
            values = " / ".join(_value(r["metrics"][m], m) for m in metrics)
            change = "" if size is None or base is None or "error" in base else \
                " / ".join(f"{_change(r, base, m):+.2f} %" for m in metrics)
            stop = _refine_stop(r) if algorithm.startswith("refine") else ""
            print(f"| {algorithm} | {' / '.join(LABELS[m] for m in metrics)} | {label} | {frags} | {values} | "
                  f"{change} | {r['seconds']:.1f}{' (' + stop + ')' if stop else ''} |")

    print("\nRelative change against the unpartitioned run (%), per max_records:\n")
    print("| algorithm, metric | " + " | ".join(f"{s:,}" for s in sizes) + " |")
    print("| --- | " + " | ".join("---:" for _ in sizes) + " |")
    for algorithm in algorithms:
        base = rows.get((algorithm, None))
        if base is None or "error" in base:
            continue
        for m in ALGORITHMS[algorithm][3]:
            cells = []
            for s in sizes:
                r = rows.get((algorithm, s))
                cells.append("–" if r is None else "failed" if "error" in r else f"{_change(r, base, m):+.2f}")
            print(f"| {algorithm}, {LABELS[m]} | " + " | ".join(cells) + " |")

    changes, records = {}, {}
    for algorithm in algorithms:
        base = rows.get((algorithm, None))
        if base is None or "error" in base:
            continue
        records[algorithm] = base["rows"]
        for size in sizes:
            r = rows.get((algorithm, size))
            if r is not None and "error" not in r:
                changes[(algorithm, size)] = {m: _change(r, base, m) for m in ALGORITHMS[algorithm][3]}
    thresholds(changes, algorithms, sizes, records)

    footer([r for r in rows.values() if r["algorithm"] in algorithms])


def footer(shown: list[dict]) -> None:
    """How many runs, how long, under what load, on what code; the failures."""
    done = [r for r in shown if "error" not in r]
    if done:
        loads = [r["load"] for r in done]
        codes = sorted({r["code"] for r in done})
        total = sum(r["total_seconds"] for r in done)
        print(f"\n{len(done)} runs, {total / 60:.1f} min of runs in all; 1-minute load average at their start "
              f"{min(loads):.2f} .. {max(loads):.2f}; code {', '.join(codes)}"
              + (" (THE CODE CHANGED BETWEEN RUNS)" if len(codes) > 1 else ""))
        first = min(r["started"] for r in done)
        last = max(r["started"] for r in done)
        print(f"runs started {first} .. {last}")
    failed = [r for r in shown if "error" in r]
    for r in failed:
        print(f"FAILED {r['algorithm']} max_records={r['max_records']} seed={r.get('seed')}: {r['error']}")


def seeds_table(all_rows: dict[tuple, dict], algorithms, sizes, seeds) -> None:
    """Per algorithm and size: the relative change of each seed's partitioned run against the
    same seed's whole-table run, over the workflow's own seed and ``seeds``."""
    import statistics

    every = (None, *seeds)
    print("| algorithm, metric | whole table: mean ± sd over the seeds (sd in %) | "
          + " | ".join(f"{s:,}: mean change (min .. max)" for s in sizes) + " | seeds |")
    print("| --- | --- | " + " | ".join("---" for _ in sizes) + " | --- |")
    means: dict[tuple, dict[str, float]] = {}
    records = {}
    for algorithm in algorithms:
        for m in ALGORITHMS[algorithm][3]:
            base = {sd: all_rows.get((algorithm, None, sd)) for sd in every}
            base = {sd: r for sd, r in base.items() if r is not None and "error" not in r}
            if not base:
                continue
            records[algorithm] = next(iter(base.values()))["rows"]
            values = [r["metrics"][m] for r in base.values()]
            mean = statistics.mean(values)
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            cells = []
            for size in sizes:
                changes = [_change(all_rows[(algorithm, size, sd_)], base[sd_], m) for sd_ in base
                           if (algorithm, size, sd_) in all_rows and "error" not in all_rows[(algorithm, size, sd_)]]
                if not changes:
                    cells.append("–")
                    continue
                avg = statistics.mean(changes)
                means.setdefault((algorithm, size), {})[m] = avg
                cells.append(f"{avg:+.2f} % ({min(changes):+.2f} .. {max(changes):+.2f})")
            print(f"| {algorithm}, {LABELS[m]} | {_value(mean, m)} ± {_value(sd, m)} ({100 * sd / mean:.2f} %) | "
                  + " | ".join(cells) + f" | {len(base)} |")
    print("\nBy the mean change over the seeds:")
    thresholds(means, algorithms, sizes, records)
    print()
    footer([r for (a, n, sd), r in all_rows.items() if a in algorithms and sd in every])


if __name__ == "__main__":
    args = sys.argv[1:]
    what = args[0] if args else ""
    default = ("maasae", "l-clustering", "alpha-k-gca", "alpha-i-k-gca") if what == "seeds" else tuple(ALGORITHMS)
    algorithms = listed_option(args, "--algorithms", default, str)
    sizes = tuple(sorted(listed_option(args, "--sizes", SIZES, int)))
    seeds = listed_option(args, "--seeds", (1, 2, 3, 4), int)
    cache = None
    if "--cache" in args:
        i = args.index("--cache")
        cache = Path(args[i + 1])
        del args[i: i + 2]
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        sys.exit(f"unknown algorithm(s) {', '.join(unknown)}; known: {', '.join(ALGORITHMS)}")
    if what == "sweep" and len(args) == 1:
        table(sweep(algorithms, sizes, cache), algorithms, sizes)
    elif what == "seeds" and len(args) == 1:
        seeds_table(sweep(algorithms, sizes, cache, (None, *seeds)), algorithms, sizes, seeds)
    elif what == "all" and len(args) == 1:
        # one process, so one state of the code for every run
        rows = sweep(algorithms, sizes, cache)
        table(rows, algorithms, sizes)
        chosen = tuple(a for a in ("maasae", "l-clustering", "alpha-k-gca", "alpha-i-k-gca") if a in algorithms)
        print()
        seeds_table(sweep(chosen, sizes, cache, (None, *seeds), rows), chosen, sizes, seeds)
    elif what == "table" and len(args) == 1 and cache is not None:
        rows = load(cache)
        table(rows, algorithms, sizes)
        more = tuple(sorted({sd for (_, _, sd) in rows if sd is not None}))
        chosen = tuple(a for a in ("maasae", "l-clustering", "alpha-k-gca", "alpha-i-k-gca")
                       if a in algorithms and any((a, None, sd) in rows for sd in more))
        if chosen:
            print()
            seeds_table(rows, chosen, sizes, more)
    else:
        sys.exit(__doc__)
