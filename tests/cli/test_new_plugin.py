"""``anonflow new-plugin NAME`` generates a package that installs, lists its four plugins,
passes its own tests and runs its workflow; and ``anonflow.testing``'s plugin helpers work
with the package installed and not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from anonflow import registry as plugins
from anonflow import testing
from anonflow.api import hookimpl
from anonflow.cli import main
from anonflow.cli.scaffold import generate

from tests.support.helpers import install_site

PLUGINS = {("algorithm", "acme.sorted-groups"), ("metric", "acme.class-size"), ("publisher", "acme.jsonl"),
           ("hierarchy", "acme.prefix")}


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gen")
    res = CliRunner().invoke(main, ["new-plugin", "acme", "--dir", str(folder)])
    assert res.exit_code == 0, res.output
    assert "acme.sorted-groups" in res.output and "pip install -e" in res.output
    return folder / "anonflow-acme"


@pytest.fixture(scope="module")
def site(package, tmp_path_factory) -> Path:
    return install_site(package, tmp_path_factory.mktemp("site"))


def run(path: Path | None, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python ARGS`` with ``path`` (a pip --target folder, or a source folder) on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(path or ""), os.environ.get("PYTHONPATH", "")]
                                                      if p)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_the_package_has_every_file(package):
    assert package.name == "anonflow-acme"
    found = {str(p.relative_to(package)) for p in package.rglob("*") if p.is_file()}
    assert {"pyproject.toml", "README.md", "workflow.yaml", "data/people.csv", "tests/test_acme.py",
            "anonflow_acme/__init__.py"} <= found
    pyproject = (package / "pyproject.toml").read_text()
    assert 'acme = "anonflow_acme"' in pyproject and 'dependencies = ["anonflow"]' in pyproject
    assert len((package / "data" / "people.csv").read_text().splitlines()) == 201


def test_the_data_is_the_same_every_time(tmp_path, package):
    again = generate("acme", tmp_path)
    assert (again / "data" / "people.csv").read_bytes() == (package / "data" / "people.csv").read_bytes()


def test_installed_it_lists_the_four_plugins(site, tmp_path):
    res = run(site, "-m", "anonflow", "plugins", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    ours = [p for p in json.loads(res.stdout) if p["name"].startswith("acme.")]
    assert {(p["kind"], p["name"]) for p in ours} == PLUGINS
    assert {p["distribution"] for p in ours} == {"anonflow-acme"}


def test_installed_its_own_tests_pass(site, package):
    res = run(site, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=package)
    assert res.returncode == 0, res.stdout + res.stderr
    assert " passed" in res.stdout and "failed" not in res.stdout


def test_installed_its_workflow_runs(site, package, tmp_path):
    res = run(site, "-m", "anonflow", "run", "workflow.yaml", "--db", str(tmp_path / "s.duckdb"), "--json",
              "--out-dir", str(tmp_path / "out"), cwd=package)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    assert result["metrics"]["scores.k-anonymity"] >= 5
    assert result["metrics"]["scores.acme.class-size"] >= 5
    [out] = result["outputs"]
    assert out["path"] == str(tmp_path / "out" / "acme-demo.jsonl") and out["rows"] == 200
    lines = Path(out["path"]).read_text().splitlines()
    assert len(lines) == 200 and json.loads(lines[0])["_class"] == 0


@pytest.mark.parametrize("name", ["Acme", "1acme", "acme corp", "acme.x", "acme_", "a" * 41, "", "std"])
def test_a_bad_name_is_refused_in_one_line(tmp_path, name):
    res = CliRunner().invoke(main, ["new-plugin", name, "--dir", str(tmp_path)])
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1 and "NAME" in res.output
    assert not any(tmp_path.iterdir())


def test_an_existing_folder_is_never_written_into(tmp_path):
    mine = tmp_path / "anonflow-acme"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    res = CliRunner().invoke(main, ["new-plugin", "acme", "--dir", str(tmp_path)])
    assert res.exit_code == 2 and "already exists" in res.output
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["anonflow-acme"]  # no temporary folder left
    empty = tmp_path / "empty"
    (empty / "anonflow-acme").mkdir(parents=True)
    assert CliRunner().invoke(main, ["new-plugin", "acme", "--dir", str(empty)]).exit_code == 0
    assert (empty / "anonflow-acme" / "pyproject.toml").is_file()


def test_names_with_separators_make_valid_packages(tmp_path):
    target = generate("my-org", tmp_path)
    assert target.name == "anonflow-my-org"
    assert (target / "anonflow_my_org" / "__init__.py").is_file()
    assert 'my-org = "anonflow_my_org"' in (target / "pyproject.toml").read_text()
    assert "my-org.sorted-groups" in (target / "anonflow_my_org" / "algorithm.py").read_text()


HELPERS = textwrap.dedent("""
    import json, sys
    import anonflow_acme
    from anonflow import registry as plugins
    from anonflow import testing
    reg = testing.registry(anonflow_acme)       # the old recipe failed here once installed
    found = {r.name: r.distribution for r in reg if r.name.startswith("acme.")}
    with testing.use_plugins(anonflow_acme):
        result = testing.run_workflow(sys.argv[1] + "/workflow.yaml", sys.argv[2])
    assert plugins._REGISTRY is None
    print(json.dumps({"found": found, "k": result.metrics["scores.k-anonymity"]}))
""")


@pytest.mark.parametrize("installed", [True, False], ids=["installed", "source"])
def test_the_testing_helpers_work_installed_or_not(site, package, tmp_path, installed):
    if not installed:  # a fresh copy: pip left anonflow_acme.egg-info (an entry point) in `package`
        package = generate("acme", tmp_path / "src")
    res = run(site if installed else package, "-c", HELPERS, str(package), str(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out["found"]) == {name for _, name in PLUGINS}
    assert set(out["found"].values()) == {"anonflow-acme" if installed else "(not installed)"}
    assert out["k"] >= 5


def test_registry_skips_a_module_its_entry_point_loaded():
    import anonflow_std

    reg = testing.registry(anonflow_std)  # std is installed: loaded by its entry point already
    assert reg.get("algorithm", "mdav").distribution == "anonflow"
    assert testing.registry(anonflow_std, entry_points=False).get("algorithm", "mdav").distribution == "(not installed)"


def test_use_plugins_restores_the_registry():
    class Extra:
        @hookimpl
        def anonflow_register_metrics(self, register):
            from anonflow_std.privacy.kanonymity import KAnonymity

            class Other(KAnonymity):
                name = "test.other"
            register(Other())

    before = plugins.get_registry()
    with testing.use_plugins(Extra()) as reg:
        assert plugins.get_registry() is reg and reg.has("metric", "test.other")
    assert plugins.get_registry() is before and not before.has("metric", "test.other")


def test_run_workflow_takes_the_text_of_a_workflow(tmp_path):
    (tmp_path / "d.csv").write_text("a,b\n" + "".join(f"{i % 7},{i % 3}\n" for i in range(30)))
    result = testing.run_workflow(textwrap.dedent("""
        name: t
        sources: {d: {path: d.csv}}
        steps:
          typed: {uses: typing, input: d, with: {quasi: {a: continuous, b: continuous}}}
          grouped: {uses: mdav, input: typed, with: {k: 3}}
          scores: {uses: evaluate, input: [typed, grouped], with: {metrics: [k-anonymity]}}
    """), tmp_path, overrides=["grouped.k=4"])
    assert result.status == "succeeded" and result.metrics["scores.k-anonymity"] >= 4


def test_check_claims_catches_a_false_claim():
    from anonflow.api import CLASS, Algorithm, Param

    class Liar(Algorithm):
        name = "test.liar"
        params = (Param("k", "int", min=2),)

        def claims(self, params):
            return {"k-anonymity": {"k": params["k"]}}

        def run(self, table, params, ctx):  # every record alone in its class
            return table.replace(data=table.data.append_column(CLASS, table.data.column("_row")))

    table = testing.typed_table({"age": [30, 31, 32, 33]}, quasi={"age": "continuous"})
    with pytest.raises(AssertionError, match="does not satisfy"):
        testing.check_claims(Liar(), table, {"k": 2})
