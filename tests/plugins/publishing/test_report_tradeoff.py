"""The report's trade-off plot of a sweep: which runs are on the Pareto frontier, which pair of
metrics is plotted, and the release's ``tradeoff`` parameter from a workflow file."""

from __future__ import annotations

import json

import pytest

from anonflow.api import Metric, better_direction
from anonflow_std.publishing.report_sweep import tradeoff_pair
from anonflow_std.publishing.report_plots import pareto_front

from tests.support.helpers import census_workflow


def test_pareto_front_on_a_hand_made_sweep():
    # (risk, loss), both lower-is-better: (3, 4) is dominated by (2, 3) (lower on both);
    # (1, 5), (2, 3) and (4, 1) each win on one axis against every other point
    assert pareto_front([1, 2, 3, 4], [5, 3, 4, 1], False, False) == [True, True, False, True]
    # utility higher-is-better (accuracy): now (1, 5) beats everything on both axes but risk...
    # (1, 5) has the lowest risk and the highest accuracy, so it dominates all the others
    assert pareto_front([1, 2, 3, 4], [5, 3, 4, 1], False, True) == [True, False, False, False]
    # a tie on both axes dominates neither point; a tie on one axis and a loss on the other does
    assert pareto_front([1, 1, 1], [2, 2, 3], False, False) == [True, True, False]


def test_better_direction_defaults_by_category_and_follows_a_metric_s_own_word():
    class Loss(Metric):
        category = "utility"

    class Risk(Metric):
        category = "risk"

    class Model(Metric):
        category = "privacy"

    class Accuracy(Metric):
        category = "utility"
        better = "higher"

    assert [better_direction(m()) for m in (Loss, Risk, Model, Accuracy)] == ["lower", "lower", "higher", "higher"]


def _sweep(**metrics):
    cats = {"risk.dbrl": "risk", "risk.k-anonymity": "privacy", "risk.uniq": "risk",
            "utility.il1s": "utility", "utility.acc": "utility"}
    names = list(metrics)
    points = [{"params": {"n.noise": i}, "metrics": {k: metrics[k][i] for k in names}} for i in range(3)]
    return {"parameters": ["n.noise"], "metrics": {k: cats[k] for k in names}, "points": points}


def test_the_default_pair_is_the_first_risk_and_utility_metric_that_vary():
    sw = _sweep(**{"risk.uniq": [0, 0, 0], "risk.dbrl": [0.3, 0.1, 0.0], "risk.k-anonymity": [5, 5, 5],
                   "utility.acc": [0.8, 0.8, 0.8], "utility.il1s": [0.0, 0.2, 0.5]})
    # risk.uniq and utility.acc come first but are constant: they show no trade-off
    assert tradeoff_pair(sw) == ("risk.dbrl", "utility.il1s")
    # all constant: the first of each kind still
    flat = _sweep(**{"risk.uniq": [0, 0, 0], "utility.acc": [1, 1, 1]})
    assert tradeoff_pair(flat) == ("risk.uniq", "utility.acc")
    # no risk measure: a privacy check stands in; no utility metric: no pair
    assert tradeoff_pair(_sweep(**{"risk.k-anonymity": [3, 5, 9], "utility.il1s": [1, 2, 3]})) == (
        "risk.k-anonymity", "utility.il1s")
    assert tradeoff_pair(_sweep(**{"risk.dbrl": [1, 2, 3]})) is None


def test_a_chosen_pair_is_matched_by_metric_or_step_name_and_an_unknown_one_said():
    sw = _sweep(**{"risk.dbrl": [0.3, 0.1, 0.0], "risk.uniq": [0.2, 0.1, 0.1], "utility.il1s": [0, 1, 2]})
    assert tradeoff_pair(sw, ["uniq", "utility.il1s"]) == ("risk.uniq", "utility.il1s")
    said = tradeoff_pair(sw, ["dbrl", "pmse"])
    assert isinstance(said, str) and "'pmse'" in said and "utility.il1s" in said


def _sweep_release(cli, project, tradeoff: str) -> str:
    extra = f"""
        release: {{uses: publish, input: grouped, with: {{publisher: release, path: release{tradeoff}}}}}
    """
    wf = census_workflow(project, extra=extra)
    for k in (3, 10):
        res = cli("run", wf, "--db", project / "s.duckdb", "--set", f"grouped.k={k}", "--out-dir", project / f"k{k}")
        assert res.exit_code == 0, res.output
    return (project / "k10" / "release" / "report.html").read_text()


def test_a_release_plots_the_pair_its_workflow_names(cli, project):
    page = _sweep_release(cli, project, ", tradeoff: [k-anonymity, scores.sse-il]")
    assert 'id="tradeoff"' in page and "the release's <code>tradeoff</code>" in page
    assert "<code>scores.k-anonymity</code> (higher is better)" in page
    # k = 3 and k = 10 each win on one axis (sse-il lower at k = 3, k higher at 10): both on the frontier
    assert page.count("<td>yes</td>") == 2
    assert 'aria-label="scores.sse-il against scores.k-anonymity for each run of the sweep"' in page
    # the page made later from the store (anonflow report) reads the release's parameter too
    runs = cli("runs", "--db", project / "s.duckdb", "--json")
    latest = json.loads(runs.output)[0]["run_id"]
    assert cli("report", latest, "--db", project / "s.duckdb").output == page


def test_a_release_naming_a_metric_the_sweep_lacks_says_so_in_its_page(cli, project):
    page = _sweep_release(cli, project, ", tradeoff: [k-anonymity, il1s]")
    assert "names &#x27;il1s&#x27;, which is not a metric every run of the sweep evaluated" in page
    assert 'id="tradeoff"' not in page


@pytest.mark.parametrize("value", ["[k-anonymity]", "[sse-il, sse-il]", "[a, b, c]"])
def test_a_tradeoff_of_other_than_two_metrics_is_refused_in_one_line(cli, project, value):
    extra = f"""
        release: {{uses: publish, input: grouped, with: {{publisher: release, path: release, tradeoff: {value}}}}}
    """
    res = cli("run", census_workflow(project, extra=extra), "--db", project / "s.duckdb")
    assert res.exit_code == 2
    assert "'tradeoff' names two metrics" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (project / "out").exists()
