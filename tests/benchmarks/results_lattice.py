"""The lattice experiments behind docs/results.md.

Run as a script::

    python tests/benchmarks/results_lattice.py weights      # section 1: seed 004's Table 2 next to ours (seconds)
    python tests/benchmarks/results_lattice.py mi-variants  # section 1: MI Loss weights under binnings (seconds)
    python tests/benchmarks/results_lattice.py accuracy     # section 2: k x utility model (about 10 min)
    python tests/benchmarks/results_lattice.py accuracy --k 2 --suppression 0   # one quick setting
    python tests/benchmarks/results_lattice.py incognito    # section 3: L-incognito, RL per l and |QI| (under 1 min)

``accuracy`` runs the ``lattice`` plugin as workflows/mi-loss-adult.yaml does (same
hierarchies), for k = 2, 3, 5, 10 (``--k``), each utility model and suppression 0 and 1 %
(``--suppression``), and scores the published records with ``classification-accuracy``
(3 folds, seed 0) for the logistic, linear and tree classifiers. ``incognito`` runs it as
workflows/l-incognito-adult.yaml does (distinct l-diversity on occupation, utility
generalization-rl) for l = 2..12 (``--l``) and d = 2..8 (``--d``). Each prints its rows, then
the tables of docs/results.md as they appear there and the figures its text quotes.
The ratio of L-incognito to L-clustering is printed by ``results_lclustering.py ratio``.
Importing the module runs nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "workflows" / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from script_args import listed_option  # noqa: E402

QI11 = ["age", "education-num", "capital-gain", "hours-per-week", "race", "relationship", "workclass",
        "native-country", "marital-status", "occupation", "sex"]
PAPER_TABLE_2 = {  # seed 004 Table 2: Entropy Loss, MI Loss
    "age": (0.2294, 0.0355), "education-num": (0.1183, 0.0683), "capital-gain": (0.0350, 0.2976),
    "hours-per-week": (0.1405, 0.0375), "race": (0.0322, 0.0225), "relationship": (0.0869, 0.1643),
    "workclass": (0.0665, 0.0281), "native-country": (0.0381, 0.0197), "marital-status": (0.0740, 0.1828),
    "occupation": (0.1419, 0.0565), "sex": (0.0370, 0.0870),
}
INCOGNITO_QI = ["age", "sex", "race", "marital-status", "education", "native-country", "workclass", "income"]
WORKCLASS = {"Non-Government": ["Private", "Self-emp-not-inc", "Self-emp-inc"],
             "Government": ["Federal-gov", "Local-gov", "State-gov"], "Unemployed": ["Without-pay"]}


def lattice(table: Any, **given: Any) -> tuple[Any, list[str], float]:
    from anonflow.params import validate_params
    from anonflow.registry import get_registry
    from anonflow.testing import make_context
    from anonflow_std.generalization.lattice import Lattice

    params = validate_params(Lattice.params, given)
    ctx = make_context()
    registered = get_registry().get("algorithm", "lattice").obj
    registered.check(params, table=table)
    t0 = time.perf_counter()
    out = registered.run(table, params, ctx)
    seconds = time.perf_counter() - t0
    out = out.replace(data=out.data.filter(pc.is_valid(out.data.column("_class"))))
    return out, ctx.notes, seconds


def metric(name: str, original: Any, anonymized: Any, **given: Any) -> dict[str, float]:
    from anonflow.params import validate_params
    from anonflow.registry import get_registry
    from anonflow.testing import make_context

    obj = get_registry().get("metric", name).obj
    if original is not None:
        keep = pc.is_in(original.data.column("_row"), value_set=anonymized.data.column("_row"))
        original = original.replace(data=original.data.filter(keep))
    return obj.compute(original, anonymized, validate_params(obj.params, given), make_context())


def node_of(notes: list[str]) -> str:
    note = next(n for n in notes if "chosen node" in n)
    return note.split("chosen node ")[1].split("]")[0] + "]"


UTILITIES = ("loss", "entropy-loss", "mi-loss")
NAMES = {"loss": "Loss", "entropy-loss": "Entropy Loss", "mi-loss": "MI Loss"}
CLASSIFIERS = ("logistic", "linear", "tree")


def _levels(node: str) -> str:
    """`[age=5, education-num=4, ...]` -> `5 4 ...`"""
    return " ".join(part.split("=")[1] for part in node.strip("[]").split(", "))


def accuracy(ks=(2, 3, 5, 10), suppressions=(0.0, 0.01)) -> None:
    from bench_lattice import seed004_adult

    table = seed004_adult()

    def accuracies(t: Any) -> dict[str, float]:
        return {c: 100 * metric("classification-accuracy", None, t, classifier=c)["classification-accuracy"]
                for c in CLASSIFIERS}

    base = accuracies(table)
    majority = 100 * metric("classification-accuracy", None, table)["classification-accuracy.majority"]
    print("original data: accuracy " + ", ".join(f"{c} {a:.2f} %" for c, a in base.items())
          + f" (majority class {majority:.2f} %)\n")
    print("| suppression | k | utility | " + " | ".join(f"accuracy % ({c})" for c in CLASSIFIERS)
          + " | loss | entropy-loss | mi-loss | classes | suppressed | node | s |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in CLASSIFIERS) + " | --- | --- | --- | --- | --- | --- | --- |")
    res: dict[tuple, dict] = {}
    for suppression in suppressions:
        for k in ks:
            for utility in UTILITIES:
                out, notes, seconds = lattice(table, model_params={"k": k}, utility=utility, suppression=suppression)
                acc = accuracies(out)
                # the losses over the published records (the metrics' .published values)
                losses = {u: metric(u, table, out)[u] for u in UTILITIES}
                classes = int(out.data.column("_class").to_numpy().max()) + 1
                r = res[(suppression, k, utility)] = {"acc": acc, "losses": losses, "classes": classes,
                                                      "suppressed": table.num_rows - out.num_rows,
                                                      "node": node_of(notes), "seconds": seconds}
                print(f"| {100 * suppression:g} % | {k} | {utility} | " + " | ".join(f"{a:.2f}" for a in acc.values())
                      + " | " + " | ".join(f"{v:.4f}" for v in losses.values())
                      + f" | {classes} | {r['suppressed']} | `{r['node']}` | {seconds:.1f} |", flush=True)
    settings = [(s, k) for s in suppressions for k in ks]

    def pivot(classifier: str) -> tuple[list[str], list[float]]:
        rows, margins = [], []
        for s, k in settings:
            acc = {u: res[(s, k, u)]["acc"][classifier] for u in UTILITIES}
            best = max(acc.values())
            margin = acc["mi-loss"] - max(acc["loss"], acc["entropy-loss"])
            margins.append(margin)
            cells = [f"**{acc[u]:.2f}**" if acc[u] == best else f"{acc[u]:.2f}" for u in UTILITIES]
            rows.append(f"{100 * s:g} % | {k} | " + " | ".join(cells) + f" | {margin:+.2f}".replace("-", "−"))
        return rows, margins

    print(f"\nAccuracy (%) of the node chosen by each utility model, logistic regression "
          f"(docs/results.md, section 2; original data {base['logistic']:.2f} %, majority {majority:.2f} %):\n")
    print("| suppression | k | Loss | Entropy Loss | MI Loss | MI Loss − best other |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows, margins = pivot("logistic")
    for row in rows:
        print(f"| {row} |")
    print("\nThe chosen nodes and their three losses over the published records:\n")
    print("| supp. | k | utility | node | Loss | Entropy Loss | MI Loss | classes | suppressed |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s, k in settings:
        for u in UTILITIES:
            r = res[(s, k, u)]
            print(f"| {100 * s:g} % | {k} | {u} | {_levels(r['node'])} | "
                  + " | ".join(f"{r['losses'][v]:.4f}" for v in UTILITIES) + f" | {r['classes']} | {r['suppressed']} |")
    print(f"\nOther classifiers (original data: linear {base['linear']:.2f} %, tree {base['tree']:.2f} %):\n")
    print("| suppression | k | linear: Loss | Entropy Loss | MI Loss | MI − best other | tree: Loss | Entropy Loss | "
          "MI Loss | MI − best other |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    other = {c: pivot(c) for c in ("linear", "tree")}
    for i in range(len(settings)):
        lin = other["linear"][0][i]
        tree = other["tree"][0][i].split(" | ", 2)[2]
        print(f"| {lin} | {tree} |")

    def verdict(classifier: str, margins: list[float]) -> str:
        wins = [m for m in margins if m > 0]
        losses = [-m for m in margins if m <= 0]
        text = f"{classifier}: MI Loss wins {len(wins)} of {len(margins)} settings"
        if wins:
            text += " (by " + ", ".join(f"{m:.2f}" for m in wins) + " points)"
        if losses:
            text += f", loses the other {len(losses)} by {min(losses):.2f} to {max(losses):.2f} points"
        return text

    print()
    print(verdict("logistic", margins))
    for c in ("linear", "tree"):
        print(verdict(c, other[c][1]))
    for c in CLASSIFIERS:
        best_other = {}
        for s, k in settings:
            acc = {u: res[(s, k, u)]["acc"][c] for u in UTILITIES}
            winner = max(UTILITIES, key=lambda u: acc[u])
            best_other[winner] = best_other.get(winner, 0) + 1
        print(f"{c}: most accurate node per setting: " + ", ".join(f"{NAMES[u]} {n}" for u, n in best_other.items()))
    own = all(res[(s, k, u)]["losses"][u] <= min(res[(s, k, v)]["losses"][u] for v in UTILITIES) + 1e-12
              for s, k in settings for u in UTILITIES)
    print(f"each model's node has the least value of that model's loss (over the published records) in every "
          f"setting: {'yes' if own else 'no'}")
    for s in suppressions:
        below = [base["logistic"] - res[(s, k, u)]["acc"]["logistic"] for k in ks for u in UTILITIES]
        print(f"suppression {100 * s:g} %: accuracies {min(below):.1f} to {max(below):.1f} points below the original "
              f"data's; at most {max(res[(s, k, u)]['classes'] for k in ks for u in UTILITIES)} classes")
    if len(suppressions) > 1:
        gain = [res[(suppressions[1], k, u)]["acc"]["logistic"] - res[(suppressions[0], k, u)]["acc"]["logistic"]
                for k in ks for u in UTILITIES]
        print(f"{100 * suppressions[1]:g} % suppression gains {min(gain):.1f} to {max(gain):.1f} points")
    timed = [res[(s, k, u)]["seconds"] for s, k in settings if s for u in UTILITIES]
    if timed:
        print(f"runs with suppression: {min(timed):.0f} to {max(timed):.0f} s each")


def weights() -> None:
    """Seed 004's Table 2 next to the Entropy Loss and MI Loss weights of Adult's 11 QIs,
    plug-in estimates on the original values (every distinct value its own category)."""
    import numpy as np

    from anonflow.testing import typed_table
    from anonflow_std.common.columns import entropy
    from anonflow_std.common.hierarchy_levels import category_codes as _codes
    from anonflow_std.common.hierarchy_levels import mutual_information

    raw = pacsv.read_csv(DATA / "adult" / "adult_full.csv")
    t = typed_table({c: raw.column(c) for c in [*QI11, "income"]},
                    quasi={q: "nominal" for q in QI11}, label={"income": "nominal"})
    h = np.array([entropy(np.bincount(_codes(t.data.column(q)))) for q in QI11])
    y = _codes(t.data.column("income"))
    mi = np.array([mutual_information(_codes(t.data.column(q)), y) for q in QI11])
    ew, mw = dict(zip(QI11, h / h.sum())), dict(zip(QI11, mi / mi.sum()))
    print(f"{raw.num_rows:,} records\n")
    print("| attribute | Entropy Loss, ours | paper | difference | MI Loss, ours | paper | difference |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for q in QI11:
        de, dm = ew[q] - PAPER_TABLE_2[q][0], mw[q] - PAPER_TABLE_2[q][1]
        print(f"| {q} | {ew[q]:.4f} | {PAPER_TABLE_2[q][0]:.4f} | {de:+.4f} | {mw[q]:.4f} | {PAPER_TABLE_2[q][1]:.4f} | "
              f"{dm:+.4f} |".replace("-0.", "−0."))
    worst = max(QI11, key=lambda q: abs(ew[q] - PAPER_TABLE_2[q][0]))
    print(f"\nlargest Entropy Loss difference: {worst} {ew[worst] - PAPER_TABLE_2[worst][0]:+.4f}; "
          f"all within {max(abs(ew[q] - PAPER_TABLE_2[q][0]) for q in QI11):.4f}")


_HIER: dict = {}


def incognito_table(d: int):
    """Adult typed and with hierarchies as workflows/l-incognito-adult.yaml builds them, QI =
    the first d attributes of seed 001's order."""
    from anonflow.testing import make_context, typed_table
    from anonflow_std.generalization.hierarchies import ArxFile, Intervals, Taxonomy

    if not _HIER:
        raw = pacsv.read_csv(DATA / "adult" / "adult_full.csv")
        ctx = make_context()
        salary = {"file": str(DATA / "arx" / "adult_hierarchy_salary-class.csv"), "delimiter": ";"}
        _HIER["raw"] = raw
        _HIER["age"] = Intervals().build("age", raw.column("age").unique(), {"widths": [5, 10, 20, 40], "anchor": 0},
                                         ctx)
        _HIER["workclass"] = Taxonomy().build("workclass", pa.array([]), {"tree": WORKCLASS}, ctx)
        _HIER["income"] = ArxFile().build("income", pa.array([]), salary, ctx)
        for q in ("sex", "race", "marital-status", "education", "native-country"):
            _HIER[q] = ArxFile().build(q, pa.array([]), {"file": str(DATA / "arx" / f"adult_hierarchy_{q}.csv"),
                                                         "delimiter": ";"}, ctx)
    raw = _HIER["raw"]
    qi = INCOGNITO_QI[:d]
    table = typed_table({c: raw.column(c) for c in qi + ["occupation"]},
                        quasi={c: "continuous" if c == "age" else "nominal" for c in qi},
                        sensitive={"occupation": "nominal"})
    return table.replace(hierarchies={q: _HIER[q] for q in qi})


def incognito(dims=tuple(range(2, 9)), ls=tuple(range(2, 13))) -> None:
    from anonflow import registry as plugins

    registry = plugins.get_registry()
    if not registry.has("metric", "l-diversity"):
        raise SystemExit("the l-diversity check plugin is not installed")
    print("| d | l | RL % | classes | nodes checked / lattice | node | s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rl_of, effort = {}, {}
    for d in dims:
        table = incognito_table(d)
        for l in ls:
            try:
                out, notes, seconds = lattice(table, model="l-diversity", model_params={"l": l},
                                              utility="generalization-rl")
            except Exception as exc:  # noqa: BLE001 - report and go on
                print(f"| {d} | {l} | - | - | - | {str(exc)[:80]} | - |", flush=True)
                continue
            rl = metric("generalization-rl", table, out)["generalization-rl"]
            note = next(n for n in notes if "; checked " in n)
            size, checked = note.split(" nodes")[0].split()[-1], note.split("checked ")[1].split(",")[0]
            classes = int(out.data.column("_class").to_numpy().max()) + 1
            rl_of[(d, l)] = 100 * rl
            effort[(d, l)] = (checked, size)
            print(f"| {d} | {l} | {100 * rl:.4f} | {classes} | {checked} / {size} | `{node_of(notes)}` | "
                  f"{seconds:.2f} |", flush=True)
    print("\nRL (%) per |QI| = d and l (docs/results.md, section 3):\n")
    print("| d \\ l | " + " | ".join(map(str, ls)) + " |")
    print("| --- | " + " | ".join("---" for _ in ls) + " |")
    for d in dims:
        print(f"| {d} | " + " | ".join(f"{rl_of[(d, l)]:.2f}" if (d, l) in rl_of else "–" for l in ls) + " |")
    l0 = ls[0]
    print(f"\nSearch effort (nodes checked / lattice size) at l = {l0}: "
          + ", ".join(f"{int(effort[(d, l0)][0]):,}/{int(effort[(d, l0)][1]):,} (d = {d})" for d in dims
                      if (d, l0) in effort))


def mi_variants() -> None:
    """Seed 004's MI Loss weights under discretizations of the numeric QIs (plug-in MI on
    45,222 records): does binning explain the paper's weights?"""
    import numpy as np

    t = pacsv.read_csv(DATA / "adult" / "adult_full.csv")
    col = {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}
    Y = np.array([str(v).rstrip(".") for v in col["income"]])
    def H(codes):
        p = np.bincount(codes)/len(codes); p=p[p>0]; return -(p*np.log2(p)).sum()
    def MI(x, y):
        xc = np.unique(x, return_inverse=True)[1].ravel(); yc = np.unique(y, return_inverse=True)[1].ravel()
        return H(xc)+H(yc)-H(xc*(yc.max()+1)+yc)
    qi = ["age","education-num","capital-gain","hours-per-week","race","relationship","workclass","native-country","marital-status","occupation","sex"]
    paper = dict(zip(qi,[0.0355,0.0683,0.2976,0.0375,0.0225,0.1643,0.0281,0.0197,0.1828,0.0565,0.0870]))
    def shares(cols):
        m = {q: MI(cols[q], Y) for q in qi}
        s = sum(m.values()); return {q: m[q]/s for q in qi}
    def variant(f):
        c = dict(col); c.update(f(c)); return c
    num = ["age","education-num","capital-gain","hours-per-week"]
    def deciles(c, q, k=10):
        edges = np.unique(np.quantile(c[q], np.linspace(0,1,k+1)[1:-1]))
        return np.searchsorted(edges, c[q], side="right")
    V = {
     "plug-in": col,
     "width 5/2/1000/5": variant(lambda c: {"age": c["age"]//5, "education-num": c["education-num"]//2, "capital-gain": c["capital-gain"]//1000, "hours-per-week": c["hours-per-week"]//5}),
     "width 10/4/10000/10": variant(lambda c: {"age": c["age"]//10, "education-num": c["education-num"]//4, "capital-gain": c["capital-gain"]//10000, "hours-per-week": c["hours-per-week"]//10}),
     "deciles": variant(lambda c: {q: deciles(c, q) for q in num}),
     "2 bins (median split)": variant(lambda c: {q: deciles(c, q, 2) for q in num}),
    }
    res = {k: shares(v) for k, v in V.items()}
    print("| attribute | paper | " + " | ".join(V) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in V) + " |")
    for q in qi:
        print(f"| {q} | {paper[q]:.4f} | " + " | ".join(f"{res[k][q]:.4f}" for k in V) + " |")
    print("| sum of \\|difference\\| to the paper | | " + " | ".join(f"{sum(abs(res[k][q]-paper[q]) for q in qi):.4f}" for k in V) + " |")


if __name__ == "__main__":
    args = sys.argv[1:]
    ks = listed_option(args, "--k", (2, 3, 5, 10), int)
    suppressions = listed_option(args, "--suppression", (0.0, 0.01), float)
    dims = listed_option(args, "--d", tuple(range(2, 9)), int)
    ls = listed_option(args, "--l", tuple(range(2, 13)), int)
    what = args[0] if args else "accuracy"
    if what not in ("accuracy", "incognito", "mi-variants", "weights"):
        raise SystemExit(__doc__)
    if what == "accuracy":
        accuracy(ks, suppressions)
    elif what == "incognito":
        incognito(dims, ls)
    elif what == "mi-variants":
        mi_variants()
    else:
        weights()
