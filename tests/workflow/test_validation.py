"""Every invalid workflow is rejected before anything runs, with a one-line message."""

import pytest

from anonflow.runner.plan import build_plan
from anonflow.errors import InputError, WorkflowError
from anonflow.registry import get_registry
from anonflow.workflow.spec import load_workflow, parse_override

from tests.support.helpers import census_workflow, write


def plan_of(path, *overrides):
    return build_plan(load_workflow(path, overrides), get_registry())


def error_of(path, *overrides) -> str:
    with pytest.raises(InputError) as info:
        plan_of(path, *overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_census_workflow_is_valid_and_ordered(project):
    plan = plan_of(census_workflow(project))
    assert plan.order == ["census", "typed", "grouped", "scores", "published"]
    assert plan.nodes["grouped"].params == {"k": 5, "standardize": True}


def test_publishing_waits_for_evaluation_even_when_declared_first(project):
    path = write(project / "wf.yaml", """
        sources: {census: {path: data/sdcmicro/CASCrefmicrodata.csv}}
        steps:
          published: {uses: publish, input: grouped, with: {publisher: csv, path: x.csv}}
          typed: {uses: typing, input: census, with: {quasi: [AGI, FICA]}}
          grouped: {uses: mdav, input: typed, with: {k: 3}}
          scores: {uses: evaluate, input: grouped, with: {metrics: [k-anonymity]}}
    """)
    assert plan_of(path).order == ["census", "typed", "grouped", "scores", "published"]


def test_set_overrides_a_parameter_with_a_typed_value(project):
    plan = plan_of(census_workflow(project), "grouped.k=10")
    assert plan.nodes["grouped"].params["k"] == 10
    assert parse_override("a.b=[x, y]") == ("a", "b", ["x", "y"])


def test_cycle_is_named(project):
    path = write(project / "wf.yaml", """
        sources: {census: {path: data/sdcmicro/CASCrefmicrodata.csv}}
        steps:
          typed: {uses: typing, input: census, with: {quasi: [AGI]}}
          a: {uses: mdav, input: b, with: {k: 3}}
          b: {uses: mdav, input: a, with: {k: 3}}
    """)
    assert "the steps form a cycle: " in error_of(path)
    assert "a -> b -> a" in error_of(path) or "b -> a -> b" in error_of(path)


def test_a_dotted_set_changes_one_key_of_a_mapping_parameter(project):
    from anonflow.workflow.spec import load_workflow

    wf = census_workflow(project)
    spec = load_workflow(wf, ["scores.thresholds.sse-il.max=30", "scores.thresholds.sse-il.min=1"])
    assert spec.steps["scores"].params["thresholds"]["sse-il"] == {"max": 30, "min": 1}
    spec = load_workflow(wf, ["grouped.k=7"])
    assert spec.steps["grouped"].params["k"] == 7
    message = error_of(wf, "grouped.k.x=1")
    assert "--set grouped.k.x: grouped.k is 5, not a mapping, so it has no key 'x'" in message


@pytest.mark.parametrize("overrides, fragment", [
    (("grouped.k=1",), "step 'grouped': parameter 'k': expected an integer >= 2, got 1"),
    (("grouped.kk=3",), "step 'grouped': unknown parameter 'kk' (did you mean 'k'?)"),
    (("grouped.k=five",), "expected an integer >= 2, got 'five'"),
    (("nostep.k=3",), "--set nostep.k: no step named 'nostep'"),
    (("published.publisher=parquett",), "unknown publisher 'parquett' (did you mean 'parquet'?)"),
    (("published.pth=x",), "publisher 'parquet': unknown parameter 'pth' (did you mean 'path'?)"),
    (("scores.metrics=[sse-ill]",), "unknown metric 'sse-ill' (did you mean 'sse-il'?)"),
    (("scores.thresholds={sse: {max: 3}}",), "threshold 'sse' names no value of the listed metrics"),
    (("typed.quasi=[AGI, NOPE]",), "column 'NOPE' is not in input 'census'"),
    (("typed.quasi=[AGII]",), "(did you mean 'AGI'?)"),
    (("typed.quasi={AGI: continous}",), "type must be one of continuous, ordinal, nominal, semantic, got 'continous'"),
    (("typed.quasi={AGI: ordinal}",), "an ordinal column needs 'order'"),
])
def test_bad_parameters_are_rejected_with_the_step_and_parameter(project, overrides, fragment):
    message = error_of(census_workflow(project), *overrides)
    assert fragment in message
    assert "wf.yaml" in message


def test_unknown_algorithm_suggests_the_closest(project):
    path = census_workflow(project)
    path.write_text(path.read_text().replace("uses: mdav", "uses: mdva"))
    assert "unknown step or algorithm 'mdva' (did you mean 'mdav'?)" in error_of(path)


def test_missing_input_is_named(project):
    path = census_workflow(project)
    path.write_text(path.read_text().replace("input: typed\n", "input: typd\n", 1))
    assert "input 'typd' is neither a source nor a step (did you mean 'typed'?)" in error_of(path)


def test_algorithm_needs_a_typed_input(project):
    path = census_workflow(project)
    path.write_text(path.read_text().replace("input: typed\n", "input: census\n", 1))
    assert "needs a typed table: add a typing step between 'census' and 'grouped'" in error_of(path)


def test_evaluate_output_is_not_a_table(project):
    path = census_workflow(project, extra="""
        again: {uses: mdav, input: scores, with: {k: 3}}
    """)
    assert "input 'scores' is a evaluate step and produces no table" in error_of(path)


def test_metric_that_needs_the_original_needs_two_inputs(project):
    path = census_workflow(project)
    path.write_text(path.read_text().replace("input: [typed, grouped]", "input: grouped"))
    assert "metric 'sse-il' compares with the original table" in error_of(path)


def test_missing_source_file(project):
    path = census_workflow(project)
    path.write_text(path.read_text().replace("CASCrefmicrodata.csv", "nothere.csv"))
    message = error_of(path)
    assert "source 'census'" in message and "file not found" in message and "nothere.csv" in message


@pytest.mark.parametrize("text, fragment", [
    ("steps: [a, b]\n", "'steps' must be a non-empty mapping"),
    ("name: x\nsteps: {a: {uses: typing}}\nsorces: {}\n", "unknown key 'sorces' (did you mean 'sources'?)"),
    ("steps:\n  a: {uses: typing, inptu: x}\n", "step 'a': unknown key 'inptu' (did you mean 'input'?)"),
    ("steps:\n  a: {input: x}\n", "step 'a': missing 'uses'"),
    ("seed: -3\nsteps: {a: {uses: typing}}\n", "'seed' must be an integer from 0 to"),
    ("steps: {a: {uses: typing}\n", "not valid YAML"),
    ("sources: {s: {path: x.xlsx}}\nsteps: {a: {uses: typing}}\n", "cannot tell the format of 'x.xlsx'"),
])
def test_malformed_files(tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(WorkflowError) as info:
        load_workflow(path)
    assert fragment in str(info.value)
    assert str(path) in str(info.value)


def test_missing_workflow_file(tmp_path):
    with pytest.raises(WorkflowError, match="workflow file not found"):
        load_workflow(tmp_path / "none.yaml")
