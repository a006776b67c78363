"""Seed 002's experiment with its generalization baseline (docs/results-gca.md, docs/results.md
section 4).

Run as a script::

    python tests/benchmarks/results_gca.py gca         # the GCA tables: k = 2..10, alpha = 0.2..0.6, Ds (about 2 min)
    python tests/benchmarks/results_gca.py baseline    # against the lattice baseline, 0/1/5 % (about 10 min)
    python tests/benchmarks/results_gca.py baseline --k 4 --limits 0   # one quick row

Both run workflows/gca-adult.yaml through the engine, exactly as ``anonflow run`` with
``--set`` does (one store, so unchanged steps come from the cache). ``gca`` prints the
reconstruction distance Dis and the classes of both GCA algorithms per k and alpha, the
sensitivity distance Ds(T_SA) at k = 5 (also with ``per: level``), the ``per: level`` run at
k = 4, the data's shares and the leftover records the text quotes, and the greedy classes
alone (before the leftovers join them) with ``choice: first``. ``baseline`` runs the lattice
baseline ('generalized') at 0 % suppression and at the suppression limits given (then scoring
every satisfying node, ``candidates: satisfying``), for k = 2..10 at alpha = 0.5 and
alpha = 0.2..0.6 at k = 4, and prints Markdown rows: Dis of the three methods (the baseline's
over all 10,000 records, a suppressed one counting as err = 1), the baseline's mean cells V,
classes, published records, chosen node and nodes checked, then Ds(T_SA) at k = 5, then the
tables of docs/results-gca.md as they appear there. Importing the module runs nothing.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from script_args import listed_option

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "workflows" / "gca-adult.yaml"


KS = tuple(range(2, 11))
ALPHAS = (0.2, 0.3, 0.35, 0.4, 0.5, 0.6)


def engine_run(store_dir: Path, sets: list[str]):
    """One ``anonflow run workflows/gca-adult.yaml --set ...`` in the store of ``store_dir``:
    (result, {GCA step: a digest of its classes})."""
    from anonflow.runner import Runner
    from anonflow.workflow.spec import load_workflow
    from anonflow.store import Store

    import hashlib

    spec = load_workflow(WORKFLOW, sets)
    store = Store(store_dir / "results.duckdb")
    try:
        result = Runner(store).run(spec, output_dir=store_dir / "out")
        # the classes each GCA step formed (records in source order), as a digest
        hashes = {}
        for step in ("graded", "uniform"):
            data = store.get(store.step_in_run(result.run_id, step)["output_table"]).data
            data = data.sort_by("_row")
            hashes[step] = hashlib.sha256(str(data.column("_class").to_pylist()).encode()).hexdigest()
    finally:
        store.close()
    return result, hashes


def _step(result, name: str) -> dict:
    return next(s for s in result.steps if s["step"] == name)


def run(store_dir: Path, k: int, alpha: float, suppression: float) -> dict[str, object]:
    sets = [f"graded.k={k}", f"uniform.k={k}", f"uniform.alpha={alpha}", f"generalized.model_params.k={k}",
            f"generalized.model_params.alpha={alpha}", f"generalized.suppression={suppression}"]
    if suppression:
        # with suppression a coarser node may suppress fewer records: score every satisfying node
        sets.append("generalized.candidates=satisfying")
    result, _ = engine_run(store_dir, sets)
    m = result.metrics
    notes = _step(result, "generalized")["notes"]
    node = next(n for n in notes if "chosen node" in n).split("chosen node ")[1].split("]")[0] + "]"
    checked = next(n for n in notes if "; checked " in n).split("; checked ")[1].split(",")[0]
    assert m["generalized-scores.alpha-k-anonymity.holds"] == 1.0
    return {"graded": m["graded-scores.reconstruction-distance"],
            "uniform": m["uniform-scores.reconstruction-distance"],
            # Dis over all 10,000 records, a suppressed one counting as err = 1
            "generalized": m.get("generalized-scores.reconstruction-distance.with_suppressed",
                                 m["generalized-scores.reconstruction-distance"]),
            "cells": m["generalized-scores.reconstruction-distance.mean_cells"],
            "classes": int(m["generalized-scores.k-anonymity.classes"]),
            "published": int(_step(result, "generalized")["rows"] or 0),
            "ds_graded": m["graded-scores.sensitivity-distance"],
            "ds_uniform": m["uniform-scores.sensitivity-distance"],
            "ds_generalized": m["generalized-scores.sensitivity-distance"],
            "node": node, "checked": int(checked)}


def baseline(ks=KS, alphas=ALPHAS, limits: tuple[float, ...] = (0.0, 0.01, 0.05)) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(tmp)
        settings = [(k, 0.5) for k in ks] + [(4, a) for a in alphas if a != 0.5 and 4 in ks]
        print("| k | alpha | suppression | (alpha_i,k)-GCA Dis | (alpha,k)-GCA Dis | baseline Dis | baseline "
              "mean cells V | classes | published | baseline node | nodes checked |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        res = {}
        for k, alpha in settings:
            for limit in limits:
                r = res[(k, alpha, limit)] = run(store_dir, k, alpha, limit)
                print(f"| {k} | {alpha} | {100 * limit:g} % | {r['graded']:.4f} | {r['uniform']:.4f} | "
                      f"{r['generalized']:.6f} | {r['cells']:,.0f} | {r['classes']} | {r['published']:,} | "
                      f"{r['node']} | {r['checked']} |", flush=True)
        print()
        print("| suppression | Ds(T_SA) (alpha_i,k)-GCA | (alpha,k)-GCA, alpha = 0.5 | baseline |   (k = 5)")
        print("| --- | --- | --- | --- |")
        for limit in limits:
            r = run(store_dir, 5, 0.5, limit)
            print(f"| {100 * limit:g} % | {r['ds_graded']:.4f} | {r['ds_uniform']:.4f} | {r['ds_generalized']:.4f} |",
                  flush=True)
    # the tables of docs/results-gca.md ("The generalization baseline") and docs/results.md section 4
    head = " | ".join(f"baseline, {100 * limit:g} % | V" + (" | classes" if not limit else " | published")
                      for limit in limits)
    print(f"\n| k | (alpha_i,k)-GCA | (alpha,k)-GCA | {head} |")
    print("| --- | --- | --- | " + " | ".join("--- | ---: | ---:" for _ in limits) + " |")
    for k in ks:
        r0 = res[(k, 0.5, limits[0])]
        cells = []
        for limit in limits:
            r = res[(k, 0.5, limit)]
            cells.append(f"{r['generalized']:.6f} | {r['cells']:,.0f} | "
                         + (f"{r['classes']}" if not limit else f"{r['published']:,}"))
        print(f"| {k} | {r0['graded']:.4f} | {r0['uniform']:.4f} | " + " | ".join(cells) + " |")
    if 4 in ks:
        print(f"\n| alpha | (alpha,k)-GCA | " + " | ".join(f"baseline, {100 * limit:g} % | V" + (" | classes" if not limit else "")
                                                       for limit in limits) + " |")
        print("| --- | --- | " + " | ".join("--- | ---:" + (" | ---:" if not limit else "") for limit in limits) + " |")
        for a in alphas:
            r0 = res[(4, a, limits[0])]
            cells = [f"{res[(4, a, limit)]['generalized']:.6f} | {res[(4, a, limit)]['cells']:,.0f}"
                     + (f" | {res[(4, a, limit)]['classes']}" if not limit else "") for limit in limits]
            print(f"| {a:g} | {r0['uniform']:.4f} | " + " | ".join(cells) + " |")
    short = [k for k in ks if k % 2 == 0]
    print("\ndocs/results.md, section 4:\n")
    print("| k (alpha = 0.5) | (alpha_i,k)-GCA | (alpha,k)-GCA | "
          + " | ".join(("baseline, " if i == 0 else "") + f"{100 * limit:g} %" for i, limit in enumerate(limits)) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in limits) + " |")
    for k in short:
        r0 = res[(k, 0.5, limits[0])]
        print(f"| {k} | {r0['graded']:.4f} | {r0['uniform']:.4f} | "
              + " | ".join(f"{res[(k, 0.5, limit)]['generalized']:.6f}" for limit in limits) + " |")
    gca = [min(r["graded"], r["uniform"]) for r in res.values()] + [max(r["graded"], r["uniform"]) for r in res.values()]
    base = [r["generalized"] for r in res.values()]
    holds = sum(max(r["graded"], r["uniform"]) < r["generalized"] for r in res.values())
    print(f"\nGCA's Dis below the baseline's in {holds} of {len(res)} settings; the baseline's Dis "
          f"{min(base):.6f} to {max(base):.6f}, GCA's {min(gca):.4f} to {max(gca):.4f}; "
          f"V {min(r['cells'] for r in res.values()):,.0f} to {max(r['cells'] for r in res.values()):,.0f} cells")


def _greedy_only(typed, algorithm, params: dict):
    """The plugin's classes before step 3 (the leftovers joining): the labels as they are at
    the last call of the progress callback, which gca_partition makes after each greedy class."""
    import sys as _sys

    import pyarrow as pa

    from anonflow.testing import make_context

    snapshot = {}

    def progress(total, label=""):
        def advance(n=1):
            frame = _sys._getframe(2)
            if frame.f_code.co_name == "gca_partition":
                snapshot["labels"] = frame.f_locals["labels"].copy()
        return advance

    ctx = make_context()
    ctx.progress = progress
    out = algorithm.run(typed, params, ctx)
    labels = snapshot["labels"]
    greedy = typed.replace(data=typed.data.filter(pa.array(labels >= 0)).append_column(
        "_class", pa.array(labels[labels >= 0], type=pa.int64())), claims=out.claims)
    full = out.replace(data=out.data.filter(out.data.column("_class").is_valid()))
    return greedy, full, labels


def gca(ks=KS, alphas=ALPHAS) -> None:
    import numpy as np
    import pyarrow.compute as pc

    from anonflow.params import validate_params
    from anonflow.registry import get_registry
    from anonflow.store import Store
    from anonflow.testing import make_context
    from anonflow_std.clustering.gca import AlphaIKGca, AlphaKGca

    reg = get_registry()
    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(tmp)
        res = {}
        suppressed = []
        print("| k | alpha | (alpha_i,k)-GCA Dis | classes | (alpha,k)-GCA Dis | classes | graded notes |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        settings = [(k, 0.5) for k in ks] + [(4, a) for a in alphas if a != 0.5]
        for k, alpha in settings:
            result, hashes = engine_run(store_dir, [f"graded.k={k}", f"uniform.k={k}", f"uniform.alpha={alpha}"])
            m = result.metrics
            for side in ("graded", "uniform"):
                holds = "alpha-i-k-anonymity" if side == "graded" else "alpha-k-anonymity"
                assert m[f"{side}-scores.{holds}.holds"] == 1.0
                suppressed.append(int(_step(result, side).get("suppressed") or 0))
            r = res[(k, alpha)] = {
                "graded": m["graded-scores.reconstruction-distance"],
                "graded_classes": int(m["graded-scores.k-anonymity.classes"]),
                "uniform": m["uniform-scores.reconstruction-distance"],
                "uniform_classes": int(m["uniform-scores.k-anonymity.classes"]),
                "ds_graded": m["graded-scores.sensitivity-distance"],
                "ds_graded_classes": int(m["graded-scores.sensitivity-distance.classes"]),
                "ds_uniform": m["uniform-scores.sensitivity-distance"],
                "ds_uniform_classes": int(m["uniform-scores.sensitivity-distance.classes"]),
                "uniform_hash": hashes["uniform"], "notes": _step(result, "graded")["notes"]}
            print(f"| {k} | {alpha:g} | {r['graded']:.4f} | {r['graded_classes']} | {r['uniform']:.4f} | "
                  f"{r['uniform_classes']} | {'; '.join(r['notes'])} |", flush=True)
        print(f"\nrecords suppressed in these (per: value) runs: at most {max(suppressed)}")

        print("\n## Reconstruction distance, k = 2..10 (alpha = 0.5 for (alpha,k)-GCA)\n")
        print("| k | (alpha_i,k)-GCA Dis | classes | (alpha,k)-GCA Dis | classes |")
        print("| --- | --- | --- | --- | --- |")
        for k in ks:
            r = res[(k, 0.5)]
            print(f"| {k} | {r['graded']:.4f} | {r['graded_classes']} | {r['uniform']:.4f} | {r['uniform_classes']} |")
        close = [abs(res[(k, 0.5)]["graded"] - res[(k, 0.5)]["uniform"]) for k in ks if k >= 4]
        if close:
            print(f"\n|(alpha_i,k)-GCA - (alpha,k)-GCA| for k >= 4: at most {max(close):.4f}")
        if 4 in ks:
            print("\n## Reconstruction distance, alpha = 0.2..0.6 (k = 4)\n")
            print("| alpha | (alpha,k)-GCA Dis | classes | (alpha_i,k)-GCA Dis (does not depend on alpha) |")
            print("| --- | --- | --- | --- |")
            for a in alphas:
                r = res[(4, a)]
                print(f"| {a:g} | {r['uniform']:.4f} | {r['uniform_classes']} | {r['graded']:.4f} |")

        # Ds at k = 5: per value, the uniform alphas, per level
        print("\n## Sensitivity distance Ds(T_SA), k = 5\n")
        level5, _ = engine_run(store_dir, ["graded.k=5", "graded.per=level", "graded.max_suppression=0.3"])
        lv = level5.metrics
        a5 = sorted({a for a in alphas if a <= 0.5} | {0.5})
        r5 = {a: engine_run(store_dir, ["graded.k=5", "uniform.k=5", f"uniform.alpha={a}"]) for a in a5}
        same = len({h["uniform"] for _, h in r5.values()}) == 1
        m5 = r5[0.5][0].metrics
        print("| algorithm | Ds(T_SA) | classes with level 1 or 2 |")
        print("| --- | --- | --- |")
        print(f"| (alpha_i,k)-GCA, `per: value` | {m5['graded-scores.sensitivity-distance']:.4f} | "
              f"{m5['graded-scores.sensitivity-distance.classes']:.0f} of {m5['graded-scores.k-anonymity.classes']:.0f} |")
        alist = ", ".join(f"{a:g}" for a in a5)
        print(f"| (alpha,k)-GCA, alpha = {alist} ({'identical classes' if same else 'classes differ'}) | "
              f"{m5['uniform-scores.sensitivity-distance']:.4f} | {m5['uniform-scores.sensitivity-distance.classes']:.0f} "
              f"of {m5['uniform-scores.k-anonymity.classes']:.0f} |")
        print(f"| (alpha_i,k)-GCA, `per: level` ({_step(level5, 'graded')['suppressed']:,} records suppressed) | "
              f"{lv['graded-scores.sensitivity-distance']:.4f} | {lv['graded-scores.sensitivity-distance.classes']:.0f} "
              f"of {lv['graded-scores.k-anonymity.classes']:.0f} |")

        level4, hashes = engine_run(store_dir, ["graded.k=4", "graded.per=level", "graded.max_suppression=0.3"])
        l4 = level4.metrics
        print(f"\n`per: level` at k = 4: {int(l4['graded-scores.reconstruction-distance.records']):,} records published "
              f"in {l4['graded-scores.k-anonymity.classes']:,.0f} classes (Dis {l4['graded-scores.reconstruction-distance']:.3f}"
              f" over them; {l4['graded-scores.reconstruction-distance.with_suppressed']:.3f} with each of the "
              f"{int(l4['graded-scores.reconstruction-distance.suppressed']):,} suppressed records counted as err = 1)")

        # the data the text quotes, and the greedy classes alone
        store = Store(store_dir / "results.duckdb")
        try:
            typed = store.get(store.step_in_run(level4.run_id, "typed")["output_table"])
        finally:
            store.close()
        occ = typed.data.column("occupation")
        counts = pc.value_counts(occ).to_pylist()
        top = max(counts, key=lambda c: c["counts"])
        print(f"\nthe sample's most frequent occupation: {top['values']}, {100 * top['counts'] / typed.num_rows:.1f} % "
              f"of {typed.num_rows:,} records; {len(counts)} occupations")
        level_of = _levels_of(typed)
        lvl = np.array([level_of[v] for v in occ.to_pylist()])
        print("records per level: " + ", ".join(f"level {i}: {100 * np.mean(lvl == i):.1f} %" for i in sorted(set(lvl))))
        note = res[(5, 0.5)]["notes"][0] if (5, 0.5) in res else ""
        print(f"(alpha_i,k)-GCA at k = 5: {note}")

        print("\ngreedy classes alone (before the leftovers join them), k = 5, alpha = 0.5:\n")
        print("| algorithm, choice | Ds(T_SA) greedy classes | greedy records | Ds(T_SA) all classes | leftover records "
              "by level |")
        print("| --- | --- | --- | --- | --- |")
        sd = reg.get("metric", "sensitivity-distance").obj
        sd_params = validate_params(sd.params, {})
        for algorithm, given in ((AlphaIKGca(), {"k": 5, "per": "value"}), (AlphaKGca(), {"k": 5, "alpha": 0.5})):
            for choice in ("nearest", "first"):
                params = validate_params(algorithm.params, {**given, "choice": choice})
                greedy, full, labels = _greedy_only(typed, algorithm, params)
                g = sd.compute(None, greedy, sd_params, make_context())["sensitivity-distance"]
                f = sd.compute(None, full, sd_params, make_context())["sensitivity-distance"]
                left = lvl[labels < 0]
                by = ", ".join(f"level {i}: {int(np.sum(left == i)):,}" for i in sorted(set(left))) or "none"
                print(f"| {algorithm.name}, {choice} | {g:.4f} | {int(np.sum(labels >= 0)):,} | {f:.4f} | {by} |")
                if algorithm.name == "alpha-i-k-gca" and choice == "nearest":
                    composition = _later_classes(labels, lvl, typed)
        print(f"\n(alpha_i,k)-GCA (nearest), the later half of its greedy classes by level composition: {composition}")


def _later_classes(labels, lvl, typed, top: int = 3) -> str:
    """The commonest level compositions among the later half of the greedy classes (class
    ids are in order of formation), with their share and Ds(E)."""
    from collections import Counter

    import numpy as np

    from anonflow.grading import Grading, sensitivity_distance

    attr = next(a for a in typed.typing.attributes if a.name == "occupation")
    grading = attr.options["grading"]
    grading = grading if isinstance(grading, Grading) else Grading.from_json(grading)
    g = int(labels.max()) + 1
    later = Counter()
    for c in range(g // 2, g):
        later[tuple(sorted(lvl[labels == c]))] += 1
    total = sum(later.values())
    out = []
    for comp, n in later.most_common(top):
        counts = np.zeros((1, grading.size + 1))
        for v in comp:
            counts[0, v] += 1
        ds = float(sensitivity_distance(counts, grading)[0])
        out.append(f"({', '.join(map(str, comp))}) {100 * n / total:.0f} %, Ds(E) = {ds:.2f}")
    return "; ".join(out)


def _levels_of(typed) -> dict[str, int]:
    """Each occupation's sensitivity level, from the typing's grading."""
    from anonflow.grading import Grading

    attr = next(a for a in typed.typing.attributes if a.name == "occupation")
    grading = attr.options["grading"]
    grading = grading if isinstance(grading, Grading) else Grading.from_json(grading)
    return grading.value_levels()


if __name__ == "__main__":
    args = sys.argv[1:]
    ks = listed_option(args, "--k", KS, int)
    alphas = listed_option(args, "--alpha", ALPHAS, float)
    limits = listed_option(args, "--limits", (0.0, 0.01, 0.05), float)
    what = args[0] if args else "baseline"
    if what == "baseline":
        baseline(ks, alphas, limits)
    elif what == "gca":
        gca(ks, alphas)
    else:
        sys.exit(__doc__)
