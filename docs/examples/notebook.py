"""A notebook, as plain Python: Adult with pandas, anonymized in one call, then ARX's shipped
workflow run through the API with an override, and the same run made by the CLI, compared
byte for byte. ``tests/api/test_notebook.py`` runs it; by hand:

    python docs/examples/notebook.py [WORK_DIR]

Each "cell" below is what one would type in a notebook. WORK_DIR (default: a new temporary
folder) receives the stores and the published files; nothing is written elsewhere.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

import anonflow

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="anonflow-notebook-"))
WORK.mkdir(parents=True, exist_ok=True)

# -- cell 1: Adult, with pandas -----------------------------------------------------------------
adult = pd.read_csv(ROOT / "workflows/data/adult/adult_full.csv")
print(adult.shape)                                   # (45222, 15)

# -- cell 2: anonymize it in one call: MDAV, k = 5, on six numeric quasi-identifiers ---------------
quasi = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
anon = anonflow.anonymize(adult, "mdav", quasi=quasi, sensitive=["occupation"], k=5,
                          metrics=["k-anonymity", "sse-il"], seed=20261125)
print(anon.metrics["scores.k-anonymity"], round(anon.metrics["scores.sse-il"], 3))
frame = anon.to_pandas()
assert len(frame) == len(adult)
assert frame.groupby("_class").size().min() >= 5
assert anon.metrics["scores.k-anonymity"] >= 5

# -- cell 3: ARX's workflow through the API, with k = 10 ------------------------------------------
WORKFLOW = ROOT / "workflows/arx-adult-k5.yaml"
SET = {"anon.model_params": {"k": 10}}
wf = anonflow.load(WORKFLOW)
api = wf.run(set=SET, db=WORK / "api.duckdb", out_dir=WORK / "api")
print(api.run_id, api.metrics["scores.k-anonymity"])
published = api.table("anon")
assert published.num_rows == 30162

# -- cell 4: the same run by the CLI ----------------------------------------------------------------
env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins"),
                                                    os.environ.get("PYTHONPATH", "")])}
cli = subprocess.run([sys.executable, "-m", "anonflow", "run", str(WORKFLOW), "--db", str(WORK / "cli.duckdb"),
                      "--out-dir", str(WORK / "cli"), "--set", "anon.model_params={k: 10}", "--json"],
                     capture_output=True, text=True, env=env, check=True)
cli_result = json.loads(cli.stdout)


def sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def published_files(outputs: list, base: Path) -> dict:
    """Each published file, by its path inside the output folder: (recorded sha256, sha256 on disk)."""
    return {os.path.relpath(o["path"], base): (o["sha256"], sha256(o["path"])) for o in outputs}


api_files = published_files(api.outputs, WORK / "api")
cli_files = published_files(cli_result["outputs"], WORK / "cli")
print(json.dumps(api_files, indent=1))
assert api_files and api_files == cli_files, (api_files, cli_files)
assert all(recorded == on_disk for recorded, on_disk in api_files.values())
assert api.metrics == cli_result["metrics"]
assert [(s["step"], s["status"], s["rows"]) for s in api.steps] == \
    [(s["step"], s["status"], s["rows"]) for s in cli_result["steps"]]
print("the API and the CLI published the same bytes and metrics")
