"""The risk-utility trade-off of workflows/sdc-adult.yaml (docs/results.md section 7).

Run as a script::

    python tests/benchmarks/results_perturbation.py            # noise 0..150 % and PRAM pd 0.5..1 (about 2 min)
    python tests/benchmarks/results_perturbation.py --noise 10,50 --pd 0.8
    python tests/benchmarks/results_perturbation.py --heldout  # workflows/sdc-adult-heldout.yaml's attacks

Each point is one run of the shipped workflow through the Python API with ``set=`` (the
equivalent of ``anonflow run workflows/sdc-adult.yaml --set noised.noise=N --set pramed.pd=P``),
all in one store, so unchanged steps come from the cache and the last run's report plots the
sweep. It prints one Markdown row per point: the linkage and interval-disclosure risks and the
IL1s, eigenvalue, correlation and moment changes of the three noised columns, the Hellinger
distance of the PRAMed columns, and the share of their values PRAM changed (from the run's
notes), next to the original's risks (``.before``) and the run's wall time. With ``--heldout``
it sweeps the noise of workflows/sdc-adult-heldout.yaml instead and prints the attack-based
risks (linkability, inference, singling out; 500 targets each against the held-out control set)
and the pMSE beside dbrl, IL1s and the eigenvalue change. Importing the module runs nothing.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from script_args import listed_option

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "workflows" / "sdc-adult.yaml"

HELDOUT = ROOT / "workflows" / "sdc-adult-heldout.yaml"

NOISES = (0.0, 5.0, 10.0, 25.0, 50.0, 100.0, 150.0)
HELDOUT_NOISES = (0.0, 10.0, 20.0, 50.0, 100.0, 200.0)
HELDOUT_COLUMNS = [("dbrl", "risk.dbrl"), ("linkability", "risk.linkability-risk"), ("inference", "risk.inference-risk"),
                   ("singling out", "risk.singling-out-risk"), ("IL1s", "utility.il1s"),
                   ("eigen", "utility.eigen-utility"), ("pMSE ratio", "utility.pmse.ratio")]
PDS = (0.5, 0.8, 0.95, 1.0)

COLUMNS = [("dbrl", "risk.dbrl"), ("interval", "risk.interval-disclosure"), ("IL1s", "utility.il1s"),
           ("eigen", "utility.eigen-utility"), ("IL_correl", "utility.correlation-change"),
           ("moments", "utility.moments-change"), ("Hellinger", "utility.hellinger")]


def changed_share(result) -> float:
    """The share of occupation's values PRAM changed, from the pram step's note."""
    notes = next(s for s in result.steps if s["step"] == "pramed")["notes"]
    note = next(n for n in notes if n.startswith("pram 'occupation'"))
    return float(note.split("(")[1].split("%")[0]) / 100


def heldout(argv: list[str]) -> None:
    """The noise sweep of workflows/sdc-adult-heldout.yaml (PRAM pd 0.7 throughout)."""
    import anonflow

    noises = [float(x) for x in listed_option(argv, "--noise", HELDOUT_NOISES)]
    wf = anonflow.load(HELDOUT)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "results.duckdb"
        print("| noise % | " + " | ".join(name for name, _ in HELDOUT_COLUMNS) + " | s |")
        print("|" + "---|" * (len(HELDOUT_COLUMNS) + 2))
        before = None
        for noise in noises:
            t0 = time.perf_counter()
            result = wf.run(set={"noised.noise": noise}, db=db, out_dir=Path(tmp) / "out")
            seconds = time.perf_counter() - t0
            m = result.metrics
            before = before or {name: m[f"{key}.before"] for name, key in HELDOUT_COLUMNS if f"{key}.before" in m}
            print(f"| {noise:g} | " + " | ".join(f"{m[key]:.4g}" for _, key in HELDOUT_COLUMNS) + f" | {seconds:.1f} |")
        print()
        print("training records as released (risk_before): " + ", ".join(f"{k} {v:.4g}" for k, v in before.items()))


def main(argv: list[str]) -> None:
    import anonflow

    if "--heldout" in argv:
        heldout([a for a in argv if a != "--heldout"])
        return

    noises = [float(x) for x in listed_option(argv, "--noise", NOISES)]
    pds = [float(x) for x in listed_option(argv, "--pd", PDS)]
    wf = anonflow.load(WORKFLOW)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "results.duckdb"
        print("| noise % | pram pd | " + " | ".join(name for name, _ in COLUMNS) + " | PRAM changed | s |")
        print("|" + "---|" * (len(COLUMNS) + 4))
        before = None
        for pd_ in pds:
            for noise in noises:
                t0 = time.perf_counter()
                result = wf.run(set={"noised.noise": noise, "pramed.pd": pd_}, db=db, out_dir=Path(tmp) / "out")
                seconds = time.perf_counter() - t0
                m = result.metrics
                before = before or {k: m[f"{k}.before"] for k in ("risk.dbrl", "risk.interval-disclosure")}
                cells = [f"{m[key]:.4g}" for _, key in COLUMNS]
                print(f"| {noise:g} | {pd_:g} | " + " | ".join(cells) + f" | {changed_share(result):.2%} | {seconds:.1f} |")
        print()
        print(f"original (risk_before): dbrl {before['risk.dbrl']:.4g}, "
              f"interval disclosure {before['risk.interval-disclosure']:.4g}")


if __name__ == "__main__":
    main(sys.argv[1:])
