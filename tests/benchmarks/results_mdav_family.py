"""Seed 003's experiment: run the three microaggregation workflows for k = 3..10.

    python tests/benchmarks/results_mdav_family.py run OUT.jsonl     # runs the workflows
    python tests/benchmarks/results_mdav_family.py tables OUT.jsonl  # markdown tables

``run`` calls ``anonflow run workflows/microaggregation-<set>.yaml --json`` with
``--set <step>.k=K`` for the four algorithms (refine keeps the k of the MDAV partition) and
appends one JSON line per (data set, k) with every metric, skipping those already in the
file; ``tables`` prints the tables of ``docs/results-mdav.md``.  Importing the module runs nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETS = ("census", "tarragona", "eia")
STEPS = ("mdav", "vmdav", "grav", "vgrav", "refined")
NAMES = {"mdav": "MDAV", "vmdav": "V-MDAV", "grav": "GRAV", "vgrav": "V-GRAV", "refined": "MDAV + refine"}
LITERATURE = {"census": {3: 5.69, 5: 9.09, 10: 14.16}, "tarragona": {3: 16.93, 5: 22.46, 10: 33.19},
              "eia": {3: 0.48, 5: 1.67, 10: 3.84}}
KS = range(3, 11)


def run(out: Path) -> None:
    """Run what ``out`` does not hold yet (so an interrupted sweep resumes)."""
    done_before = set()
    if out.exists():
        done_before = {(r["set"], r["k"]) for r in map(json.loads, out.read_text().splitlines()) if r}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SETS:
            db = Path(tmp) / f"{name}.duckdb"
            for k in KS:
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


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("run", "tables"):
        sys.exit(__doc__)
    (run if sys.argv[1] == "run" else tables)(Path(sys.argv[2]))
