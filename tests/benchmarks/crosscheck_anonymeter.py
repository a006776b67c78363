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
targets and on the control set, the rates and the risk with its interval. Nothing here
asserts; the figures go to docs/perturbation-attacks.md. Importing this module has no side
effects.
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


def main(argv: list[str]) -> None:
    n = int(argv[argv.index("--n") + 1]) if "--n" in argv else 5000
    venv = Path(argv[argv.index("--venv") + 1]) if "--venv" in argv else Path("/tmp/anonvenv")
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()}, n = {n} training and {n} control records")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build(folder, n)
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
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main(sys.argv[1:])
