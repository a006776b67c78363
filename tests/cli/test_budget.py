"""``anonflow budget``: per source, the budget (the latest a workflow declared), what all runs
spent (composed, the composition named) and what is left; a source by name or content-hash
prefix; and a workflow's ``budget:`` held to its format in one line."""

from __future__ import annotations

import json

import pytest

from anonflow.store import Store

from tests.steps.dpmock import project, register, spend_step


def _spend(cli, tmp_path, loss, budget="{epsilon: 2.0, delta: 1.0e-6}", **kw):
    wf = project(tmp_path, spend_step(kw.pop("step", "noisy"), loss), budget=budget, **kw)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--no-cache")
    assert res.exit_code == 0, res.output
    return res


def test_budget_shows_budget_spent_and_left(cli, tmp_path):
    register()
    _spend(cli, tmp_path, "{measure: pure, epsilon: 0.5}")
    _spend(cli, tmp_path, "{measure: approximate, epsilon: 0.25, delta: 2.0e-7}")
    res = cli("budget", "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("source people  sha256 ")
    assert lines[1].startswith("  budget  ε=2, δ=1e-06 (declared by run ")
    # 0.5 + 0.25 = 0.75; δ = 0 + 2e-7
    assert lines[2:] == ["  spent   ε=0.75, δ=2e-07 (basic composition of 2 charge(s))",
                         "          as charged: pure ε=0.5; approximate ε=0.25, δ=2e-07; zCDP ρ=0",
                         "  left    ε=1.25, δ=8e-07"]
    got = json.loads(cli("budget", "--db", tmp_path / "s.duckdb", "--json").output)
    assert [(a["source"], a["charges"], a["spent"]["composition"]) for a in got] == [("people", 2, "basic")]
    assert got[0]["left"] == {"epsilon": pytest.approx(1.25), "delta": pytest.approx(8e-7)}
    assert got[0]["spent"]["epsilon"] == pytest.approx(0.75)
    # the Python API reads the same ledger: anonflow.budget is `anonflow budget --json`
    import anonflow

    assert json.loads(json.dumps(anonflow.budget(tmp_path / "s.duckdb"), default=str)) == got


def test_a_source_by_name_or_hash_prefix_and_an_unknown_one(cli, tmp_path):
    register()
    _spend(cli, tmp_path, "{measure: zcdp, rho: 0.05}", budget=None)
    (tmp_path / "b.csv").write_text("age,zip,income\n1,2,3\n4,5,6\n")
    _spend(cli, tmp_path, "{measure: pure, epsilon: 1}", data="b.csv", name="b.yaml")
    db = tmp_path / "s.duckdb"
    both = json.loads(cli("budget", "--db", db, "--json").output)
    assert [a["source"] for a in both] == ["people", "people"]  # two contents, one name: two accounts
    first = both[0]
    by_hash = json.loads(cli("budget", first["source_hash"][:12], "--db", db, "--json").output)
    assert [a["source_hash"] for a in by_hash] == [first["source_hash"]]
    res = cli("budget", "peeple", "--db", db)
    assert res.exit_code == 2
    assert res.output.strip() == ("Error: no source 'peeple' in the privacy ledger (did you mean 'people'?); "
                                  "it knows people")


def test_a_zcdp_spend_without_a_budget_is_shown_as_rho(cli, tmp_path):
    register()
    _spend(cli, tmp_path, "{measure: zcdp, rho: 0.05}", budget=None)
    lines = cli("budget", "people", "--db", tmp_path / "s.duckdb").output.splitlines()
    assert lines[1:] == ["  budget  none declared (a source's budget: in the workflow file)",
                         "  spent   zCDP ρ=0.05 and ε=0, δ=0 in 1 charge(s); no budget declares the δ to state "
                         "ρ as (ε, δ) at"]


def test_an_empty_ledger(cli, tmp_path):
    with Store(tmp_path / "none.duckdb"):  # a store with no run
        pass
    res = cli("budget", "--db", tmp_path / "none.duckdb")
    assert res.exit_code == 0
    assert res.output.strip() == f"the privacy ledger of {tmp_path / 'none.duckdb'} is empty: no run has spent " \
                                 "differential privacy"


@pytest.mark.parametrize("budget, says", [
    ("{epsilon: 0}", "budget.epsilon must be a number > 0, got 0"),
    ("{epsilon: -1}", "budget.epsilon must be a number > 0, got -1"),
    ("{epsilon: 1, delta: 1}", "budget.delta must be a number in [0, 1), got 1"),
    ("{epsilon: 1, delta: 1e-6}", "budget.delta must be a number, got the text '1e-6' (YAML reads a number with an "
                                  "exponent as text unless it has a point: write 1.0e-6)"),
    ("{epsilon: .inf}", "budget.epsilon holds"),
    ("{delta: 0.1}", "budget: missing 'epsilon'"),
    ("{epsilon: 1, rho: 0.5}", "unknown key 'rho'"),
    ("2.0", "budget: expected {epsilon: NUMBER, delta: NUMBER}"),
])
def test_a_bad_budget_is_one_line(cli, tmp_path, budget, says):
    register()
    wf = project(tmp_path, spend_step("noisy", "{measure: pure, epsilon: 1}"), budget=budget)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2
    line, = res.output.strip().splitlines()
    assert line.startswith(f"Error: {wf}: line ") and "source 'people'" in line and says in line, line
