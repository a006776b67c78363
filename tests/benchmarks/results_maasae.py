"""The MAASAE experiment of seed 000 (SPEC section 4, Table 5) on all of UCI Adult
(docs/results-maasae.md).

Run as a script::

    python tests/benchmarks/results_maasae.py data                                   # the data (seconds)
    python tests/benchmarks/results_maasae.py run results.jsonl [objective ...] [--seeds N] [--settings K,P ...]
    python tests/benchmarks/results_maasae.py table results.jsonl
    python tests/benchmarks/results_maasae.py steps [--records 8000]                 # p = 7 vs p = 5, step by step

``data`` prints the records left after the 6-digit fnlwgt filter and the occupation counts.
``run`` runs the ``maasae`` plugin as a workflow step does (``check``, then ``run`` with a
context seeded 0..N-1; default N = 10) for the nine (k, p) of Table 5 (or those given with
``--settings 10,5 12,7``) and the given objectives (default: apf, apf-safe, min-il), computes
AVG-IL, AVG-Ent and CAVG with the metric plugins and checks p-sensitive k-anonymity in SQL,
appending one JSON line per run (a run already in the file is skipped, so an interrupted
sweep resumes). All of it takes about 100 minutes on 2 cores (about 33 s per apf run).
``table`` prints the tables of docs/results-maasae.md (mean and standard deviation over seeds)
and every figure its text quotes: what ran, the differences to the paper, the spread over
seeds, the classes per seed, the gaps to MAA-MINIL and the running times. ``steps`` runs
Algorithm 1 on the first ``--records`` records (k = 10, seed 0) with p = 7 and p = 5, records
each greedy step (the record added or the class merged) and says whether the p = 7 run is
step for step the beginning of the p = 5 run. Importing this module runs nothing.
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


def run(path: Path, objectives: list[str], seeds: int, settings=tuple(TABLE5)) -> None:
    from bench_maasae import load_adult, run_once

    from anonflow.testing import make_context
    from anonflow_std.privacy.distinct_diversity import PSensitiveKAnonymity
    from anonflow_std.utility.class_metrics import AvgEnt, AvgIl, Cavg

    done = set()
    if path.exists():
        for line in path.read_text().splitlines():
            r = json.loads(line)
            done.add((r["objective"], r["k"], r["p"], r["seed"]))
    table = load_adult()
    for seed in range(seeds):
        for objective in objectives:
            for (k, p) in settings:
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


def data() -> None:
    import pyarrow.compute as pc
    from bench_maasae import load_adult

    table = load_adult()
    counts = sorted(pc.value_counts(table.data.column("occupation")).to_pylist(), key=lambda c: c["counts"])
    print(f"{table.num_rows:,} records with a 6-digit fnlwgt; occupation: {len(counts)} values")
    print(", ".join(f"{c['values']} {c['counts']:,}" for c in counts))


def steps(records: int = 8000, k: int = 10, seed: int = 0, ps=(7, 5)) -> None:
    """Is the p = 7 run step for step the beginning of the p = 5 run (same seed)?"""
    import numpy as np
    from bench_maasae import load_adult

    from anonflow_std.common.encode import encode
    from anonflow_std.microaggregation.maasae import maasae_partition
    from anonflow_std.common.columns import sensitive_codes

    table = load_adult()
    table = table.replace(data=table.data.slice(0, records))
    enc = encode(table)
    s_codes = sensitive_codes(table, "occupation", "maasae")
    traces, stats = {}, {}
    for p in ps:
        trace: list = []
        st: dict = {}
        maasae_partition(enc, s_codes, k, p, "apf", np.random.default_rng(seed), stats=st, trace=trace)
        traces[p] = [step[:2] for step in trace]  # ("add", record) or ("merge", class)
        stats[p] = st
        print(f"p = {p}: {len(trace):,} greedy steps ({st['steps']:,} counted), {st['merges']:,} merges, "
              f"{st['leftover']:,} leftover records", flush=True)
    short, long = sorted(ps, key=lambda p: len(traces[p]))
    same = traces[short] == traces[long][:len(traces[short])]
    first_diff = next((i for i, (a, b) in enumerate(zip(traces[short], traces[long])) if a != b), None)
    print(f"the first {records:,} records, k = {k}, seed {seed}: all {len(traces[short]):,} steps of the p = {short} run "
          f"(merges included) {'are' if same else 'are NOT'} the first {len(traces[short]):,} of the p = {long} run's "
          f"{len(traces[long]):,}" + ("" if same else f" (first difference at step {first_diff})"))


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
            settings = len({(r["k"], r["p"]) for r in rs})
            which = "all nine settings" if settings == len(TABLE5) else f"{settings} of the nine settings"
            out.append(f"- `{objective}`: {len(rs)} runs, median {statistics.median(r['wall'] for r in rs):.0f} s "
                       f"wall clock, {statistics.median(r['cpu'] for r in rs):.0f} s CPU per run ({which})")
    return "\n".join(out)


def summary_text(rows: list[dict]) -> str:
    """The figures the text of docs/results-maasae.md quotes."""
    by = _by(rows)
    out = []
    ran = []
    for objective in OBJECTIVES:
        rs = [r for r in rows if r["objective"] == objective]
        if rs:
            seeds = len({r["seed"] for r in rs})
            settings = len({(r["k"], r["p"]) for r in rs})
            which = "the nine" if settings == len(TABLE5) else str(settings)
            name = "`min-il` (MAA-MINIL)" if objective == "min-il" else f"`{objective}`"
            ran.append(f"{name}: {len(rs)} runs ({seeds} seeds x {which} (k, p))")
    out.append("What ran: " + "; ".join(ran) + ".")
    apf = {kp: by[("apf",) + kp] for kp in TABLE5 if ("apf",) + kp in by}
    if apf:
        out.append("ours against the paper (apf, relative difference of the means):")
        for (k, p), rs in apf.items():
            il = statistics.mean(r["avg_il"] for r in rs)
            ent = statistics.mean(r["avg_ent"] for r in rs)
            pil, pent = TABLE5[(k, p)]
            out.append(f"  k = {k}, p = {p}: AVG-IL {il:.3f} ({100 * (il / pil - 1):+.1f} %), "
                       f"AVG-Ent {ent:.3f} ({100 * (ent / pent - 1):+.1f} %)")
        multi = [rs for rs in apf.values() if len(rs) > 1]
        if multi:
            sd_il = [statistics.stdev(r["avg_il"] for r in rs) for rs in multi]
            sd_ent = [statistics.stdev(r["avg_ent"] for r in rs) for rs in multi]
            out.append(f"standard deviation over seeds: AVG-IL {min(sd_il):.1e} to {max(sd_il):.1e}, "
                       f"AVG-Ent {min(sd_ent):.1e} to {max(sd_ent):.1e}")
        for k in sorted({k for k, _ in apf}):
            rs = [r for (kk, _), v in apf.items() if kk == k for r in v]
            classes = [r["classes"] for r in rs]
            same_p = all(len({r["classes"] for (kk, _), v in apf.items() if kk == k for r in v if r["seed"] == s}) == 1
                         for s in {r["seed"] for r in rs})
            out.append(f"  k = {k}: classes {min(classes):,}-{max(classes):,} over the seeds (mean "
                       f"{statistics.mean(classes):,.0f}; the same for every p of a seed: {'yes' if same_p else 'no'}), "
                       f"CAVG {statistics.mean(r['cavg'] for r in rs):.2f}, {statistics.mean(37290 / c for c in classes):.0f} "
                       f"records per class")
        trend = []
        for k in sorted({k for k, _ in apf}):
            ps = sorted(p for kk, p in apf if kk == k)
            il = [statistics.mean(r["avg_il"] for r in apf[(k, p)]) for p in ps]
            ent = [statistics.mean(r["avg_ent"] for r in apf[(k, p)]) for p in ps]
            trend.append(f"k = {k}: AVG-IL " + " -> ".join(f"{v:.3f}" for v in il) + ", AVG-Ent "
                         + " -> ".join(f"{v:.2f}" for v in ent) + f" (p = {', '.join(map(str, ps))})")
        out.append("the trend in p (apf): " + "; ".join(trend))
    minil = {kp: by[("min-il",) + kp] for kp in TABLE5 if ("min-il",) + kp in by}
    both = [kp for kp in minil if kp in apf]
    if both:
        d_il = [statistics.mean(r["avg_il"] for r in apf[kp]) - statistics.mean(r["avg_il"] for r in minil[kp])
                for kp in both]
        d_ent = [statistics.mean(r["avg_ent"] for r in apf[kp]) - statistics.mean(r["avg_ent"] for r in minil[kp])
                 for kp in both]
        cavg = [statistics.mean(r["cavg"] for r in minil[kp]) for kp in both]
        merges = sum(int(str(r["notes"]).split(" merge")[0].split("; ")[-1]) for rs in minil.values() for r in rs
                     if " merge" in str(r["notes"]))
        out.append(f"apf minus min-il: AVG-IL {min(d_il):.2f} to {max(d_il):.2f}, AVG-Ent {min(d_ent):.2f} to "
                   f"{max(d_ent):.2f} bits; min-il's CAVG {min(cavg):.2f} to {max(cavg):.2f}; merges in min-il runs: "
                   f"{merges}")
        rises = all(statistics.mean(r[key] for r in minil[(k, p)]) < statistics.mean(r[key] for r in minil[(k, q)])
                    for key in ("avg_il", "avg_ent") for (k, p) in minil for (kk, q) in minil if kk == k and q == p + 1)
        out.append(f"min-il's AVG-IL and AVG-Ent rise with p at every k: {'yes' if rises else 'no'}")
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
    print()
    print(summary_text(rows))


def _option(args: list[str], name: str, n: int = 1):
    if name not in args:
        return None
    i = args.index(name)
    values = []
    j = i + 1
    while j < len(args) and not args[j].startswith("--") and (n is None or len(values) < n):
        values.append(args[j])
        j += 1
    del args[i:j]
    return values


if __name__ == "__main__":
    args = sys.argv[1:]
    seeds = int((_option(args, "--seeds") or ["10"])[0])
    records = int((_option(args, "--records") or ["8000"])[0])
    settings = _option(args, "--settings", None)
    settings = tuple(tuple(int(x) for x in s.split(",")) for s in settings) if settings else tuple(TABLE5)
    if not args or args[0] not in ("run", "table", "data", "steps") or (args[0] in ("run", "table") and len(args) < 2):
        raise SystemExit(__doc__)
    if args[0] == "run":
        run(Path(args[1]), args[2:] or list(OBJECTIVES), seeds, settings)
    elif args[0] == "table":
        table(Path(args[1]))
    elif args[0] == "data":
        data()
    else:
        steps(records)
