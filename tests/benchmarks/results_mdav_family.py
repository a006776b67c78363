"""Seed 003's experiment: run the three microaggregation workflows for k = 3..10
(docs/results-mdav.md).

    python tests/benchmarks/results_mdav_family.py run OUT.jsonl     # runs the workflows (about 10 min)
    python tests/benchmarks/results_mdav_family.py tables OUT.jsonl  # markdown tables and the claims
    python tests/benchmarks/results_mdav_family.py descent           # refine with kicks: 0, k = 3, 5, 10 (1 min)
    python tests/benchmarks/results_mdav_family.py gamma             # V-MDAV / V-GRAV with a gain that extends (2 min)
    python tests/benchmarks/results_mdav_family.py stop              # stop: 2k against stop: k, k = 3..10 (3 min)

``run`` calls ``anonflow run workflows/microaggregation-<set>.yaml --json`` with
``--set <step>.k=K`` for the four algorithms (refine keeps the k of the MDAV partition) and
appends one JSON line per (data set, k) with every metric, skipping those already in the
file; ``tables`` prints the tables of ``docs/results-mdav.md`` and every figure of its
"Seed 003's claims" table and text. ``descent``, ``gamma`` and ``stop`` run the workflows
through the engine (as ``anonflow run --set`` does) for the variants the text discusses;
``--sets census`` (any of census, tarragona, eia) and ``--k 3,5`` restrict them.
Importing the module runs nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from script_args import listed_option

ROOT = Path(__file__).resolve().parents[2]
SETS = ("census", "tarragona", "eia")
STEPS = ("mdav", "vmdav", "grav", "vgrav", "refined")
NAMES = {"mdav": "MDAV", "vmdav": "V-MDAV", "grav": "GRAV", "vgrav": "V-GRAV", "refined": "MDAV + refine"}
LITERATURE = {"census": {3: 5.69, 5: 9.09, 10: 14.16}, "tarragona": {3: 16.93, 5: 22.46, 10: 33.19},
              "eia": {3: 0.48, 5: 1.67, 10: 3.84}}
KS = range(3, 11)


def run(out: Path, sets=SETS, ks=KS) -> None:
    """Run what ``out`` does not hold yet (so an interrupted sweep resumes)."""
    done_before = set()
    if out.exists():
        done_before = {(r["set"], r["k"]) for r in map(json.loads, out.read_text().splitlines()) if r}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sets:
            db = Path(tmp) / f"{name}.duckdb"
            for k in ks:
                if (name, k) in done_before:
                    continue
                args = ["anonflow", "run", str(ROOT / "workflows" / f"microaggregation-{name}.yaml"), "--json",
                        "--db", str(db)]
                for step in STEPS[:4]:
                    args += ["--set", f"{step}.k={k}"]
                done = subprocess.run(args, capture_output=True, text=True, check=True)
                result = json.loads(done.stdout)
                notes = {s["step"]: {"notes": s.get("notes"), "seconds": s.get("seconds")} for s in result["steps"]}
                with out.open("a") as fh:
                    fh.write(json.dumps({"set": name, "k": k, "metrics": result["metrics"], "notes": notes}) + "\n")
                print(name, k, {s: round(result["metrics"][f"score-{s}.sse-il"], 2) for s in STEPS}, flush=True)


def tables(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by = {(r["set"], r["k"]): r["metrics"] for r in rows}
    for name in SETS:
        print(f"\n### {name.capitalize()}\n")
        print("IL = 100·SSE/SST (%), DLD = linked/n (fraction)\n")
        head = "| k | " + " | ".join(f"{NAMES[s]} IL" for s in STEPS) + " | " + \
               " | ".join(f"{NAMES[s]} DLD" for s in STEPS) + " | lit. MDAV IL |"
        print(head)
        print("|" + "---|" * (2 + 2 * len(STEPS)))
        for k in KS:
            m = by.get((name, k))
            if m is None:
                continue
            il = " | ".join(f"{m[f'score-{s}.sse-il']:.2f}" for s in STEPS)
            dld = " | ".join(f"{m[f'score-{s}.dld']:.4f}" for s in STEPS)
            lit = LITERATURE[name].get(k)
            print(f"| {k} | {il} | {dld} | {lit if lit else ''} |")
        print()
        print("| k | V-GRAV IL / V-MDAV IL - 1 | V-GRAV DLD < V-MDAV DLD | GRAV IL / MDAV IL - 1 | GRAV DLD < MDAV DLD |")
        print("|---|---|---|---|---|")
        for k in KS:
            m = by.get((name, k))
            if m is None:
                continue
            rel = m["score-vgrav.sse-il"] / m["score-vmdav.sse-il"] - 1
            rel2 = m["score-grav.sse-il"] / m["score-mdav.sse-il"] - 1
            lower = m["score-vgrav.dld"] < m["score-vmdav.dld"]
            lower2 = m["score-grav.dld"] < m["score-mdav.dld"]
            print(f"| {k} | {100 * rel:+.1f} % | {'yes' if lower else 'no'} | {100 * rel2:+.1f} % | "
                  f"{'yes' if lower2 else 'no'} |")


def claims(path: Path) -> None:
    """Every figure of the "Seed 003's claims" table and of the text around the tables."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by = {(r["set"], r["k"]): r["metrics"] for r in rows}
    notes = {(r["set"], r["k"]): r["notes"] for r in rows}
    ks = sorted({k for _, k in by})

    def il(s, step, k):
        return by[(s, k)][f"score-{step}.sse-il"]

    def dld(s, step, k):
        return by[(s, k)][f"score-{step}.dld"]

    def rng(values, fmt="{:+.1f}"):
        return (fmt.format(min(values)) + " .. " + fmt.format(max(values))) if values else "–"

    sets = [s for s in SETS if any((s, k) in by for k in ks)]
    secs = [n["refined"]["seconds"] for n in notes.values() if n.get("refined", {}).get("seconds") is not None]
    limited = [key for key, n in notes.items() if any("time limit" in x for x in n.get("refined", {}).get("notes") or [])]
    print(f"refine: {len(secs)} runs, at most {max(secs):.1f} s (limit 60 s); stopped by the time limit: "
          + (", ".join(f"{s} k = {k}" for s, k in limited) or "none"))
    more = [dld(s, "refined", k) - dld(s, "mdav", k) for s in sets for k in ks if (s, k) in by]
    print(f"refine's DLD minus MDAV's: {min(more):.2f} .. {max(more):.2f}")
    for s in sets:
        kk = [k for k in ks if (s, k) in by]
        rel = {k: 100 * (il(s, "vgrav", k) / il(s, "vmdav", k) - 1) for k in kk}
        within = [k for k in kk if rel[k] <= 5]  # at most 5 % above V-MDAV's (or below it)
        print(f"\n{s}: V-GRAV IL at most 5 % above V-MDAV's at k = "
              + (", ".join(f"{k} ({rel[k]:+.1f} %)" for k in within) or "none") + "; others "
              + rng([rel[k] for k in kk if k not in within]) + " %")
        worse = [k for k in kk if not dld(s, "vgrav", k) < dld(s, "vmdav", k)]
        print(f"  V-GRAV DLD < V-MDAV DLD at {len(kk) - len(worse)} of {len(kk)} k; not at "
              + (", ".join(f"k = {k} ({dld(s, 'vgrav', k):.4f} vs {dld(s, 'vmdav', k):.4f})" for k in worse) or "none"))
        worse = [k for k in kk if not dld(s, "grav", k) < dld(s, "mdav", k)]
        print(f"  GRAV DLD < MDAV DLD at {len(kk) - len(worse)} of {len(kk)} k")
        up = {k: il(s, "grav", k) - il(s, "mdav", k) for k in kk}
        print(f"  GRAV IL - MDAV IL (points): {rng(list(up.values()))}; at most 1.5 at k = "
              f"{[k for k in kk if up[k] <= 1.5] or 'none'}")
        gain = {k: 100 * (dld(s, "mdav", k) - dld(s, "grav", k)) for k in kk}
        beats = [k for k in kk if gain[k] > up[k]]
        print(f"  GRAV DLD gain (points) {rng(list(gain.values()), '{:.2f}')}, above its IL loss at k = {beats or 'none'}"
              f" (IL loss there {rng([up[k] for k in beats], '{:.1f}')}); above 1.5 at k = "
              f"{[k for k in kk if gain[k] > 1.5] or 'none'}")
        print(f"  V-MDAV IL < MDAV IL at k = {[k for k in kk if il(s, 'vmdav', k) < il(s, 'mdav', k)] or 'none'}; "
              f"V-GRAV IL < GRAV IL at k = {[k for k in kk if il(s, 'vgrav', k) < il(s, 'grav', k)] or 'none'}")
        for step in STEPS[:4]:
            dips = [k for a, k in zip(kk, kk[1:]) if il(s, step, k) < il(s, step, a)]
            rises = [k for a, k in zip(kk, kk[1:]) if dld(s, step, k) > dld(s, step, a)]
            print(f"  {NAMES[step]}: IL falls at k = {dips or 'none'}; DLD rises at k = {rises or 'none'}")
    if set(sets) == set(SETS):
        order_il = all(il("tarragona", st, k) > il("census", st, k) > il("eia", st, k) for st in STEPS[:4] for k in ks)
        print(f"\nIL: Tarragona > Census > EIA at every k, for every algorithm: {'yes' if order_il else 'no'}")
        for st in STEPS[:4]:
            n = sum(dld("tarragona", st, k) < dld("census", st, k) < dld("eia", st, k) for k in ks)
            print(f"DLD: Tarragona < Census < EIA, {NAMES[st]}: {n} of {len(ks)} k")
        within = sum(il(s, "vgrav", k) / il(s, "vmdav", k) - 1 <= 0.05 for s in SETS for k in ks)
        lower = sum(dld(s, "vgrav", k) < dld(s, "vmdav", k) for s in SETS for k in ks)
        lower2 = sum(dld(s, "grav", k) < dld(s, "mdav", k) for s in SETS for k in ks)
        print(f"over the three data sets: V-GRAV IL at most 5 % above V-MDAV's {within} of {3 * len(ks)}; V-GRAV DLD lower "
              f"{lower} of {3 * len(ks)}; GRAV DLD lower {lower2} of {3 * len(ks)}")


def engine_run(db: Path, name: str, sets: list[str], steps=("mdav", "vmdav", "grav", "vgrav", "refined")):
    """``anonflow run workflows/microaggregation-<name>.yaml --set ...`` through the engine:
    (metrics, {step: notes}, {step: the groups as a label per record, source order})."""
    from anonflow.runner import Runner
    from anonflow.workflow.spec import load_workflow
    from anonflow.store import Store

    spec = load_workflow(ROOT / "workflows" / f"microaggregation-{name}.yaml", sets)
    store = Store(db)
    try:
        result = Runner(store).run(spec, output_dir=db.parent / "out")
        labels = {}
        for step in steps:
            data = store.get(store.step_in_run(result.run_id, step)["output_table"]).data.sort_by("_row")
            labels[step] = data.column("_class").to_pylist()
    finally:
        store.close()
    return result.metrics, {s["step"]: s["notes"] for s in result.steps}, labels


def _sizes(labels: list[int]) -> str:
    from collections import Counter

    sizes = Counter(labels).values()
    return f"{min(sizes)}..{max(sizes)}"


def descent(sets=SETS, ks=(3, 5, 10)) -> None:
    """refine with kicks: 0 (the plain move/swap descent) of the MDAV partition."""
    import re as _re

    print("| data set | k | MDAV IL | MDAV + descent IL | rounds |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in sets:
            for k in ks:
                m, notes, _ = engine_run(Path(tmp) / f"{name}.duckdb", name,
                                         [f"mdav.k={k}", "refined.kicks=0"], steps=("mdav",))
                rounds = _re.search(r"after (\d+) descent round", " ".join(notes["refined"]))[1]
                print(f"| {name} | {k} | {m['score-mdav.sse-il']:.2f} | {m['score-refined.sse-il']:.2f} | {rounds} |",
                      flush=True)


def gamma(sets=SETS, ks=(3, 5, 10)) -> None:
    """V-MDAV and V-GRAV with a gain that extends groups: IL % / DLD (group sizes)."""
    print("| data set, k | V-MDAV gamma 1.1 | V-GRAV gamma 1.02 | V-GRAV gamma 1.05 |")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in sets:
            db = Path(tmp) / f"{name}.duckdb"
            for k in ks:
                cells = []
                for sets_ in ([f"vmdav.k={k}", "vmdav.gamma=1.1", f"vgrav.k={k}", "vgrav.gamma=1.02"],
                              [f"vmdav.k={k}", "vmdav.gamma=1.1", f"vgrav.k={k}", "vgrav.gamma=1.05"]):
                    m, _, labels = engine_run(db, name, sets_, steps=("vmdav", "vgrav"))
                    cell = {s: f"{m[f'score-{s}.sse-il']:.2f} / {m[f'score-{s}.dld']:.4f} ({_sizes(labels[s])})"
                            for s in ("vmdav", "vgrav")}
                    if not cells:
                        cells.append(cell["vmdav"])
                    cells.append(cell["vgrav"])
                print(f"| {name.capitalize() if name != 'eia' else 'EIA'}, {k} | " + " | ".join(cells) + " |",
                      flush=True)


def stop(sets=SETS, ks=KS) -> None:
    """Seed 003's stopping rule (stop: 2k) against SPEC's (stop: k) for V-MDAV and V-GRAV."""
    from collections import defaultdict

    def groups(labels):
        members = defaultdict(list)
        for i, g in enumerate(labels):
            members[g].append(i)
        return {i: tuple(m) for m in members.values() for i in m}

    print("| data set | k | algorithm | records with another group id | records in a group the other lacks | "
          "IL stop: k | IL stop: 2k | DLD stop: k | DLD stop: 2k |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    differ, moved, d_il, d_dld, worst = 0, [], [], [], None
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sets:
            db = Path(tmp) / f"{name}.duckdb"
            for k in ks:
                base = [f"vmdav.k={k}", f"vgrav.k={k}"]
                m1, _, l1 = engine_run(db, name, base, steps=("vmdav", "vgrav"))
                m2, _, l2 = engine_run(db, name, base + ["vmdav.stop=2k", "vgrav.stop=2k"], steps=("vmdav", "vgrav"))
                for s in ("vmdav", "vgrav"):
                    total += 1
                    g1, g2 = groups(l1[s]), groups(l2[s])
                    # groups are numbered in order of formation, and both rules form the same
                    # groups until fewer than 2k records are left
                    n = sum(a != b for a, b in zip(l1[s], l2[s]))
                    n_groups = sum(g1[i] != g2[i] for i in g1)
                    a, b = m1[f"score-{s}.sse-il"], m2[f"score-{s}.sse-il"]
                    c, d = m1[f"score-{s}.dld"], m2[f"score-{s}.dld"]
                    if n:
                        differ += 1
                        moved.append(n)
                    d_il.append(abs(a - b))
                    d_dld.append(abs(c - d))
                    if worst is None or abs(a - b) > worst[0]:
                        worst = (abs(a - b), name, s, k, a, b)
                    print(f"| {name} | {k} | {NAMES[s]} | {n} | {n_groups} | {a:.2f} | {b:.2f} | {c:.4f} | {d:.4f} |", flush=True)
    print(f"\nthe partitions differ in {differ} of {total} runs"
          + (f", {min(moved)} - {max(moved)} records with another group id" if moved else "")
          + f"; IL by at most {max(d_il):.2f} points ({worst[1]} {NAMES[worst[2]]}, k = {worst[3]}: "
            f"{worst[4]:.2f} vs {worst[5]:.2f}), DLD by at most {max(d_dld):.4f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    sets = listed_option(args, "--sets", SETS, str)
    ks = listed_option(args, "--k", None, int)
    what = args[0] if args else ""
    if what == "run" and len(args) == 2:
        run(Path(args[1]), sets, ks or tuple(KS))
    elif what == "tables" and len(args) == 2:
        tables(Path(args[1]))
        claims(Path(args[1]))
    elif what == "descent" and len(args) == 1:
        descent(sets, ks or (3, 5, 10))
    elif what == "gamma" and len(args) == 1:
        gamma(sets, ks or (3, 5, 10))
    elif what == "stop" and len(args) == 1:
        stop(sets, ks or tuple(KS))
    else:
        sys.exit(__doc__)
