"""What a differentially private step declares it spends (``Plugin.privacy_loss``), and where
that declaration goes: checked by the engine before the run begins (a known measure, finite
positive figures, δ in [0, 1), JSON data; one line naming the step and the plugin otherwise),
recorded in the step's summary under ``privacy_loss``, carried by ``run --json`` and the Python
API's ``Result.steps``, printed by ``anonflow runs RUN_ID``; the sources a step spends on are
those its input descends from in the workflow's graph."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest

from anonflow.api import Metric
from anonflow.privacyloss import check_loss
from anonflow.registry import get_registry
from anonflow.runner.plan import build_plan
from anonflow.runner.privacy_budget import dp_steps
from anonflow.store import Store
from anonflow.workflow.spec import load_workflow

from tests.steps.dpmock import Spend, project, register, spend_step
from tests.support.mockplugins import Provider, use


@pytest.mark.parametrize("loss, expected", [
    ("{measure: pure, epsilon: 0.5}", {"measure": "pure", "epsilon": 0.5, "mechanism": "test"}),
    ("{measure: approximate, epsilon: 1, delta: 1.0e-7}",
     {"measure": "approximate", "epsilon": 1.0, "delta": 1e-7, "mechanism": "test"}),
    ("{measure: zcdp, rho: 0.125}", {"measure": "zcdp", "rho": 0.125, "mechanism": "test"}),
])
def test_the_declared_loss_is_in_the_summary_the_json_and_runs(cli, tmp_path, loss, expected):
    register()
    wf = project(tmp_path, spend_step("noisy", loss))
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    steps = {s["step"]: s for s in json.loads(res.output)["steps"]}
    assert steps["noisy"]["privacy_loss"] == expected
    assert "privacy_loss" not in steps["typed"] and "privacy_loss" not in steps["noisy-csv"]
    with Store(tmp_path / "s.duckdb", read_only=True) as store:
        rec = next(s for s in store.steps(store.run("latest")["run_id"]) if s["step"] == "noisy")
    assert rec["summary"]["privacy_loss"] == expected
    shown = cli("runs", "latest", "--db", tmp_path / "s.duckdb").output
    assert f"      privacy loss: {json.dumps(expected, sort_keys=True)}" in shown.splitlines()


def test_the_python_api_result_carries_it(tmp_path):
    import anonflow

    register()
    wf = project(tmp_path, spend_step("noisy", "{measure: pure, epsilon: 0.5}"))
    with anonflow.load(wf).run(db=tmp_path / "s.duckdb", out_dir=tmp_path / "out") as result:
        steps = {s["step"]: s for s in result.steps}
    assert steps["noisy"]["privacy_loss"] == {"measure": "pure", "epsilon": 0.5, "mechanism": "test"}


@pytest.mark.parametrize("declared, says", [
    ({"measure": "renyi", "alpha": 2}, "'measure' must be one of pure, approximate, zcdp, got 'renyi'"),
    ({"measure": "pure", "epsilon": -1.0}, "epsilon must be > 0, got -1.0"),
    ({"measure": "pure", "epsilon": 0}, "epsilon must be > 0, got 0.0"),
    ({"measure": "pure", "epsilon": math.inf}, "epsilon must be a finite number, got inf"),
    ({"measure": "pure", "epsilon": math.nan}, "epsilon must be a finite number, got nan"),
    ({"measure": "pure", "epsilon": True}, "epsilon must be a finite number, got True"),
    ({"measure": "pure", "epsilon": "1"}, "epsilon must be a finite number, got '1'"),
    ({"measure": "approximate", "epsilon": 1.0, "delta": 1.0}, "delta must be in [0, 1), got 1.0"),
    ({"measure": "approximate", "epsilon": 1.0}, "the approximate measure needs epsilon, delta; 'delta' is missing"),
    ({"measure": "zcdp", "epsilon": 1.0, "rho": 0.5}, "the zcdp measure states rho, not 'epsilon'"),
    ({"measure": "pure", "epsilon": 1.0, "beta": object()}, "not JSON data"),
    ([("measure", "pure")], "expected a mapping with 'measure' one of pure, approximate, zcdp, got list"),
])
def test_a_bad_declaration_is_refused(declared, says):
    with pytest.raises(ValueError) as err:
        check_loss(declared)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("declared, says", [
    ({"measure": "renyi", "alpha": 2}, "'measure' must be one of pure, approximate, zcdp, got 'renyi'"),
    ({"measure": "approximate", "epsilon": 1.0, "delta": 1.0}, "delta must be in [0, 1), got 1.0"),
    ({"measure": "pure", "epsilon": 1.0, "beta": object()}, "not JSON data"),
])
def test_a_bad_declaration_is_one_line_naming_the_step_and_plugin(cli, tmp_path, declared, says):
    register(Spend(declared=declared))
    wf = project(tmp_path, spend_step("noisy", "{}"))
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 1
    line, = res.output.strip().splitlines()
    assert line.startswith(f"Error: {wf}: step 'noisy': algorithm 'test.dp-spend' ((not installed) 1): "
                           "privacy_loss() is not a valid differential-privacy loss: ")
    assert says in line
    with Store(tmp_path / "s.duckdb", read_only=True) as store:  # refused before the run began
        assert store.runs(5) == []


def test_a_declaration_that_raises_is_the_plugins_one_line(cli, tmp_path):
    class Broken(Spend):
        def privacy_loss(self, params):
            raise KeyError("sigma")

    register(Broken())
    wf = project(tmp_path, spend_step("noisy", "{}"))
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 1
    assert res.output.strip() == (f"Error: {wf}: step 'noisy': algorithm 'test.dp-spend' ((not installed) 1): "
                                  "privacy_loss() failed: KeyError: 'sigma'")


def test_a_metric_may_not_declare_a_loss(cli, tmp_path):
    class NoisyCount(Metric):
        name = "test.noisy-count"
        version = "1"
        requires_original = False

        def privacy_loss(self, params):
            return {"measure": "pure", "epsilon": 1.0}

        def compute(self, original, anonymized, params, ctx):
            return {"value": 1.0}

    use(Provider(algorithms=[Spend()], metrics=[NoisyCount()]))
    wf = project(tmp_path, """
        scores:
          uses: evaluate
          input: typed
          with: {metrics: [test.noisy-count]}
        """)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2
    assert res.output.strip() == (f"Error: {wf}: step 'scores': metric 'test.noisy-count' declares a "
                                  "differential-privacy loss; an evaluate step is not charged to the privacy budget: "
                                  "compute it in an algorithm or publish step")


def test_the_sources_a_step_spends_on_come_from_the_graph(tmp_path):
    """Two sources: ``a`` feeds the DP step through typing; ``b`` feeds only a plain step;
    ``c`` is a table the DP step's input step names by a parameter of kind ``step`` (here
    the evaluate step's two inputs stand for it: both are ancestors of what reads them)."""
    register()
    (tmp_path / "a.csv").write_text("age,zip\n" + "".join(f"{i},{i % 3}\n" for i in range(20)))
    (tmp_path / "b.csv").write_text("age,zip\n" + "".join(f"{i + 1},{i % 4}\n" for i in range(20)))
    wf = tmp_path / "wf.yaml"
    wf.write_text(textwrap.dedent("""\
        sources:
          a: {path: a.csv}
          b: {path: b.csv}
        steps:
          ta: {uses: typing, input: a, with: {quasi: [age, zip]}}
          tb: {uses: typing, input: b, with: {quasi: [age, zip]}}
          spend-a: {uses: test.dp-spend, input: ta, with: {measure: pure, epsilon: 1}}
          plain-b: {uses: test.dp-spend, input: tb, with: {measure: zcdp, rho: 0.5}}
          again: {uses: test.dp-spend, input: spend-a, with: {measure: pure, epsilon: 0.25}}
        """))
    plan = build_plan(load_workflow(wf), get_registry())
    found = dp_steps(plan, get_registry())
    assert {n: d.sources for n, d in found.items()} == {"spend-a": ("a",), "plain-b": ("b",), "again": ("a",)}
    assert found["again"].loss == {"measure": "pure", "epsilon": 0.25, "mechanism": "test"}


def test_a_workflow_without_a_dp_step_is_unaffected(cli, tmp_path, monkeypatch):
    """No ledger row, no budget row, no ``privacy_loss``, the same bytes twice, and nothing
    composed (so OpenDP is never loaded: composing is the only way to it), even with a budget."""
    import anonflow.runner.privacy_budget as budget

    def never():
        raise AssertionError("a workflow without a DP step composed a spend")

    monkeypatch.setattr(budget, "_compose", never)
    wf = project(tmp_path, """
        grouped: {uses: mdav, input: typed, with: {k: 3}}
        out: {uses: publish, input: grouped, with: {publisher: csv, path: out.csv}}
        """, budget="{epsilon: 1.0}")
    for db in ("s1", "s2"):
        res = cli("run", wf, "--db", tmp_path / f"{db}.duckdb", "--json", "--out-dir", tmp_path / db)
        assert res.exit_code == 0, res.output
        assert all("privacy_loss" not in s for s in json.loads(res.output)["steps"])
    assert (tmp_path / "s1" / "out.csv").read_bytes() == (tmp_path / "s2" / "out.csv").read_bytes()
    with Store(tmp_path / "s1.duckdb", read_only=True) as store:
        assert store.charges() == [] and store.privacy_accounts() == []


def test_the_engine_loads_no_opendp_until_it_composes():
    """Importing the engine, its CLI and the runner never loads OpenDP (a second to import)."""
    script = ("import sys, anonflow.cli, anonflow.runner.privacy_budget, anonflow.session; "
              "print('opendp' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
