"""Cross-check of ``linkability-risk`` and ``inference-risk`` against anonymeter itself.

anonymeter cannot share our environment (it pins numpy < 1.27, pyarrow < 22 and numba), so it
runs in a virtual environment of its own, outside the repository::

    python3 -m venv /tmp/anonvenv && /tmp/anonvenv/bin/pip install anonymeter pandas pyarrow
    python tests/benchmarks/crosscheck_anonymeter.py [--n 5000] [--venv /tmp/anonvenv]

The data: UCI Adult (workflows/data/adult/adult_full.csv) in an order drawn with seed 4; the
first ``n`` records are the training set, the next ``n`` the control set. Releases of the
training set, made here with numpy (seed 3):

* ``noised``: age, fnlwgt, hours-per-week and capital-gain plus Gaussian noise of 0.2 of each
  column's sd; workclass, education, occupation and marital-status replaced, with probability
  0.2 each, by the value of a record drawn at random (a PRAM by the marginal);
* ``as-is``: the training set itself (exact copies: distances tie at 0 wherever records
  repeat on an attack's columns, so the two tie-breaking rules can part there).

The tables go to Parquet files in a temporary folder. Our figures: the plugins' ``compute`` in
this interpreter (anonflow). anonymeter's: a script run by the other venv's interpreter on the
same files, every record attacked (``n_attacks = n``), so both sides attack the same records
and only the random baseline differs between runs. Univariate singling out on all columns:
``n_attacks`` = the number of queries that single out in the release (ours counts them first),
so both sides use every one of them; train and control hold distinct records only, so no size
correction (anonymeter fits it on unseeded subsamples) enters. The neighbour searches are also
compared directly (indices and distances of the 5 nearest, every record), and for the numeric
secret our guesses are counted with both tolerance rules. Printed side by side: successes on the
targets and on the control set, the rates and the risk with its interval.

Multivariate singling out (``mode: multivariate``, ``n_cols`` 3), on ``--multi-n`` records
(default 3000) of the same split, ``--multi-attacks`` queries (default 300): (a) anonymeter's
own queries (its generator, seed 0, and its random guesser's), exported from the other venv as
polars' JSON serialization, parsed here into our conditions (a category's text mapped to our
codes) and counted by our code on the distinct training and control records: the counts must
equal anonymeter's query for query; (b) the risk of the noised release over seeds 0..9 in both
(queries are random: only the distributions compare), mean and standard error side by side.
``--multivariate-only`` runs this part alone. Nothing here asserts; the figures go to
docs/perturbation-attacks.md. Importing this module has no side effects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

AUX_A = ["age", "fnlwgt", "workclass", "education"]
AUX_B = ["hours-per-week", "capital-gain", "occupation", "marital-status", "sex"]
CASES = {  # name -> (metric, params)
    "linkability k=1": ("linkability-risk", {"aux_a": AUX_A, "aux_b": AUX_B, "n_neighbors": 1}),
    "linkability k=5": ("linkability-risk", {"aux_a": AUX_A, "aux_b": AUX_B, "n_neighbors": 5}),
    "inference income": ("inference-risk", {"aux": AUX_A + ["hours-per-week", "sex"], "secret": "income"}),
    "inference hours": ("inference-risk", {"aux": AUX_A + ["occupation"], "secret": "hours-per-week"}),
}

ANONYMETER = r'''
import json, sys, time, warnings
import numpy as np
import pandas as pd
from anonymeter.evaluators import InferenceEvaluator, LinkabilityEvaluator
warnings.simplefilter("ignore")
from anonymeter.evaluators import SinglingOutEvaluator
from anonymeter.evaluators.singling_out_evaluator import univariate_singling_out_queries
folder, cases, singling = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
ori = pd.read_parquet(f"{folder}/train.parquet")
ctl = pd.read_parquet(f"{folder}/control.parquet")
out = {}
for release in ("noised", "as-is"):
    syn = pd.read_parquet(f"{folder}/{release}.parquet")
    for name, (metric, p) in cases.items():
        t = time.perf_counter()
        if metric == "linkability-risk":
            ev = LinkabilityEvaluator(ori=ori, syn=syn, aux_cols=(p["aux_a"], p["aux_b"]), n_attacks=len(ori),
                                      n_neighbors=p["n_neighbors"], control=ctl).evaluate(n_jobs=2)
        else:
            # anonymeter 1.1 compares secrets exactly unless told regression=True; ours decides by type
            regression = pd.api.types.is_numeric_dtype(ori[p["secret"]])
            ev = InferenceEvaluator(ori=ori, syn=syn, aux_cols=p["aux"], secret=p["secret"], n_attacks=len(ori),
                                    regression=regression, control=ctl).evaluate(n_jobs=2)
        res, risk = ev.results(), ev.risk()
        out[f"{release}|{name}"] = {"success": int(res.n_success), "control": int(res.n_control),
                                    "baseline": int(res.n_baseline), "attack_rate": res.attack_rate.value,
                                    "control_rate": res.control_rate.value, "risk": risk.value,
                                    "ci": list(risk.ci), "seconds": time.perf_counter() - t}
for release, n_queries in singling.items():
    syn = pd.read_parquet(f"{folder}/{release}.parquet")
    t = time.perf_counter()
    ev = SinglingOutEvaluator(ori=ori, syn=syn, n_attacks=n_queries, control=ctl, seed=0).evaluate(mode="univariate")
    res, risk = ev.results(), ev.risk()
    out[f"{release}|singling out"] = {"success": int(res.n_success), "control": int(res.n_control),
                                      "baseline": int(res.n_baseline), "attack_rate": res.attack_rate.value,
                                      "control_rate": res.control_rate.value, "risk": risk.value,
                                      "ci": list(risk.ci), "seconds": time.perf_counter() - t,
                                      "queries": len(univariate_singling_out_queries(
                                          ev._syn, n_queries, np.random.default_rng(0)))}
# the neighbour searches themselves, every record in order (no sampling): indices and distances
from anonymeter.neighbors.mixed_types_kneighbors import MixedTypeKNeighbors
for release in ("noised", "as-is"):
    syn = pd.read_parquet(f"{folder}/{release}.parquet")
    for half, cols in (("a", cases["linkability k=5"][1]["aux_a"]), ("b", cases["linkability k=5"][1]["aux_b"])):
        for label, q in (("targets", ori), ("control", ctl)):
            nn = MixedTypeKNeighbors(n_neighbors=5, n_jobs=2).fit(syn[cols])
            d, i = nn.kneighbors(q[cols], return_distance=True)
            np.save(f"{folder}/nn-{release}-{half}-{label}-idx.npy", i)
            np.save(f"{folder}/nn-{release}-{half}-{label}-dist.npy", d)
print(json.dumps(out))
'''

MULTI = r'''
import json, sys, time, warnings
import numpy as np
import pandas as pd
import polars as pl
warnings.simplefilter("ignore")
import logging
logging.disable(logging.WARNING)
from anonymeter.evaluators import SinglingOutEvaluator
from anonymeter.evaluators.singling_out_evaluator import (_evaluate_queries, _random_queries,
                                                           multivariate_singling_out_queries)
folder, n_attacks, n_seeds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ori = pd.read_parquet(f"{folder}/mtrain.parquet")
ctl = pd.read_parquet(f"{folder}/mcontrol.parquet")
out = {"queries": {}, "seeds": []}
for release in ("noised", "as-is"):
    syn = pl.DataFrame(pd.read_parquet(f"{folder}/m{release}.parquet")).unique(maintain_order=True)
    o, c = pl.DataFrame(ori).unique(maintain_order=True), pl.DataFrame(ctl).unique(maintain_order=True)
    rng = np.random.default_rng(0)
    for kind, qs in (("attack", multivariate_singling_out_queries(syn, n_attacks, 3, 10_000_000, rng)),
                     ("guess", _random_queries(syn, n_attacks, 3, rng))):
        out["queries"][f"{release}|{kind}"] = {
            "json": [q.meta.serialize(format="json") for q in qs],
            "train": list(_evaluate_queries(o, qs)), "control": list(_evaluate_queries(c, qs)),
            "released": list(_evaluate_queries(syn, qs))}
syn = pd.read_parquet(f"{folder}/mnoised.parquet")
for seed in range(n_seeds):
    t = time.perf_counter()
    ev = SinglingOutEvaluator(ori=ori, syn=syn, n_attacks=n_attacks, n_cols=3, control=ctl, seed=seed)
    ev.evaluate(mode="multivariate")
    res, risk = ev.results(), ev.risk()
    out["seeds"].append({"success": int(res.n_success), "control": float(res.n_control),
                         "baseline": int(res.n_baseline), "risk": risk.value, "seconds": time.perf_counter() - t})
print(json.dumps(out))
'''


def build(folder: Path, n: int) -> None:
    import numpy as np
    import pandas as pd

    # distinct records only: train and control then hold n distinct records each, and the singling-out
    # control count needs no size correction (anonymeter's is fitted to unseeded random subsamples)
    frame = pd.read_csv(ROOT / "workflows" / "data" / "adult" / "adult_full.csv").drop_duplicates()
    order = np.random.default_rng(4).permutation(len(frame))
    train = frame.iloc[order[:n]].reset_index(drop=True)
    control = frame.iloc[order[n:2 * n]].reset_index(drop=True)
    rng = np.random.default_rng(3)
    noised = train.copy()
    for c in ["age", "fnlwgt", "hours-per-week", "capital-gain"]:
        noised[c] = noised[c] + rng.normal(0.0, 0.2 * noised[c].std(), n)
    for c in ["workclass", "education", "occupation", "marital-status"]:
        change = rng.random(n) < 0.2
        noised.loc[change, c] = noised[c].to_numpy()[rng.integers(0, n, change.sum())]
    for name, t in (("train", train), ("control", control), ("noised", noised), ("as-is", train)):
        t.to_parquet(folder / f"{name}.parquet", index=False)


def ours(folder: Path) -> dict:
    import pyarrow.parquet as pq

    from anonflow.params import validate_params
    from anonflow.testing import make_context, typed_table
    from anonflow_std.risk.attacks import InferenceRisk, LinkabilityRisk
    from anonflow_std.risk.attacks_singling import SinglingOutRisk

    def load(name):
        t = pq.read_table(folder / f"{name}.parquet")
        return typed_table({c: t.column(c).combine_chunks() for c in t.column_names})

    metrics = {"linkability-risk": LinkabilityRisk(), "inference-risk": InferenceRisk()}
    train, control = load("train"), load("control")
    out, singling = {}, {}
    for release in ("noised", "as-is"):
        rel = load(release)
        for name, (metric, p) in CASES.items():
            m = metrics[metric]
            ctx = make_context(seed=1)
            ctx.tables = {"control": control}.__getitem__
            t = time.perf_counter()
            r = m.compute(train, rel, validate_params(m.params, {**p, "control": "control"}), ctx)
            out[f"{release}|{name}"] = {
                "success": int(r[f"{metric}.attack_successes"]), "control": int(r[f"{metric}.control_successes"]),
                "baseline": int(r[f"{metric}.baseline_successes"]), "attack_rate": r[f"{metric}.attack_rate"],
                "control_rate": r[f"{metric}.control_rate"], "risk": r[metric],
                "ci": [r[f"{metric}.ci_low"], r[f"{metric}.ci_high"]], "seconds": time.perf_counter() - t}
        # singling out: every query that singles out in the release (n_attacks = their number), so that
        # anonymeter, given the same n_attacks, uses all of them too and the figures are deterministic
        m = SinglingOutRisk()
        ctx = make_context(seed=1)
        ctx.tables = {"control": control}.__getitem__
        probe = m.compute(train, rel, validate_params(m.params, {"control": "control", "n_attacks": 10**6}), ctx)
        n_queries = int(probe["singling-out-risk.queries"])
        singling[release] = n_queries
        ctx = make_context(seed=1)
        ctx.tables = {"control": control}.__getitem__
        t = time.perf_counter()
        r = m.compute(train, rel, validate_params(m.params, {"control": "control", "n_attacks": n_queries}), ctx)
        metric = "singling-out-risk"
        out[f"{release}|singling out"] = {
            "success": int(r[f"{metric}.attack_successes"]), "control": int(r[f"{metric}.control_successes"]),
            "baseline": int(r[f"{metric}.baseline_successes"]), "attack_rate": r[f"{metric}.attack_rate"],
            "control_rate": r[f"{metric}.control_rate"], "risk": r[metric],
            "ci": [r[f"{metric}.ci_low"], r[f"{metric}.ci_high"]], "seconds": time.perf_counter() - t,
            "queries": n_queries}
    return out, singling


def anonymeter_formula(folder: Path) -> list[str]:
    """For the numeric secret: our guesses counted with our rule and with anonymeter's
    ``|g - s| / (g + 1e-12) <= 0.05`` (which counts every negative guess right)."""
    import numpy as np
    import pyarrow.parquet as pq

    from anonflow.testing import typed_table
    from anonflow_std.risk.attacks import encode, nearest, scale

    def load(name):
        t = pq.read_table(folder / f"{name}.parquet")
        return typed_table({c: t.column(c).combine_chunks() for c in t.column_names})

    _, p = CASES["inference hours"]
    lines = []
    for release in ("noised", "as-is"):
        rel = load(release)
        for label in ("train", "control"):
            q = load(label)
            (R, Q), n_num = encode((rel, q), p["aux"], "crosscheck", ("released", label))
            Rs, Qs = scale(R, Q, n_num)
            g = np.asarray(rel.column(p["secret"]).to_numpy(), dtype=float)[nearest(Rs, Qs, n_num, 1)[0][:, 0]]
            s = np.asarray(q.column(p["secret"]).to_numpy(), dtype=float)
            ours_ = np.abs(g - s) / (np.abs(g) + 1e-12) <= 0.05
            theirs = np.abs(g - s) / (g + 1e-12) <= 0.05
            lines.append(f"inference hours, {release} release, {label}: right by our rule {ours_.sum()}, by "
                         f"anonymeter's {theirs.sum()} (negative guesses: {(g < 0).sum()})")
    return lines


def compare_neighbours(folder: Path) -> list[str]:
    """Per release, half and attacked set: in how many rows the 5 nearest (as a list, in order)
    are the same; where they are not, whether the distances are still equal bit for bit (the
    searches then differ only in which of equally near records they list)."""
    import numpy as np
    import pyarrow.parquet as pq

    from anonflow.testing import typed_table
    from anonflow_std.risk.attacks import encode, nearest, scale

    def load(name):
        t = pq.read_table(folder / f"{name}.parquet")
        return typed_table({c: t.column(c).combine_chunks() for c in t.column_names})

    train, control = load("train"), load("control")
    lines = []
    for release in ("noised", "as-is"):
        rel = load(release)
        for half, cols in (("a", AUX_A), ("b", AUX_B)):
            for label, q in (("targets", train), ("control", control)):
                (R, Q), n_num = encode((rel, q), cols, "crosscheck", ("released", label))
                Rs, Qs = scale(R, Q, n_num)
                idx, dist = nearest(Rs, Qs, n_num, 5)
                ref_i = np.load(folder / f"nn-{release}-{half}-{label}-idx.npy")
                ref_d = np.load(folder / f"nn-{release}-{half}-{label}-dist.npy")
                same = (idx == ref_i).all(axis=1)
                equal_d = (dist == ref_d).all(axis=1)
                sets = np.array([set(a) == set(b) for a, b in zip(idx.tolist(), ref_i.tolist())])
                lines.append(f"{release:6s} aux_{half} {label:8s}: same 5 in the same order {same.sum()} of "
                             f"{len(same)}, same set {sets.sum()}; distances equal bit for bit in "
                             f"{equal_d.sum()} rows (in {(~same & equal_d).sum()} of the {(~same).sum()} rows "
                             "that differ)")
    return lines


def parse_query(text: str, position: dict, codes: dict) -> list[tuple[int, int, float]]:
    """polars' JSON of a conjunction into our conditions ``(column, operator, value)``."""
    from anonflow_std.risk.singling_multi import EQ, GE, GT, LE, LT, NE, NOT_NULL, NULL

    ops = {"Eq": EQ, "NotEq": NE, "Gt": GT, "Lt": LT, "GtEq": GE, "LtEq": LE}

    def leaf(lit):
        while isinstance(lit, dict):
            lit = next(iter(lit.values()))
        return lit

    def walk(e) -> list:
        if "BinaryExpr" in e:
            b = e["BinaryExpr"]
            if b["op"] == "And":
                return walk(b["left"]) + walk(b["right"])
            col = b["left"]["Column"]
            v = leaf(b["right"]["Literal"])
            value = float(codes[col].get(v, -2.0)) if col in codes else float(v)  # -2: a text no table holds
            return [(position[col], ops[b["op"]], value)]
        f = e["Function"]
        fn = f["function"]["Boolean"]
        if fn == "IsNull":
            return [(position[f["input"][0]["Column"]], NULL, float("nan"))]
        if fn == "Not" and "Function" in f["input"][0]:
            return [(position[f["input"][0]["Function"]["input"][0]["Column"]], NOT_NULL, float("nan"))]
        raise ValueError(f"unexpected expression {e}")

    return sorted(walk(json.loads(text)))


def multivariate(folder: Path, n: int, n_attacks: int, venv: Path, n_seeds: int = 10) -> list[str]:
    """Part (a) and (b) of the multivariate cross-check (module docstring)."""
    import numpy as np
    import pyarrow.parquet as pq

    from anonflow.params import validate_params
    from anonflow.testing import make_context, typed_table
    from anonflow_std.risk.attacks import encode
    from anonflow_std.risk.attacks_singling import SinglingOutRisk, distinct_records
    from anonflow_std.risk.singling_multi import conjunction_counts

    for name in ("train", "control", "noised", "as-is"):
        pq.write_table(pq.read_table(folder / f"{name}.parquet").slice(0, n), folder / f"m{name}.parquet")

    def load(name):
        t = pq.read_table(folder / f"m{name}.parquet")
        return typed_table({c: t.column(c).combine_chunks() for c in t.column_names}), t.to_pandas()

    t0 = time.perf_counter()
    ref = json.loads(subprocess.run([str(venv / "bin" / "python"), "-c", MULTI, str(folder), str(n_attacks),
                                     str(n_seeds)], check=True, capture_output=True, text=True).stdout)
    theirs_s = time.perf_counter() - t0
    (train, ftrain), (control, fcontrol) = load("train"), load("control")
    lines = [f"multivariate singling out, n_cols 3, {n} training and {n} control records, {n_attacks} queries"]
    for release in ("noised", "as-is"):
        rel, frel = load(release)
        cols = list(frel.columns)
        (R, O, C), n_num = encode((rel, train, control), cols, "crosscheck", ("released", "original", "control"))
        for X in (R, O, C):
            X[:, n_num:][X[:, n_num:] == -1] = np.nan
        num = sorted(c for c in cols if np.issubdtype(frel[c].dtype, np.number))  # encode's order
        order = num + sorted(c for c in cols if c not in num)
        position = {c: j for j, c in enumerate(order)}
        codes = {}
        for c in order[n_num:]:
            j = position[c]
            codes[c] = {}
            for frame, X in ((frel, R), (ftrain, O), (fcontrol, C)):
                codes[c].update(zip(frame[c].tolist(), X[:, j].tolist()))
        R, O, C = distinct_records(R), distinct_records(O), distinct_records(C)
        for kind in ("attack", "guess"):
            q = ref["queries"][f"{release}|{kind}"]
            conds = [parse_query(text, position, codes) for text in q["json"]]
            qc = np.array([[c[0] for c in x] for x in conds], dtype=np.int64).reshape(len(conds), 3)
            qo = np.array([[c[1] for c in x] for x in conds], dtype=np.int64).reshape(len(conds), 3)
            qv = np.array([[c[2] for c in x] for x in conds], dtype=np.float64).reshape(len(conds), 3)
            parts = []
            for label, X in (("released", R), ("train", O), ("control", C)):
                mine = conjunction_counts(X, qc, qo, qv)
                same = int((mine == np.array(q[label])).sum())
                parts.append(f"{label}: counts equal for {same} of {len(conds)} queries, singling out "
                             f"{int((mine == 1).sum())} (anonymeter {int((np.array(q[label]) == 1).sum())})")
            lines.append(f"  anonymeter's {kind} queries on the {release} release, counted by us: " + "; ".join(parts))
    rel, _ = load("noised")
    mine = []
    t0 = time.perf_counter()
    m = SinglingOutRisk()
    for seed in range(n_seeds):
        ctx = make_context(seed=seed)
        ctx.tables = {"control": control}.__getitem__
        r = m.compute(train, rel, validate_params(m.params, {"control": "control", "n_attacks": n_attacks,
                                                              "mode": "multivariate"}), ctx)
        mine.append({"success": r["singling-out-risk.attack_successes"],
                     "control": r["singling-out-risk.control_successes"],
                     "baseline": r["singling-out-risk.baseline_successes"], "risk": r["singling-out-risk"]})
    ours_s = time.perf_counter() - t0
    lines.append(f"  risk of the noised release over seeds 0..{n_seeds - 1} (mean, standard error of the mean):")
    for key in ("success", "control", "baseline", "risk"):
        a = np.array([x[key] for x in mine], dtype=float)
        b = np.array([x[key] for x in ref["seeds"]], dtype=float)
        sa, sb = a.std(ddof=1) / np.sqrt(a.size), b.std(ddof=1) / np.sqrt(b.size)
        z = abs(a.mean() - b.mean()) / max(np.hypot(sa, sb), 1e-12)
        lines.append(f"    {key:9s} anonflow {a.mean():10.4f} +- {sa:.4f}   anonymeter {b.mean():10.4f} +- {sb:.4f}"
                     f"   difference {a.mean() - b.mean():+.4f} ({z:.2f} combined standard errors)")
    lines.append(f"  seconds for {n_seeds} seeds: anonflow {ours_s:.1f}; anonymeter (with its query export) "
                 f"{theirs_s:.1f}, of which its {n_seeds} evaluations {sum(x['seconds'] for x in ref['seeds']):.1f}")
    return lines


def main(argv: list[str]) -> None:
    n = int(argv[argv.index("--n") + 1]) if "--n" in argv else 5000
    venv = Path(argv[argv.index("--venv") + 1]) if "--venv" in argv else Path("/tmp/anonvenv")
    multi_n = int(argv[argv.index("--multi-n") + 1]) if "--multi-n" in argv else 3000
    multi_attacks = int(argv[argv.index("--multi-attacks") + 1]) if "--multi-attacks" in argv else 300
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()}, n = {n} training and {n} control records")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build(folder, max(n, multi_n))
        if "--multivariate-only" in argv:
            for line in multivariate(folder, multi_n, multi_attacks, venv):
                print(line)
            print(f"load {os.getloadavg()}")
            return
        multi = multivariate(folder, multi_n, multi_attacks, venv)
        mine, singling = ours(folder)
        ref = json.loads(subprocess.run([str(venv / "bin" / "python"), "-c", ANONYMETER, tmp, json.dumps(CASES),
                                         json.dumps(singling)], check=True, capture_output=True, text=True).stdout)
        regression = anonymeter_formula(folder)
        neighbours = compare_neighbours(folder)
    print(f"{'release | attack':34s} {'':10s} {'targets':>8s} {'control':>8s} {'attack':>8s} {'control':>8s} "
          f"{'risk':>7s} {'ci':>17s} {'seconds':>8s}")
    for key in mine:
        for who, r in (("anonflow", mine[key]), ("anonymeter", ref[key])):
            print(f"{key:34s} {who:10s} {r['success']:8d} {r['control']:8d} {r['attack_rate']:8.4f} "
                  f"{r['control_rate']:8.4f} {r['risk']:7.4f} [{r['ci'][0]:.4f}, {r['ci'][1]:.4f}] "
                  f"{r['seconds']:8.2f}")
        same = (mine[key]["success"], mine[key]["control"]) == (ref[key]["success"], ref[key]["control"])
        queries = (f" ({mine[key]['queries']} queries single out in the release, anonymeter's "
                   f"generator {ref[key]['queries']})" if "queries" in mine[key] else "")
        print(f"{'':34s} {'same successes' if same else 'DIFFERENT successes'}{queries}")
    for line in regression:
        print(line)
    print("the 5 nearest released records of every record, anonflow's search against anonymeter's:")
    for line in neighbours:
        print("  " + line)
    for line in multi:
        print(line)
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main(sys.argv[1:])
