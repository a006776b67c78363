"""The L-clustering experiment of seed 001 on all of UCI Adult (docs/results-lclustering.md,
docs/results.md section 3).

Run as a script::

    python tests/benchmarks/results_lclustering.py sweep            # l = 2..12 at |QI| = 2, 5, 8 (about 10 min)
    python tests/benchmarks/results_lclustering.py sweep 3,4,6,7    # ... at other |QI|
    python tests/benchmarks/results_lclustering.py full             # L(D, D_c) for |QI| = 2..8 (seconds)
    python tests/benchmarks/results_lclustering.py reruns           # 20 seeds at |QI| = 5, l = 7 (about 10 min)
    python tests/benchmarks/results_lclustering.py reruns --seeds 3 # seeds 1..3 only
    python tests/benchmarks/results_lclustering.py ratio            # against L-incognito, |QI| = 2..8 (about 30 min)
    python tests/benchmarks/results_lclustering.py ratio 2 --ls 2,3 # a quick check: |QI| = 2, l = 2, 3

``--cache FILE`` (sweep, ratio) appends each L-clustering run to FILE as a JSON line and reuses
the runs already there, so ``sweep 2,3,4,5,6,7,8 --cache lc.jsonl`` then ``ratio --cache
lc.jsonl`` runs L-clustering once per setting. ``--ls 2,3,...`` chooses the l.

It runs the ``l-clustering`` plugin as the step ``clustered`` of
workflows/l-clustering-adult.yaml does (same code, same step seed), so every row can be
reproduced with ``anonflow run`` and ``--set``; the reruns are the workflow run with
``--seed 1`` .. ``--seed 20``. L-incognito is the ``lattice`` plugin as
workflows/l-incognito-adult.yaml runs it (``results_lattice.py incognito``). Everything is
printed as the Markdown tables of the docs: L(D, D*), RL (in %), the number of classes,
the wall seconds, and the summaries the docs quote. Importing the module runs nothing.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT / "workflows" / "data" / "adult" / "adult_full.csv"
QI = ["age", "sex", "race", "marital-status", "education", "native-country", "workclass", "income"]
SEED = 20261125
LS = tuple(range(2, 13))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _plugins():
    try:
        from anonflow_std.clustering.lclustering import LClustering
        from anonflow_std.utility.generalized_loss import GeneralizationLoss
    except ImportError:
        sys.path.insert(0, str(ROOT / "plugins"))
        from anonflow_std.clustering.lclustering import LClustering
        from anonflow_std.utility.generalized_loss import GeneralizationLoss
    return GeneralizationLoss, LClustering


_DATA = {}


def typed(d: int):
    """Adult typed as the workflow types it with QI = the first d attributes: the columns in
    the file's order, as the typing step keeps them (the order of the QIs decides which
    distinct QI tuple the seeded tie order puts first)."""
    from anonflow.testing import typed_table

    if "adult" not in _DATA:
        _DATA["adult"] = pacsv.read_csv(ADULT)
    data = _DATA["adult"]
    qi = QI[:d]
    keep = [c for c in data.column_names if c in qi or c == "occupation"]
    return typed_table({c: data.column(c) for c in keep},
                       quasi={c: "continuous" if c == "age" else "nominal" for c in qi},
                       sensitive={"occupation": "nominal"})


def run(d: int, l: int, seed: int) -> dict[str, float]:
    from anonflow.runner import step_seed
    from anonflow.testing import make_context

    GeneralizationLoss, LClustering = _plugins()
    table = typed(d)
    params = {"l": l, "weights": None, "resolution": None}
    algo = LClustering()
    algo.check(params, table=table)
    t0 = time.perf_counter()
    out = algo.run(table, params, make_context(seed=step_seed(seed, "clustered")))
    seconds = time.perf_counter() - t0
    g = GeneralizationLoss().compute(table, out, {"weights": None, "resolution": None}, make_context())
    loss, full = g["generalization-loss"], g["generalization-loss.full"]
    return {"d": d, "l": l, "seed": seed, "loss": loss, "full": full, "rl": 100.0 * loss / full,
            "classes": int(out.classes().max()) + 1, "seconds": seconds}


def full_loss(d: int) -> float:
    """L(D, D_c): the loss of one cluster holding every record (the denominator of RL for
    L-clustering and L-incognito alike), from the original table alone."""
    from anonflow.testing import make_context

    GeneralizationLoss, _ = _plugins()
    table = typed(d)
    g = GeneralizationLoss().compute(table, table, {"weights": None, "resolution": None}, make_context())
    assert g["generalization-loss"] == 0.0
    return g["generalization-loss.full"]


def lclustering_rows(dims, ls, cache: Path | None, seed: int = SEED, echo: bool = True) -> dict[tuple, dict]:
    """L-clustering at every (|QI|, l), reusing and extending the cache file."""
    rows: dict[tuple, dict] = {}
    if cache is not None and cache.exists():
        for line in cache.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows[(r["d"], r["l"], r["seed"])] = r
    out = {}
    for d in dims:
        for l in ls:
            r = rows.get((d, l, seed))
            if r is None:
                r = run(d, l, seed)
                if cache is not None:
                    with cache.open("a") as fh:
                        fh.write(json.dumps(r) + "\n")
            if echo:
                print(f"| {d} | {l} | {r['loss']:,.0f} | {r['rl']:.4f} | {r['classes']} | {r['seconds']:.1f} |",
                      flush=True)
            out[(d, l)] = r
    return out


def _pivot(values: dict[tuple, str], dims, ls, corner: str = "l") -> str:
    lines = [f"| {corner} | " + " | ".join(f"\\|QI\\| = {d}" for d in dims) + " |",
             "| --- | " + " | ".join("---:" for _ in dims) + " |"]
    for l in ls:
        lines.append(f"| {l} | " + " | ".join(values.get((d, l), "–") for d in dims) + " |")
    return "\n".join(lines)


def sweep(dims, ls, cache: Path | None) -> None:
    print("| \\|QI\\| | l | L(D,D*) | RL (%) | classes | seconds |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows = lclustering_rows(dims, ls, cache)
    print("\nL(D,D*) and RL (%) per l (docs/results-lclustering.md):\n")
    print("| l | " + " | ".join(f"\\|QI\\| = {d}: L(D,D\\*) | RL (%)" for d in dims) + " |")
    print("| --- | " + " | ".join("---: | ---:" for _ in dims) + " |")
    for l in ls:
        print(f"| {l} | " + " | ".join(f"{rows[(d, l)]['loss']:,.0f} | {rows[(d, l)]['rl']:.4f}" for d in dims) + " |")
    print("\nRL (%) per l and |QI| (docs/results.md, section 3):\n")
    print(_pivot({k: f"{r['rl']:.4f}" for k, r in rows.items()}, dims, ls))
    print("\nL(D, D_c): " + ", ".join(f"{rows[(d, ls[0])]['full']:,.0f} (|QI| = {d})" for d in dims))
    print("classes: " + "; ".join(
        f"l = {l}: {min(rows[(d, l)]['classes'] for d in dims):,}-{max(rows[(d, l)]['classes'] for d in dims):,}"
        for l in ls))
    grows = all(rows[(a, l)]["rl"] < rows[(b, l)]["rl"] for l in ls for a, b in zip(dims, dims[1:]))
    print(f"RL grows with |QI| at every l ({', '.join(map(str, dims))}): {'yes' if grows else 'no'}")
    for d in dims:
        rl = [rows[(d, l)]["rl"] for l in ls]
        print(f"|QI| = {d}: RL {rl[0]:.2f} % -> {rl[-1]:.2f} % from l = {ls[0]} to {ls[-1]}, "
              f"monotone in l: {'yes' if all(a < b for a, b in zip(rl, rl[1:])) else 'no'}")


def full(dims) -> None:
    print("| \\|QI\\| | L(D, D_c) |")
    print("| --- | ---: |")
    for d in dims:
        print(f"| {d} | {full_loss(d):,.0f} |", flush=True)


def reruns(seeds: int = 20) -> None:
    d, l = 5, 7
    print(f"| seed | L(D,D\\*) | RL (%) | classes | seconds |   (|QI| = {d}, l = {l})")
    print("| --- | ---: | ---: | ---: | ---: |")
    rs = []
    for seed in range(1, seeds + 1):
        r = run(d, l, seed)
        rs.append(r)
        print(f"| {seed} | {r['loss']:,.0f} | {r['rl']:.4f} | {r['classes']} | {r['seconds']:.1f} |", flush=True)
    rl = [r["rl"] for r in rs]
    if len(rl) < 2:
        return
    mean, sd = statistics.mean(rl), statistics.stdev(rl)
    print(f"\nMean RL {mean:.3f} %, standard deviation {sd:.3f} (coefficient of variation {100 * sd / mean:.1f} %), "
          f"range {min(rl):.3f}-{max(rl):.3f} %.")


def incognito_rows(dims, ls) -> dict[tuple, dict]:
    """L-incognito (the lattice, as workflows/l-incognito-adult.yaml runs it): RL by
    ``generalization-rl``, L(D, D*) by ``generalization-loss`` (a label read as the original
    values it stands for), on the same typed table as L-clustering's."""
    from results_lattice import incognito_table, lattice, metric

    out = {}
    for d in dims:
        table = incognito_table(d)
        for l in ls:
            result, notes, _ = lattice(table, model="l-diversity", model_params={"l": l}, utility="generalization-rl")
            g = metric("generalization-loss", table, result)
            out[(d, l)] = {"rl": 100.0 * metric("generalization-rl", table, result)["generalization-rl"],
                           "loss": g["generalization-loss"], "full": g["generalization-loss.full"],
                           "rl_relative": 100.0 * g["generalization-loss"] / g["generalization-loss.full"]}
    return out


def ratio(dims, ls, cache: Path | None) -> None:
    print("L-clustering runs:\n")
    print("| \\|QI\\| | l | L(D,D*) | RL (%) | classes | seconds |")
    print("| --- | --- | --- | --- | --- | --- |")
    clu = lclustering_rows(dims, ls, cache)
    inc = incognito_rows(dims, ls)
    for key in inc:
        assert abs(inc[key]["full"] - clu[key]["full"]) < 1e-6 * clu[key]["full"], key
        assert f"{inc[key]['rl']:.2f}" == f"{inc[key]['rl_relative']:.2f}", key
    ratios = {key: inc[key]["loss"] / clu[key]["loss"] for key in inc}
    print("\nL-incognito RL (%) (docs/results.md, section 3):\n")
    print(_pivot({k: f"{v['rl']:.2f}" for k, v in inc.items()}, dims, ls, corner="l"))
    print("\nL-incognito's L(D, D*) over L-clustering's (docs/results.md, section 3):\n")
    print(_pivot({k: f"{v:,.0f}" for k, v in ratios.items()}, dims, ls))
    print("\nL-clustering against L-incognito (docs/results-lclustering.md):\n")
    print("| l | " + " | ".join(f"\\|QI\\| = {d}: L-clustering RL (%) | L-incognito RL (%) | ratio of L" for d in dims)
          + " |")
    print("| --- | " + " | ".join("---: | ---: | ---:" for _ in dims) + " |")
    for l in ls:
        print(f"| {l} | " + " | ".join(f"{clu[(d, l)]['rl']:.4f} | {inc[(d, l)]['rl']:.2f} | {ratios[(d, l)]:,.0f}"
                                       for d in dims) + " |")
    below = sum(clu[k]["loss"] < inc[k]["loss"] for k in inc)
    print(f"\nL-clustering's loss is below L-incognito's in {below} of {len(inc)} settings, by a factor of "
          f"{min(ratios.values()):,.0f} to {max(ratios.values()):,.0f}.")
    first = (dims[0], ls[0])
    print(f"At l = {first[1]}, |QI| = {first[0]}: {inc[first]['loss']:,.0f} / {clu[first]['loss']:,.0f} = "
          f"{ratios[first]:,.0f}.")
    for d in dims:
        print(f"|QI| = {d}: ratio {ratios[(d, ls[0])]:,.0f} at l = {ls[0]}, {ratios[(d, ls[-1])]:,.0f} at l = {ls[-1]}; "
              f"L-incognito RL {min(inc[(d, l)]['rl'] for l in ls):.2f}-{max(inc[(d, l)]['rl'] for l in ls):.2f} %")


def _option(args: list[str], name: str) -> str | None:
    if name in args:
        i = args.index(name)
        value = args[i + 1]
        del args[i: i + 2]
        return value
    return None


if __name__ == "__main__":
    args = sys.argv[1:]
    cache = _option(args, "--cache")
    seeds = int(_option(args, "--seeds") or 20)
    ls_arg = _option(args, "--ls")
    ls = tuple(int(x) for x in ls_arg.split(",")) if ls_arg else LS
    what = args[0] if args else "sweep"
    if what not in ("sweep", "full", "reruns", "ratio"):
        raise SystemExit(__doc__)
    default_dims = (2, 5, 8) if what == "sweep" else tuple(range(2, 9))
    dims = tuple(int(x) for x in args[1].split(",")) if len(args) > 1 else default_dims
    cache_path = Path(cache) if cache else None
    if what == "sweep":
        sweep(dims, ls, cache_path)
    elif what == "full":
        full(dims)
    elif what == "reruns":
        reruns(seeds)
    else:
        ratio(dims, ls, cache_path)
