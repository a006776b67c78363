"""A Census MDAV release made once per test module and copied into each test's project folder.

Making the release (the run, and the report's matplotlib plots above all) takes most of a
test that then only verifies or forges it. A release folder holds no absolute path, run id or
timestamp (test_release's byte-identity test checks that), and records its source and workflow
relative to the workflow's folder, so a copy in another folder is the release that folder
would have made. The copy also takes the workflow file, the store and, for a signed release,
the key pair (its modes kept), so the project folder holds what a run there leaves; the store
records the template's absolute paths, so a test that runs the workflow again on that store
makes its own release instead."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.helpers import census_project, census_workflow, cli_invoker


def make_release(tmp_path_factory, extra: str, *, out_dir: bool = True, key: bool = False) -> Path:
    """A project folder (Census data at data/sdcmicro/) in which ``census_workflow`` with the
    steps ``extra`` was run (store s.duckdb; ``--out-dir out`` unless ``out_dir`` is false);
    with ``key``, keys/release.key (and .pub) made by ``anonflow keygen`` before the run."""
    folder = census_project(tmp_path_factory.mktemp("made-release"))
    cli = cli_invoker()
    if key:
        (folder / "keys").mkdir()
        res = cli("keygen", folder / "keys" / "release.key")
        assert res.exit_code == 0, res.output
    wf = census_workflow(folder, extra=extra)
    args = ["--out-dir", folder / "out"] if out_dir else []
    res = cli("run", wf, "--db", folder / "s.duckdb", *args, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["status"] == "succeeded"
    return folder


def copy_into(made: Path, folder: Path, skip: tuple[str, ...] = ()) -> None:
    """Copy each entry of ``made`` but those named in ``skip`` into ``folder`` (links as links,
    modes kept: a private key stays 0600)."""
    for entry in made.iterdir():
        if entry.name in skip:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, folder / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, folder / entry.name, follow_symlinks=False)


def copy_release(made: Path, project: Path) -> Path:
    """Copy everything of ``made`` but its data (``project`` holds its own copy of the same
    Census file) into ``project``; return project/out/release."""
    copy_into(made, project, skip=("data",))
    return project / "out" / "release"
