"""The notebook-style script docs/examples/notebook.py, run as a user would: Adult with pandas
anonymized by ``anonflow.anonymize``, and ARX's shipped workflow run through the API with
``set=`` and by the CLI, whose published files (sha256) and metrics must be the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "examples" / "notebook.py"


def test_notebook_matches_the_cli_byte_for_byte(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins"),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(NOTEBOOK), str(tmp_path)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the API and the CLI published the same bytes and metrics" in done.stdout
    assert sorted(p.name for p in (tmp_path / "api").iterdir()) == ["arx-adult-k5.csv"]
    assert (tmp_path / "api" / "arx-adult-k5.csv").read_bytes() == (tmp_path / "cli" / "arx-adult-k5.csv").read_bytes()
    assert not (tmp_path / "anonflow.duckdb").exists()  # the API wrote only where it was told
