"""The plugin system: registration, validation of plugins, and the engine's guarantees
around them. Mock plugins are registered directly with the plugin manager."""

import ast
import inspect
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from anonflow import hookspecs
from anonflow import registry as plugins
from anonflow.api import CLASS, Algorithm, Hierarchy, HierarchyBuilder, Metric, Output, Param, Publisher, hookimpl
from anonflow.errors import PluginError

from tests.support.helpers import census_workflow
from tests.support.mockplugins import Provider, census_using, use

ROOT = Path(__file__).resolve().parents[2]
HOOKS = [name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("anonflow_")]


class DropsARecord(Algorithm):
    name = "test.drops"
    version = "0.0.1"

    def run(self, table, params, ctx):
        data = table.data.slice(1).append_column(CLASS, pa.array([0] * (table.num_rows - 1), pa.int64()))
        return table.replace(data=data)


class SuppressesFive(Algorithm):
    """Publishes records unchanged in one class, except the first five, which it suppresses."""
    name = "test.suppress"
    suppresses = True  # else the engine holds it to no suppression at all

    def run(self, table, params, ctx):
        cls = pa.array([None] * 5 + [0] * (table.num_rows - 5), pa.int64())
        return table.replace(data=table.data.append_column(CLASS, cls))


def test_suppressed_records_are_split_off_counted_and_kept(cli, project):
    import duckdb

    wf = census_using(project, SuppressesFive(), "{}")
    db = project / "s.duckdb"
    res = cli("run", wf, "--db", db, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    grouped = next(s for s in out["steps"] if s["step"] == "grouped")
    assert grouped["rows"] == 1075
    assert any("5 record(s) suppressed" in n for n in grouped["notes"])
    assert out["metrics"]["scores.sse-il"] == 0.0  # the published records are compared with their originals
    con = duckdb.connect(str(db), read_only=True)
    published = {r[0] for r in con.execute('SELECT _row FROM steps."census-test.grouped"').fetchall()}
    suppressed = {r[0] for r in con.execute('SELECT _row FROM steps."census-test.grouped.suppressed"').fetchall()}
    assert suppressed == set(range(5)) and not published & suppressed
    assert published | suppressed == set(range(1080))
    detail = json.loads(cli("runs", out["run_id"], "--db", db, "--json").output)
    step = next(s for s in detail["steps"] if s["step"] == "grouped")
    assert step["summary"]["suppressed"] == 5


class Crashes(Algorithm):
    name = "test.crashes"
    version = "9.9"

    def run(self, table, params, ctx):
        raise ZeroDivisionError("boom")


class OneClass(Algorithm):
    """Puts everything in one class: claims k-anonymity for the table size."""
    name = "test.one-class"
    version = "1"
    params = (Param("claim", "int", default=2, min=1),)

    def claims(self, params):
        return {"k-anonymity": {"k": params["claim"]}}

    def run(self, table, params, ctx):
        data = table.data
        for q in table.typing.quasi:
            data = data.set_column(data.column_names.index(q), q, pa.array([0.0] * table.num_rows))
        return table.replace(data=data.append_column(CLASS, pa.array([0] * table.num_rows, pa.int64())))


class CountRows(Metric):
    name = "test.rows"
    requires_original = False

    def compute(self, original, anonymized, params, ctx):
        return {"test.rows": ctx.sql("SELECT count(*) FROM t", t=anonymized.data).to_pylist()[0]["count_star()"]}


class Memory(Publisher):
    name = "test.memory"
    seen: list = []

    def publish(self, table, params, ctx):
        Memory.seen.append(table)
        return [Output("memory://x", "0" * 64, table.num_rows)]


def test_every_hook_kind_registers_and_runs(cli, project):
    use(Provider(algorithms=[OneClass()], metrics=[CountRows()], publishers=[Memory()]))
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("uses: mdav", "uses: test.one-class")
                  .replace("[sse-il, k-anonymity]", "[test.rows, k-anonymity]")
                  .replace("{publisher: parquet, path: census.parquet}", "{publisher: test.memory}")
                  .replace("{k: 5}", "{}"))
    Memory.seen.clear()
    res = cli("run", wf, "--db", project / "s.duckdb", "--json", "--set", "grouped.claim=1080")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["metrics"]["scores.test.rows"] == 1080
    assert out["metrics"]["scores.k-anonymity"] == 1080
    assert out["outputs"] == [{"path": "memory://x", "sha256": "0" * 64, "rows": 1080}]
    published = Memory.seen[0]
    assert "_row" not in published.columns  # row ids are not published by default
    listed = {p["name"]: p for p in json.loads(cli("plugins", "--json").output)}
    assert listed["test.one-class"]["distribution"] == "(not installed)"


class Halves(HierarchyBuilder):
    """Numbers -> below / above the median -> *."""
    name = "test.halves"

    def build(self, column, values, params, ctx):
        import numpy as np
        x = values.to_numpy()
        mid = np.median(x)
        return Hierarchy.from_levels(column, [values, ["low" if v <= mid else "high" for v in x], ["*"] * len(x)])


def test_a_third_party_hierarchy_builder_is_used_by_the_hierarchy_step(cli, project):
    use(Provider(builders=[Halves()]))
    wf = census_workflow(project, extra="""
        hier: {uses: hierarchy, input: typed, with: {AGI: {test.halves: {}}}}
    """)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 0, res.output
    shown = cli("hierarchy", "show", "hier", "--db", project / "s.duckdb")
    assert "AGI" in shown.output and "test.halves" in shown.output


def test_a_broken_claim_fails_the_run(cli, project):
    wf = census_using(project, OneClass(), "{claim: 2000}")
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 1
    # the claim is checked where it is made, before any evaluate step
    assert "step 'grouped': algorithm 'test.one-class' claims k-anonymity {\"k\":2000} but its output does not " \
           "satisfy it (k-anonymity = 1080, k-anonymity.classes = 1, k-anonymity.k = 2000, " \
           "k-anonymity.violating_classes = 1)" in res.output
    assert not (project / "out").exists()


def test_an_algorithm_cannot_lose_records(cli, project):
    wf = census_using(project, DropsARecord(), "{}")
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 1
    assert "returned 1079 records for 1080 input records" in res.output


def test_a_crashing_plugin_is_named(cli, project):
    wf = census_using(project, Crashes(), "{}")
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 1
    assert "step 'grouped': test.crashes ((not installed) 9.9) failed: ZeroDivisionError: boom" in res.output
    assert "Traceback" not in res.output


def test_duplicate_names_are_refused():
    with pytest.raises(PluginError, match="metric name 'sse-il' is registered twice"):
        class Dup(CountRows):
            name = "sse-il"
        use(Provider(metrics=[Dup()]))


def test_registering_the_wrong_kind_is_refused():
    with pytest.raises(PluginError, match="registered .* as a metric, but it is not an instance of anonflow.api.Metric"):
        use(Provider(metrics=[OneClass()]))


def test_bad_names_are_refused():
    class Bad(CountRows):
        name = "Has Spaces"
    with pytest.raises(PluginError, match="must be lower-case"):
        use(Provider(metrics=[Bad()]))


def test_a_plugin_that_raises_while_registering_is_named():
    class Broken:
        @hookimpl
        def anonflow_register_metrics(self, register):
            raise RuntimeError("half installed")
    with pytest.raises(PluginError, match="plugin 'mock0' .* failed while registering its metrics: RuntimeError"):
        use(Broken())


def test_misspelt_hook_names_are_caught():
    class Typo:
        @hookimpl
        def anonflow_register_metric(self, register):  # missing the s
            pass
    pm, _ = plugins.plugin_manager()
    pm.register(Typo())
    from pluggy import PluginValidationError
    with pytest.raises(PluginValidationError):
        pm.check_pending()


def test_anonflow_plugins_env_narrows_loading(monkeypatch, cli):
    monkeypatch.setenv("ANONFLOW_PLUGINS", "")
    plugins.set_registry(None)
    assert json.loads(cli("plugins", "--json").output) == []


# -- meta tests: the engine's boundaries and the docs stay honest ----------------------


def test_engine_never_imports_the_first_party_plugins():
    for path in (ROOT / "anonflow").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            assert not any(n.split(".")[0] in ("anonflow_std", "plugins") for n in names), f"{path} imports {names}"


def test_only_the_store_talks_to_duckdb():
    importers = set()
    for path in (ROOT / "anonflow").rglob("*.py"):
        if re.search(r"^\s*(import duckdb|from duckdb)", path.read_text(), flags=re.M):
            importers.add(path.relative_to(ROOT / "anonflow").parts[0])
    # the store, the source kinds that read into it, the sandbox that opens every connection;
    # the run loop only reads duckdb.__version__ (for the run's record of versions)
    assert importers <= {"store", "sources", "sandbox.py", "runner"}
    for path in (ROOT / "anonflow" / "runner").rglob("*.py"):
        assert "duckdb." not in path.read_text().replace("duckdb.__version__", ""), path


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented(hook):
    assert f"`{hook}" in (ROOT / "docs" / "plugins.md").read_text()
    assert getattr(hookspecs, hook).__doc__.strip()


def spy_source():
    """A source kind ``test.census``: a CSV file, read as anonflow's own csv kind reads it."""
    from anonflow.sources.csvfile import CsvSource

    class Census(CsvSource):
        name = "test.census"

    return Census()


def spy_plugin(called):
    """A plugin implementing every hook declared in anonflow/hookspecs.py, whatever they are:
    each implementation records its call; the registration hooks also register one mock
    object of their kind. A hook added to hookspecs.py gets a recording implementation too."""
    objects = {"anonflow_register_algorithms": OneClass(), "anonflow_register_metrics": CountRows(),
               "anonflow_register_publishers": Memory(), "anonflow_register_hierarchy_builders": Halves(),
               "anonflow_register_sources": spy_source()}
    ns = {}
    for hook in HOOKS:
        def impl(register=None, _hook=hook):
            called.append((_hook, "spy"))
            if _hook in objects:
                register(objects[_hook])
        impl.__name__ = hook
        ns[hook] = staticmethod(hookimpl(impl))
    return type("Spy", (), ns)()


def test_every_hookspec_is_called_by_the_engine_and_what_it_registers_is_used(cli, project):
    """Hook calls are recorded, not looked up in the test's text: every implementation in the
    plugin manager (the spy's and the installed first-party plugin's) is wrapped to record its
    call while the registry is built, and a workflow then uses what each hook registered.
    (The registry calls each implementation itself, to attribute what it registers to its
    distribution, so pluggy's hook-call monitoring, which sees calls through ``pm.hook``,
    would see nothing.)"""
    assert HOOKS  # hookspecs.py declares hooks
    called = []
    pm, dists = plugins.plugin_manager()
    pm.register(spy_plugin(called), name="spy")
    for hook in HOOKS:
        for impl in getattr(pm.hook, hook).get_hookimpls():
            inner = impl.function

            def recorded(*args, _inner=inner, _hook=hook, _plugin=impl.plugin_name, **kwargs):
                called.append((_hook, _plugin))
                return _inner(*args, **kwargs)
            impl.function = recorded
    plugins.set_registry(plugins.Registry(pm, dists))
    # every hookspec was called, on the spy and on the first-party plugin ("std")
    assert sorted({h for h, p in called if p == "spy"}) == sorted(HOOKS)
    # (anonflow's own source kinds are the engine's, anonflow.sources: the first-party plugin has none)
    assert sorted({h for h, p in called if p == "std"}) == sorted(h for h in HOOKS if h != "anonflow_register_sources")
    # and what each hook registered is what the engine then runs
    wf = census_workflow(project, extra="""
        hier: {uses: hierarchy, input: typed, with: {AGI: {test.halves: {}}}}
    """)
    wf.write_text(wf.read_text().replace("uses: mdav", "uses: test.one-class")
                  .replace("[sse-il, k-anonymity]", "[test.rows, k-anonymity]")
                  .replace("{publisher: parquet, path: census.parquet}", "{publisher: test.memory}")
                  .replace("{k: 5}", "{}")
                  .replace("{path: data/sdcmicro/", "{format: test.census, path: data/sdcmicro/"))
    Memory.seen.clear()
    db = project / "s.duckdb"
    res = cli("run", wf, "--db", db, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    uses = {s["step"]: s["uses"] for s in out["steps"] if s["status"] == "succeeded"}
    assert uses["grouped"] == "test.one-class" and uses["hier"] == "hierarchy" and uses["census"] == "test.census"
    assert out["metrics"]["scores.test.rows"] == 1080  # the spy's metric
    assert len(Memory.seen) == 1  # the spy's publisher
    assert "test.halves" in cli("hierarchy", "show", "hier", "--db", db).output  # the spy's builder
