"""The MAASAE experiment of seed 000 (SPEC section 4, Table 5) on all of UCI Adult.

Run as a script::

    python tests/benchmarks/results_maasae.py run results.jsonl [objective ...] [--seeds N]
    python tests/benchmarks/results_maasae.py table results.jsonl

``run`` runs the ``maasae`` plugin as a workflow step does (``check``, then ``run`` with a
context seeded 0..N-1; default N = 10) for the nine (k, p) of Table 5 and the given
objectives (default: apf, apf-safe, min-il), computes AVG-IL, AVG-Ent and CAVG with the
metric plugins and checks p-sensitive k-anonymity in SQL, appending one JSON line per run
(a run already in the file is skipped, so an interrupted sweep resumes). ``table`` prints
the Markdown tables of docs/results-maasae.md (mean and standard deviation over seeds).
Importing this module runs nothing.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TABLE5 = {(8, 5): (0.14831, 3.01804), (8, 6): (0.15413, 3.03963), (8, 7): (0.16455, 3.05008),
          (10, 5): (0.19341, 3.23690), (10, 6): (0.19403, 3.28224), (10, 7): (0.19521, 3.31970),
          (12, 5): (0.21557, 3.34189), (12, 6): (0.21878, 3.40647), (12, 7): (0.21946, 3.47562)}
OBJECTIVES = ("apf", "apf-safe", "min-il")


def run(path: Path, objectives: list[str], seeds: int) -> None:
    from bench_maasae import load_adult, run_once

    from anonflow.testing import make_context
    from anonflow_std.metrics_groups import AvgEnt, AvgIl, Cavg, PSensitiveKAnonymity

    done = set()
    if path.exists():
        for line in path.read_text().splitlines():
            r = json.loads(line)
            done.add((r["objective"], r["k"], r["p"], r["seed"]))
    table = load_adult()
    for seed in range(seeds):
        for objective in objectives:
            for (k, p) in TABLE5:
                if (objective, k, p, seed) in done:
                    continue
                out, wall, cpu, notes = run_once(table, k, p, objective, seed)
                ctx = make_context()
                il = AvgIl().compute(table, out, {"by": None}, ctx)
                ent = AvgEnt().compute(None, out, {"by": None, "sensitive": None}, ctx)
                cavg = Cavg().compute(None, out, {"k": None, "by": None}, ctx)
                psk = PSensitiveKAnonymity().compute(None, out, {"k": None, "p": None, "by": None, "sensitive": None},
                                                     ctx)
                row = {"objective": objective, "k": k, "p": p, "seed": seed, "avg_il": il["avg-il"],
                       "avg_ent": ent["avg-ent"], "cavg": cavg["cavg"], "classes": int(cavg["cavg.classes"]),
                       "smallest": psk["p-sensitive-k-anonymity.smallest_class"],
                       "least_distinct": psk["p-sensitive-k-anonymity"],
                       "holds": psk["p-sensitive-k-anonymity.holds"], "wall": wall, "cpu": cpu, "notes": notes}
                with path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(f"{objective} k={k} p={p} seed={seed}: AVG-IL {row['avg_il']:.5f} AVG-Ent {row['avg_ent']:.5f} "
                      f"CAVG {row['cavg']:.3f} ({wall:.1f} s)", flush=True)


def _stats(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.5f}"
    return f"{statistics.mean(values):.5f} ± {statistics.stdev(values):.5f}"


def load(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(r["holds"] == 1.0 for r in rows), "a run is not p-sensitive k-anonymous"
    return rows


def _by(rows: list[dict]) -> dict[tuple, list[dict]]:
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault((r["objective"], r["k"], r["p"]), []).append(r)
    return by


def table5_md(rows: list[dict]) -> str:
    """The paper's Table 5 next to ours (objective apf): mean ± standard deviation over seeds."""
    by = _by(rows)
    out = ["| k | p | AVG-IL paper | AVG-IL ours | AVG-Ent paper | AVG-Ent ours | CAVG | classes | runs |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (k, p), (pil, pent) in TABLE5.items():
        rs = by.get(("apf", k, p), [])
        if rs:
            out.append(f"| {k} | {p} | {pil:.5f} | {_stats([r['avg_il'] for r in rs])} | {pent:.5f} | "
                       f"{_stats([r['avg_ent'] for r in rs])} | {statistics.mean(r['cavg'] for r in rs):.3f} | "
                       f"{statistics.mean(r['classes'] for r in rs):.0f} | {len(rs)} |")
    return "\n".join(out)


def minil_md(rows: list[dict]) -> str:
    """MAASAE (apf) against MAA-MINIL (min-il): means over the seeds each ran."""
    by = _by(rows)

    def mean(objective: str, k: int, p: int, key: str) -> str:
        rs = by.get((objective, k, p), [])
        return f"{statistics.mean(r[key] for r in rs):.{3 if key == 'cavg' else 5}f}" if rs else "–"

    out = ["| k | p | AVG-IL apf | AVG-IL min-il | AVG-Ent apf | AVG-Ent min-il | CAVG apf | CAVG min-il | runs |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (k, p) in TABLE5:
        if ("min-il", k, p) in by:
            n = f"{len(by.get(('apf', k, p), []))} / {len(by[('min-il', k, p)])}"
            out.append(f"| {k} | {p} | {mean('apf', k, p, 'avg_il')} | {mean('min-il', k, p, 'avg_il')} | "
                       f"{mean('apf', k, p, 'avg_ent')} | {mean('min-il', k, p, 'avg_ent')} | "
                       f"{mean('apf', k, p, 'cavg')} | {mean('min-il', k, p, 'cavg')} | {n} |")
    return "\n".join(out)


def apf_safe_text(rows: list[dict]) -> str:
    apf = {(r["k"], r["p"], r["seed"]): r for r in rows if r["objective"] == "apf"}
    keys = ("avg_il", "avg_ent", "classes")
    safe = [r for r in rows if r["objective"] == "apf-safe" and (r["k"], r["p"], r["seed"]) in apf]
    same = sum(1 for r in safe if all(r[x] == apf[(r["k"], r["p"], r["seed"])][x] for x in keys))
    return (f"Every `apf-safe` run paired with an `apf` run of the same k, p and seed ({same} of {len(safe)}) "
            "gives exactly the same AVG-IL, AVG-Ent and classes")


def runtime_text(rows: list[dict]) -> str:
    out = []
    for objective in OBJECTIVES:
        rs = [r for r in rows if r["objective"] == objective]
        if rs:
            out.append(f"- `{objective}`: {len(rs)} runs, median {statistics.median(r['wall'] for r in rs):.0f} s "
                       f"wall clock, {statistics.median(r['cpu'] for r in rs):.0f} s CPU per run (all nine settings)")
    return "\n".join(out)


def table(path: Path) -> None:
    rows = load(path)
    print("Table 5, MAASAE (objective apf)\n")
    print(table5_md(rows))
    print("\nMAASAE (apf) against MAA-MINIL (min-il)\n")
    print(minil_md(rows))
    print()
    print(apf_safe_text(rows))
    print(runtime_text(rows))


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] not in ("run", "table") or len(args) < 2:
        raise SystemExit(__doc__)
    seeds = 10
    if "--seeds" in args:
        i = args.index("--seeds")
        seeds = int(args[i + 1])
        del args[i: i + 2]
    if args[0] == "run":
        run(Path(args[1]), args[2:] or list(OBJECTIVES), seeds)
    else:
        table(Path(args[1]))
