"""What plugin authors found (issue 28, section 7), each driven through the CLI:

1. the code digest covers every module and package the plugin's distribution installs (a
   helper in ``py-modules`` too), whether it is installed as a wheel or editable;
2. whatever class ids an algorithm returns, the published order and ``_class`` never reveal
   the source order;
3. a claim survives a chain of algorithms when it is re-checked on the later output, and the
   report's per-attribute loss compares the published table with the typed original.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anonflow import codehash, plugins

from .conftest import write
from .test_release import verify
from .test_release_trust import scratch_root  # noqa: F401 (a fixture)

PLUGIN = '''
import numpy as np
import pyarrow as pa
from anonflow.api import CLASS, Algorithm, Param, hookimpl

from stalehelper import OFFSET


class Blocks(Algorithm):
    name = "stale.blocks"
    version = "1.0.0"
    params = (Param("k", "int", default=5, min=2),)

    def claims(self, params):
        return {"k-anonymity": {"k": params["k"]}}

    def run(self, table, params, ctx):
        q = table.typing.quasi[0]
        x = table.data.column(q).to_numpy().astype(float)
        rank = np.empty(len(x), dtype=np.int64)
        rank[np.argsort(x, kind="stable")] = np.arange(len(x))
        labels = np.minimum(rank // params["k"], max(len(x) // params["k"] - 1, 0))
        data = table.data
        for q in table.typing.quasi:
            col = data.column(q).to_numpy().astype(float)
            means = np.bincount(labels, weights=col) / np.bincount(labels)
            data = data.set_column(data.column_names.index(q), q, pa.array(means[labels] + OFFSET))
        return table.replace(data=data.append_column(CLASS, pa.array(labels, pa.int64())))


@hookimpl
def anonflow_register_algorithms(register):
    register(Blocks())
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "stale-blocks"
version = "1.0.0"

[project.entry-points.anonflow]
stale = "stalecache"

[tool.setuptools]
packages = ["stalecache"]
py-modules = ["stalehelper"]
'''


def _distribution(folder: Path) -> Path:
    """A third-party plugin distribution whose algorithm reads a constant from a helper module
    outside its package (``py-modules``)."""
    write(folder / "pyproject.toml", PYPROJECT)
    write(folder / "stalecache" / "__init__.py", PLUGIN)
    write(folder / "stalehelper.py", "OFFSET = 0.0\n")
    return folder


def _pip_install(src: Path, target: Path, editable: bool) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), *(["-e"] if editable else []), str(src)], check=True)


def _forget_plugin() -> None:
    for name in ("stalecache", "stalehelper"):
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
    codehash.clear_caches()
    plugins.set_registry(None)


@pytest.fixture(params=["wheel", "editable"])
def installed(request, tmp_path):
    """The distribution installed into a site folder on ``sys.path`` (as a wheel, or editable:
    then through its ``.pth`` file and setuptools' import finder, as ``site`` would); yields
    the helper module's file that the run imports."""
    src = _distribution(tmp_path / "src")
    site_dir = tmp_path / "site"
    editable = request.param == "editable"
    _pip_install(src, site_dir, editable)
    saved_path, saved_meta = list(sys.path), list(sys.meta_path)
    if editable:
        import site

        site.addsitedir(str(site_dir))  # runs the .pth file: installs the editable finder
    else:
        sys.path.insert(0, str(site_dir))
    _forget_plugin()
    try:
        yield (src if editable else site_dir) / "stalehelper.py"
    finally:
        sys.path[:], sys.meta_path[:] = saved_path, saved_meta
        _forget_plugin()


def _blocks_workflow(project: Path) -> Path:
    return write(project / "wf.yaml", """
        name: stale-cache
        seed: 1
        sources:
          census: {path: data/sdcmicro/CASCrefmicrodata.csv}
        steps:
          typed: {uses: typing, input: census, with: {quasi: [AFNLWGT, AGI]}}
          grouped: {uses: stale.blocks, input: typed, with: {k: 5}}
          release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
        """)


def test_a_helper_module_of_the_distribution_is_part_of_the_code_digest(cli, project, installed, scratch_root):
    helper = installed
    wf, db = _blocks_workflow(project), project / "s.duckdb"

    def run() -> tuple[dict[str, str], bytes]:
        res = cli("run", wf, "--db", db, "--json")
        assert res.exit_code == 0, res.output
        return ({s["step"]: s["status"] for s in json.loads(res.stdout)["steps"]},
                (project / "out" / "release" / "published.csv").read_bytes())

    first, published = run()
    assert first["grouped"] == "succeeded"
    code = plugins.get_registry().get("algorithm", "stale.blocks").code
    assert "stalehelper" in codehash.code_names(["stalecache"], ["stale-blocks"])
    again, same = run()
    assert again["grouped"] == "cached" and same == published
    before = project / "before"
    (project / "out" / "release").rename(before)
    # the fix: the helper alone changes, the plugin's package and version do not
    helper.write_text("OFFSET = 0.5\n")
    _forget_plugin()
    fixed, changed = run()
    assert fixed["typed"] == "cached" and fixed["grouped"] == "succeeded"
    assert changed != published
    assert plugins.get_registry().get("algorithm", "stale.blocks").code != code
    # the release made before the fix no longer reproduces, and verify names the changed code
    status, result = verify(cli, before, "--rerun", "--sources", project / "data" / "sdcmicro")
    assert status == 1 and result["rerun"]["verdict"] == "different"
    assert result["rerun"]["code"] == ["the code of 1 plugin(s) of stale-blocks (algorithm:stale.blocks)"]


def test_an_editable_install_without_a_finder_is_digested_from_the_folders_its_pth_names(tmp_path, monkeypatch):
    """Other build backends' editable installs (hatchling, flit, pdm) put the source folder on
    ``sys.path`` with a ``.pth`` line: every module and package in that folder counts."""
    src = tmp_path / "src"
    write(src / "plainpkg" / "__init__.py", "X = 1\n")
    write(src / "plainhelper.py", "Y = 1\n")
    (src / "notes").mkdir()  # not a package: no __init__.py
    site_dir = tmp_path / "site"
    info = site_dir / "plain_dist-1.0.dist-info"
    write(info / "METADATA", "Metadata-Version: 2.1\nName: plain-dist\nVersion: 1.0\n")
    write(site_dir / "_plain_dist.pth", f"{src}\n")
    write(info / "RECORD", "_plain_dist.pth,,\nplain_dist-1.0.dist-info/METADATA,,\nplain_dist-1.0.dist-info/RECORD,,\n")
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.syspath_prepend(str(site_dir))
    codehash.clear_caches()
    try:
        assert codehash.distribution_names("plain-dist") == {"plainpkg", "plainhelper"}
        before = codehash.code_digest("plainpkg", distributions=["plain-dist"])
        (src / "plainhelper.py").write_text("Y = 2\n")
        codehash.clear_caches()
        assert codehash.code_digest("plainpkg", distributions=["plain-dist"]) != before
    finally:
        codehash.clear_caches()


def test_the_digest_does_not_depend_on_where_the_distribution_is_installed(tmp_path):
    src = _distribution(tmp_path / "src")
    digests = []
    for where in ("a", "b/c"):
        target = tmp_path / where
        _pip_install(src, target, editable=False)
        sys.path.insert(0, str(target))
        _forget_plugin()
        try:
            digests.append(codehash.code_digest("stalecache", distributions=["stale-blocks"]))
        finally:
            sys.path.remove(str(target))
            _forget_plugin()
    assert digests[0] == digests[1] and len(digests[0]) == 64
