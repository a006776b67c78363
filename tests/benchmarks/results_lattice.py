"""The lattice experiments behind docs/results.md.

Run as a script::

    python tests/benchmarks/results_lattice.py accuracy    # seed 004 section 4: k x utility model
    python tests/benchmarks/results_lattice.py incognito   # seed 001's L-incognito: RL per l and |QI|
    python tests/benchmarks/results_lattice.py mi-variants # MI Loss weights under binnings of numeric QIs

``accuracy`` runs the ``lattice`` plugin as workflows/mi-loss-adult.yaml does (same
hierarchies), for k = 2, 3, 5, 10, each utility model and suppression 0 and 1 %, and scores
the published records with ``classification-accuracy`` (3 folds, seed 0). ``incognito`` runs
it as workflows/l-incognito-adult.yaml does (distinct l-diversity on occupation, utility
generalization-rl) for l = 2..12 and d = 2..8. Both print Markdown rows. The weights of
seed 004's Table 2 next to ours are printed by ``pytest tests/test_utility_metrics.py -s``.
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

INCOGNITO_QI = ["age", "sex", "race", "marital-status", "education", "native-country", "workclass", "income"]
WORKCLASS = {"Non-Government": ["Private", "Self-emp-not-inc", "Self-emp-inc"],
             "Government": ["Federal-gov", "Local-gov", "State-gov"], "Unemployed": ["Without-pay"]}


def lattice(table: Any, **given: Any) -> tuple[Any, list[str], float]:
    from anonflow.params import validate_params
    from anonflow.testing import make_context
    from anonflow_std.lattice import Lattice

    params = validate_params(Lattice.params, given)
    ctx = make_context()
    Lattice().check(params, table=table)
    t0 = time.perf_counter()
    out = Lattice().run(table, params, ctx)
    seconds = time.perf_counter() - t0
    out = out.replace(data=out.data.filter(pc.is_valid(out.data.column("_class"))))
    return out, ctx.notes, seconds


def metric(name: str, original: Any, anonymized: Any, **given: Any) -> dict[str, float]:
    from anonflow.params import validate_params
    from anonflow.plugins import get_registry
    from anonflow.testing import make_context

    obj = get_registry().get("metric", name).obj
    if original is not None:
        keep = pc.is_in(original.data.column("_row"), value_set=anonymized.data.column("_row"))
        original = original.replace(data=original.data.filter(keep))
    return obj.compute(original, anonymized, validate_params(obj.params, given), make_context())


def node_of(notes: list[str]) -> str:
    note = next(n for n in notes if "chosen node" in n)
    return note.split("chosen node ")[1].split("]")[0] + "]"


def accuracy() -> None:
    from bench_lattice import seed004_adult

    table = seed004_adult()
    classifiers = ("logistic", "linear", "tree")

    def accuracies(t: Any) -> list[float]:
        return [metric("classification-accuracy", None, t, classifier=c)["classification-accuracy"]
                for c in classifiers]

    base = accuracies(table)
    print("original data: accuracy " + ", ".join(f"{c} {100 * a:.2f} %" for c, a in zip(classifiers, base)) + "\n")
    print("| suppression | k | utility | " + " | ".join(f"accuracy % ({c})" for c in classifiers)
          + " | loss | entropy-loss | mi-loss | classes | suppressed | node | s |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in classifiers) + " | --- | --- | --- | --- | --- | --- | --- |")
    for suppression in (0.0, 0.01):
        for k in (2, 3, 5, 10):
            for utility in ("loss", "entropy-loss", "mi-loss"):
                out, notes, seconds = lattice(table, model_params={"k": k}, utility=utility, suppression=suppression)
                acc = accuracies(out)
                losses = [metric(u, table, out)[u] for u in ("loss", "entropy-loss", "mi-loss")]
                classes = int(out.data.column("_class").to_numpy().max()) + 1
                print(f"| {100 * suppression:g} % | {k} | {utility} | " + " | ".join(f"{100 * a:.2f}" for a in acc)
                      + " | "
                      + " | ".join(f"{v:.4f}" for v in losses)
                      + f" | {classes} | {table.num_rows - out.num_rows} | `{node_of(notes)}` | {seconds:.1f} |",
                      flush=True)


def incognito() -> None:
    from anonflow.testing import make_context, typed_table
    from anonflow_std.hierarchies import ArxFile, Intervals, Taxonomy
    from anonflow import plugins

    registry = plugins.get_registry()
    if not registry.has("metric", "l-diversity"):
        raise SystemExit("the l-diversity check plugin is not installed")
    raw = pacsv.read_csv(DATA / "adult" / "adult_full.csv")
    ctx = make_context()
    salary = {"file": str(DATA / "arx" / "adult_hierarchy_salary-class.csv"), "delimiter": ";"}
    hier = {"age": Intervals().build("age", raw.column("age").unique(), {"widths": [5, 10, 20, 40], "anchor": 0}, ctx),
            "workclass": Taxonomy().build("workclass", pa.array([]), {"tree": WORKCLASS}, ctx),
            "income": ArxFile().build("income", pa.array([]), salary, ctx)}
    for q in ("sex", "race", "marital-status", "education", "native-country"):
        hier[q] = ArxFile().build(q, pa.array([]), {"file": str(DATA / "arx" / f"adult_hierarchy_{q}.csv"),
                                                    "delimiter": ";"}, ctx)
    print("| d | l | RL % | classes | nodes checked / lattice | node | s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for d in range(2, 9):
        qi = INCOGNITO_QI[:d]
        table = typed_table({c: raw.column(c) for c in qi + ["occupation"]},
                            quasi={c: "continuous" if c == "age" else "nominal" for c in qi},
                            sensitive={"occupation": "nominal"})
        table = table.replace(hierarchies={q: hier[q] for q in qi})
        for l in range(2, 13):
            try:
                out, notes, seconds = lattice(table, model="l-diversity", model_params={"l": l},
                                              utility="generalization-rl")
            except Exception as exc:  # noqa: BLE001 - report and go on
                print(f"| {d} | {l} | - | - | - | {str(exc)[:80]} | - |", flush=True)
                continue
            rl = metric("generalization-rl", table, out)["generalization-rl"]
            note = next(n for n in notes if "checked" in n)
            size, checked = note.split(" nodes")[0].split()[-1], note.split("checked ")[1].split(",")[0]
            classes = int(out.data.column("_class").to_numpy().max()) + 1
            print(f"| {d} | {l} | {100 * rl:.4f} | {classes} | {checked} / {size} | `{node_of(notes)}` | "
                  f"{seconds:.2f} |", flush=True)


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
    what = sys.argv[1] if len(sys.argv) > 1 else "accuracy"
    {"accuracy": accuracy, "incognito": incognito, "mi-variants": mi_variants}[what]()
