"""What the engine promises plugin authors and the scripts around it (issue 16): changed code
is never served from the step cache, a failed run leaves earlier published files as they
were, ``--json`` prints a JSON object on failure too, lineage names the plugin that ran a
step, and ``anonflow plan`` calls publishers' ``check()`` with the table."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anonflow import codehash
from anonflow import registry as plugins
from anonflow.api import Hierarchy, HierarchyBuilder, InputError, Param, Publisher, hookimpl

from tests.support.helpers import census_workflow, install_site, write

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "plugin-example"

PLUGIN = '''
import numpy as np
import pyarrow as pa
from anonflow.api import CLASS, Algorithm, Param, hookimpl

class Blocks(Algorithm):
    name = "cachetest.blocks"
    version = "1.0.0"
    params = (Param("k", "int", default=5, min=2),)

    def claims(self, params):
        return {"k-anonymity": {"k": params["k"]}}

    def run(self, table, params, ctx):
        n = table.num_rows
        labels = np.minimum(np.arange(n) // params["k"], max(n // params["k"] - 1, 0))
        data = table.data
        for q in table.typing.quasi:
            col = data.column(q).to_numpy().astype(float)
            means = np.bincount(labels, weights=col) / np.bincount(labels)
            data = data.set_column(data.column_names.index(q), q, pa.array(means[labels] + OFFSET))
        return table.replace(data=data.append_column(CLASS, pa.array(labels, pa.int64())))

OFFSET = 0.0

@hookimpl
def anonflow_register_algorithms(register):
    register(Blocks())
'''


def _load_package(folder: Path, name: str, body: str):
    pkg = folder / name
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(body)
    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def _use_module(module, name: str) -> None:
    pm, dists = plugins.plugin_manager()
    pm.register(module, name=name)
    plugins.set_registry(plugins.Registry(pm, dists))


def _blocks_workflow(project: Path) -> Path:
    return write(project / "wf.yaml", """
        name: cache-test
        seed: 1
        sources:
          census: {path: data/sdcmicro/CASCrefmicrodata.csv}
        steps:
          typed: {uses: typing, input: census, with: {quasi: [AFNLWGT, AGI]}}
          grouped: {uses: cachetest.blocks, input: typed, with: {k: 5}}
          published: {uses: publish, input: grouped, with: {publisher: csv, path: out.csv}}
        """)


def _statuses(cli, wf: Path, db: Path, *extra: str) -> dict[str, str]:
    res = cli("run", wf, "--db", db, "--json", *extra)
    assert res.exit_code == 0, res.output
    return {s["step"]: s["status"] for s in json.loads(res.stdout)["steps"]}


def test_a_plugin_changed_without_a_version_bump_is_run_again(cli, project, monkeypatch):
    name = "cachetest_pkg"
    module = _load_package(project / "site", name, PLUGIN)
    try:
        _use_module(module, "cachetest")
        wf, db = _blocks_workflow(project), project / "s.duckdb"
        assert _statuses(cli, wf, db)["grouped"] == "succeeded"
        assert _statuses(cli, wf, db)["grouped"] == "cached"
        first = (project / "out" / "out.csv").read_bytes()
        # the bug fix: same version, different code (and a different result)
        (project / "site" / name / "__init__.py").write_text(PLUGIN.replace("OFFSET = 0.0", "OFFSET = 0.5"))
        codehash.module_digest.cache_clear()
        sys.modules.pop(name, None)
        module = importlib.import_module(name)
        _use_module(module, "cachetest")
        statuses = _statuses(cli, wf, db)
        assert statuses["grouped"] == "succeeded" and statuses["typed"] == "cached"
        assert (project / "out" / "out.csv").read_bytes() != first
        # the run and step records keep the digest, and 'anonflow plugins' shows it
        from anonflow.store import Store

        digest = codehash.module_digest(name)
        with Store(str(db), read_only=True) as store:
            run = store.runs(1)[0]
            assert store.run(run["run_id"])["versions"]["code"]["plugins"]["algorithm:cachetest.blocks"] == digest
            step = next(s for s in store.steps(run["run_id"]) if s["step"] == "grouped")
            used = {(p["kind"], p["name"]): p for p in step["plugins"]}
            assert used[("algorithm", "cachetest.blocks")]["code"] == digest
            assert ("metric", "k-anonymity") in used  # the claim was checked with it
        listed = cli("plugins")
        assert "cachetest.blocks       1.0.0" in listed.output and f"code {digest[:12]}" in listed.output
        entry = next(p for p in json.loads(cli("plugins", "--json").stdout) if p["name"] == "cachetest.blocks")
        assert entry["code"] == digest
    finally:
        sys.path.remove(str(project / "site"))
        sys.modules.pop(name, None)
        codehash.module_digest.cache_clear()


def test_the_digest_covers_every_file_of_the_package_but_compiled_caches(tmp_path):
    pkg = tmp_path / "p"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "sub" / "data.sql").write_text("SELECT 1")
    files = codehash._files(pkg)
    base = codehash.digest_files(pkg, files)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.cpython-312.pyc").write_bytes(b"\0")
    assert codehash.digest_files(pkg, codehash._files(pkg)) == base
    (pkg / "sub" / "data.sql").write_text("SELECT 2")
    assert codehash.digest_files(pkg, codehash._files(pkg)) != base
    (pkg / "sub" / "data.sql").write_text("SELECT 1")
    (pkg / "sub" / "data.sql").rename(pkg / "sub" / "other.sql")  # a renamed file is a change too
    assert codehash.digest_files(pkg, codehash._files(pkg)) != base


@pytest.fixture(scope="module")
def example_site(tmp_path_factory) -> Path:
    return install_site(EXAMPLE, tmp_path_factory.mktemp("site"))


def test_an_installed_third_party_plugin_edited_in_place_is_not_served_from_the_cache(example_site, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(example_site), os.environ.get("PYTHONPATH", "")])}

    def run() -> dict[str, str]:
        res = subprocess.run([sys.executable, "-m", "anonflow", "run", str(EXAMPLE / "workflow.yaml"), "--db",
                              str(tmp_path / "s.duckdb"), "--out-dir", str(tmp_path / "out"), "--json"],
                             capture_output=True, text=True, env=env, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        return {s["step"]: s["status"] for s in json.loads(res.stdout)["steps"]}

    assert run()["scores"] == "succeeded"
    assert run()["scores"] == "cached"
    module = example_site / "anonflow_example" / "__init__.py"
    module.write_text(module.read_text() + "\n# fixed without a version bump\n")
    after = run()
    # the step using the changed metric runs again; the others (no code of the plugin) stay cached
    assert after["scores"] == "succeeded" and after["grouped"] == "cached"


def test_lineage_names_the_publisher_and_the_metrics(cli, project):
    wf = census_workflow(project)
    db = project / "s.duckdb"
    assert cli("run", wf, "--db", db).exit_code == 0
    out = cli("lineage", project / "out" / "census.parquet", "--db", db).output
    head = out.splitlines()[0]
    assert head.startswith("published [publish: parquet ") and "code " in head, out
    assert "grouped [algorithm: mdav " in out and "checked with k-anonymity" in out
    runs = cli("runs", json.loads(cli("runs", "--db", db, "--json").stdout)[0]["run_id"], "--db", db).output
    assert "scores [evaluate: " in runs and "k-anonymity" in runs and "sse-il" in runs
    assert "typed [typing: anonflow " in runs


class Fails(Publisher):
    name = "test.fails"
    version = "0.0.1"
    params = (Param("path", "str"),)

    def publish(self, table, params, ctx):
        ctx.resolve_output(params["path"])
        raise InputError("the release cannot be written")


class Picky(Publisher):
    """Refuses a table with a column called AGI (a check that needs the table)."""

    name = "test.picky"
    version = "0.0.1"
    params = (Param("path", "str"),)

    def check(self, params, table=None, **_):
        if table is not None and "AGI" in table.columns:
            raise InputError("column 'AGI' must not be published")

    def publish(self, table, params, ctx):  # pragma: no cover - plan refuses first
        return []


class Provider:
    @hookimpl
    def anonflow_register_publishers(self, register):
        register(Fails())
        register(Picky())


def _use_publishers() -> None:
    pm, dists = plugins.plugin_manager()
    pm.register(Provider(), name="issue16")
    plugins.set_registry(plugins.Registry(pm, dists))


def test_a_failed_run_leaves_the_earlier_published_files_as_they_were(cli, project):
    _use_publishers()
    db = project / "s.duckdb"
    wf = census_workflow(project)
    assert cli("run", wf, "--db", db).exit_code == 0
    out = project / "out"
    before = (out / "census.parquet").read_bytes()
    # the same workflow, re-run with another k (so census.parquet would change) and a last
    # publish step that fails after census.parquet was written
    wf = census_workflow(project, extra="""
        broken:
          uses: publish
          input: grouped
          with: {publisher: test.fails, path: new/release.txt}
        """)
    res = cli("run", wf, "--db", db, "--set", "grouped.k=6", "--json")
    assert res.exit_code == 2
    failure = json.loads(res.stdout)
    assert failure["status"] == "failed" and failure["run_id"] and failure["where"].endswith("step 'broken'")
    assert failure["error"] == "the release cannot be written" and failure["exit_code"] == 2
    assert [s["status"] for s in failure["steps"]][-2:] == ["succeeded", "failed"]
    assert (out / "census.parquet").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["census.parquet"]  # nothing new, nothing moved aside kept
    # and a successful re-run replaces it, leaving nothing aside
    res = cli("run", census_workflow(project), "--db", db, "--set", "grouped.k=6")
    assert res.exit_code == 0, res.output
    assert (out / "census.parquet").read_bytes() != before
    assert sorted(p.name for p in out.iterdir()) == ["census.parquet"]


def test_json_failure_before_a_run_starts_is_json_too(cli, project):
    wf = census_workflow(project)
    res = cli("run", wf, "--db", project / "s.duckdb", "--json", "--set", "grouped.kk=3")
    assert res.exit_code == 2
    failure = json.loads(res.stdout)
    assert failure["status"] == "failed" and failure["run_id"] is None and "kk" in failure["error"]
    assert failure["kind"] == "WorkflowError"
    assert not res.stdout.strip().startswith("Error")


@pytest.mark.parametrize("source, refused", [("typed", True), ("grouped", False)])
def test_plan_calls_the_publishers_check_with_the_table(cli, project, source, refused):
    # fed by a preparation step, the check gets the table (and refuses it); fed by an algorithm,
    # it gets typed= (the previewed table the algorithm's output keeps the typing of)
    _use_publishers()
    wf = census_workflow(project, extra=f"""
        picky:
          uses: publish
          input: {source}
          with: {{publisher: test.picky, path: picky.csv}}
        """)
    res = cli("plan", wf)
    assert res.exit_code == (2 if refused else 0), res.output
    assert ("step 'picky': publisher 'test.picky': column 'AGI' must not be published" in res.output) == refused


class Digits(HierarchyBuilder):
    """Refuses a column typed continuous (a check that needs the table and the column)."""

    name = "test.digits"
    version = "0.0.1"
    params = (Param("keep", "int", default=1),)

    def check(self, params, table=None, column=None, **_):
        if table is not None and table.typing.get(column).type == "continuous":
            raise InputError(f"column {column!r} is typed continuous; this builder takes codes")

    def build(self, column, values, params, ctx):  # pragma: no cover - refused first
        return Hierarchy.from_levels(column, [[str(v) for v in values.to_pylist()]])


class BuilderProvider:
    @hookimpl
    def anonflow_register_hierarchy_builders(self, register):
        register(Digits())


def test_plan_and_run_call_a_hierarchy_builders_check_with_the_table_and_column(cli, project):
    pm, dists = plugins.plugin_manager()
    pm.register(BuilderProvider(), name="issue16-builders")
    plugins.set_registry(plugins.Registry(pm, dists))
    write(project / "wf.yaml", """
        name: builder-check
        sources:
          census: {path: data/sdcmicro/CASCrefmicrodata.csv}
        steps:
          typed: {uses: typing, input: census, with: {quasi: [AGI], sensitive: [FICA]}}
          hier: {uses: hierarchy, input: typed, with: {FICA: {test.digits: {keep: 2}}}}
        """)
    for command in ("plan", "run"):
        res = cli(command, project / "wf.yaml", *(["--db", project / "s.duckdb"] if command == "run" else []))
        assert res.exit_code == 2, res.output
        assert ("step 'hier': column 'FICA': hierarchy builder 'test.digits': column 'FICA' is typed continuous; "
                "this builder takes codes") in res.output
