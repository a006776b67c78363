"""Each shipped workflow run once per test session, however many test files read its results.

``tests/shipped/`` re-checks the published files of the shipped workflows with code other than
anonflow's (pyarrow group-bys, pycanon, pandas): four files, several reading the same runs
(``maasae-adult`` and ``l-clustering-adult`` take about 35 s each). :func:`shipped_run` runs a
workflow through the CLI the first time any test asks for it and hands every later caller, in
this process or in another pytest-xdist worker, the same result: the run's JSON, its output
folder and its store. The workers' temporary folders share one parent per session, where a file
lock per workflow makes one worker run it while another waits for it.

The run is ``anonflow run W --json --retain published``: the published files are the same bytes
as without ``--retain`` (the purge touches only the store), and the store then holds no original
table, which the leak scan checks. Callers only read what is there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from anonflow import registry as plugins
from tests.support.helpers import WORKFLOWS

try:
    import fcntl
except ImportError:  # no POSIX locks: each worker runs its own copy
    fcntl = None


def _folder(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    if fcntl is not None and os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # popen-gwN's parent: one per session, shared by its workers
    folder = base / "shipped-runs"
    folder.mkdir(exist_ok=True)
    return folder


def shipped_run(workflow: str, tmp_path_factory) -> dict:
    """``workflows/<workflow>.yaml`` run as shipped, once per session: its ``--json`` result,
    with ``dir`` = its output folder and ``db`` = its store (both to be read, never changed)."""
    folder = _folder(tmp_path_factory) / workflow
    with open(folder.with_suffix(".lock"), "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        result = folder / "result.json"
        if not result.exists():
            from anonflow.cli import main

            folder.mkdir(exist_ok=True)
            plugins.set_registry(None)
            res = CliRunner().invoke(main, ["run", str(WORKFLOWS / f"{workflow}.yaml"), "--db", str(folder / "s.duckdb"),
                                            "--out-dir", str(folder / "out"), "--json", "--retain", "published"],
                                     catch_exceptions=False)
            assert res.exit_code == 0, res.output
            assert json.loads(res.output)["status"] == "succeeded"
            partial = folder / "result.json.part"
            partial.write_text(res.output)
            partial.rename(result)  # written whole: a worker that failed mid-run leaves no result
        out = json.loads(result.read_text())
    out["dir"], out["db"] = folder / "out", folder / "s.duckdb"
    return out
