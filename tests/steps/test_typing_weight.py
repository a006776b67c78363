"""The typing step's ``weight`` role (each record's sampling weight) and ``individual-risk``
picking it up: the column is checked (numeric, finite, > 0, the missing-value policy),
published unchanged, and weighs the records of sdcMicro's individual risk unless the metric is
given ``weight`` or ``population_size``."""

from __future__ import annotations

import json
import math
import textwrap

import pyarrow as pa
import pytest

from anonflow.steps import TypingStep
from anonflow.errors import InputError, WorkflowError
from anonflow.params import validate_params
from anonflow.schema import ROLES, Attribute, Typing
from anonflow.testing import make_context

from anonflow_std.risk.individual import IndividualRisk, weight_source

STEP = TypingStep()
WHERE = "wf.yaml: step 'typed'"


def run(columns, ctx=None, **given):
    n = len(next(iter(columns.values())))
    table = pa.table({"_row": pa.array(range(n), pa.int64()), **{k: pa.array(v) for k, v in columns.items()}})
    params = validate_params(STEP.params, given)
    return STEP.run(table, params, ctx or make_context(), WHERE)


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# -- the typing ------------------------------------------------------------------------------

def test_weight_is_a_role_published_unchanged():
    assert "weight" in ROLES
    w = [1.5, 2.0, 10.0]
    typed, summary = run({"sex": ["F", "M", "F"], "w": w, "note": ["a", "b", "c"]}, quasi=["sex"], weight="w")
    assert typed.typing.weight == "w"
    attr = typed.typing.get("w")
    assert (attr.role, attr.type) == ("weight", None)
    assert typed.columns == ["_row", "sex", "w"]  # 'note' named in no role: dropped
    assert typed.data.column("w").to_pylist() == w
    assert typed.data.column("w").type == pa.float64()
    assert summary["typing"] == {"sex": "quasi:nominal", "w": "weight"}
    # integers stay integers
    typed, _ = run({"sex": ["F", "M"], "w": [3, 7]}, quasi=["sex"], weight="w")
    assert typed.data.column("w").to_pylist() == [3, 7] and pa.types.is_integer(typed.data.column("w").type)
    # a typing without the role
    assert run({"sex": ["F", "M"]}, quasi=["sex"])[0].typing.weight is None
    assert Typing((Attribute("a", "quasi", "nominal"),)).weight is None


def test_weight_survives_the_typing_json():
    typed, _ = run({"sex": ["F", "M"], "w": [3.0, 7.0]}, quasi=["sex"], weight="w")
    assert Typing.from_json(json.loads(typed.typing.dumps())).weight == "w"


def test_numeric_text_becomes_double():
    typed, _ = run({"sex": ["F", "M", "F"], "w": ["1.5", " 2", "3e1"]}, quasi=["sex"], weight="w")
    assert typed.data.column("w").type == pa.float64()
    assert typed.data.column("w").to_pylist() == [1.5, 2.0, 30.0]


def test_text_that_is_not_a_number_is_refused_in_one_line():
    with pytest.raises(InputError) as exc:
        run({"sex": ["F", "M", "F"], "w": ["1.5", "2", "many"]}, quasi=["sex"], weight="w")
    assert "weight column 'w' must hold numbers, but record 3 has the value 'many'" in one_line(exc)
    with pytest.raises(InputError, match="weight column 'w' has type bool, which is not numeric"):
        run({"sex": ["F", "M"], "w": [True, True]}, quasi=["sex"], weight="w")


@pytest.mark.parametrize("w, count, first, value", [
    ([2.0, 0.0, 3.0, -1.0], 2, 2, "0.0"),
    ([2, 3, -4, 5], 1, 3, "-4"),
    ([2.0, 3.0, 4.0, math.inf], 1, 4, "inf"),
    (["2", "3", "-0.5", "0"], 2, 3, "'-0.5'"),
])
def test_weights_must_be_finite_and_positive(w, count, first, value):
    with pytest.raises(InputError) as exc:
        run({"sex": ["F", "M", "F", "M"], "w": w}, quasi=["sex"], weight="w")
    message = one_line(exc)
    assert message.startswith(f"{WHERE}: weight column 'w' has {count} record(s) whose weight is not a finite "
                              f"number > 0, the first in record {first} ({value})"), message


def test_missing_weights_follow_the_policy():
    cols = {"sex": ["F", "M", "F", "M"], "w": [2.0, None, 4.0, math.nan]}
    with pytest.raises(InputError) as exc:
        run(cols, quasi=["sex"], weight="w")
    message = one_line(exc)
    assert "column 'w' has 2 missing value(s), the first in record 2; set missing: drop" in message
    assert "a weight column cannot take missing: category" in message
    typed, summary = run(cols, quasi=["sex"], weight="w", missing="drop")
    assert typed.data.column("_row").to_pylist() == [0, 2]
    assert typed.data.column("w").to_pylist() == [2.0, 4.0]
    assert summary["records_dropped_missing"] == 2 and summary["missing_by_column"] == {"w": 2}
    with pytest.raises(InputError) as exc:
        run(cols, quasi=["sex"], weight="w", missing="category")
    assert "weight column 'w' has 2 missing value(s): a sampling weight cannot be a category; use missing: drop" \
        in one_line(exc)
    # text weights: blanks and declared markers are missing too
    text = {"sex": ["F", "M", "F"], "w": ["2", " ", "?"]}
    with pytest.raises(InputError, match="a weight column cannot take missing: category"):
        run(text, quasi=["sex"], weight="w", missing_values=["?"])
    with pytest.raises(InputError, match="sampling weight cannot be a category"):
        run(text, quasi=["sex"], weight="w", missing_values=["?"], missing="category")
    typed, _ = run(text, quasi=["sex"], weight="w", missing_values=["?"], missing="drop")
    assert typed.data.column("w").to_pylist() == [2.0]
    # missing: category still applies to the other columns while the weights are complete
    typed, _ = run({"sex": ["F", None, "M"], "w": [1.0, 2.0, 3.0]}, quasi=["sex"], weight="w", missing="category")
    assert typed.data.column("sex").to_pylist() == ["F", "?", "M"] and typed.typing.weight == "w"


@pytest.mark.parametrize("given, fragment", [
    ({"quasi": ["a", "w"], "weight": "w"}, "column 'w' is given two roles: quasi and weight"),
    ({"quasi": ["a"], "insensitive": ["w"], "weight": "w"}, "column 'w' is given two roles: insensitive and weight"),
])
def test_a_weight_column_takes_no_other_role(given, fragment):
    params = validate_params(STEP.params, given)
    with pytest.raises(WorkflowError, match=fragment):
        STEP.roles(params, WHERE)


def test_weight_must_be_one_column_of_the_input():
    from anonflow.steps import StaticInput
    from anonflow.params import ParamError

    with pytest.raises(ParamError, match="weight"):
        validate_params(STEP.params, {"quasi": ["a"], "weight": ["w", "v"]})
    params = validate_params(STEP.params, {"quasi": ["a"], "weight": "wt"})
    with pytest.raises(WorkflowError, match="column 'wt' is not in input 'src' .did you mean 'w'"):
        STEP.validate(params, [StaticInput("src", ("a", "w"), False)], None, WHERE)
    assert STEP.validate(validate_params(STEP.params, {"quasi": ["a"], "weight": "w"}),
                         [StaticInput("src", ("_row", "a", "w", "x"), False)], None, WHERE) == ("_row", "a", "w")


def test_a_declared_weight_is_not_taken_for_an_identifier():
    # 30 distinct weights in 30 records, in a column whose name says "id": declared, no refusal, no note
    ctx = make_context()
    typed, _ = run({"sex": ["F", "M"] * 15, "person_id": [float(i + 1) for i in range(30)]}, ctx,
                   quasi=["sex"], weight="person_id", others="insensitive")
    assert typed.typing.weight == "person_id"
    assert not any("identifier" in n for n in ctx.notes)
    # the same column undeclared is refused
    with pytest.raises(InputError, match="looks like an identifier"):
        run({"sex": ["F", "M"] * 15, "person_id": [float(i + 1) for i in range(30)]},
            quasi=["sex"], others="insensitive")


# -- individual-risk --------------------------------------------------------------------------

# Keys on the one QI 'key': A (2 records, weights 3 + 5), B (3 records, 2 + 4 + 4), C (1 record, 10).
#   A: f = 2, F = 8,  p = 1/4:  r = p/(1-p) - (p/(1-p))^2 log(1/p) = 1/3 - (1/9) log 4 = 0.17930...
#   B: f = 3, F = 10, p = 3/10: r = p / (f - 1 + p) (approx)        = 0.3 / 2.3 = 3/23  = 0.13043...
#   C: f = 1, F = 10, p = 1/10: r = p/(1-p) log(1/p)                 = (1/9) log 10      = 0.25584...
# expected re-identifications = 2 r_A + 3 r_B + r_C = 1.00575...; global risk = that / 6 = 0.16762...
KEYS = ["A", "A", "B", "B", "B", "C"]
WEIGHTS = [3.0, 5.0, 2.0, 4.0, 4.0, 10.0]
R_A = 1 / 3 - math.log(4) / 9
R_B = 3 / 23
R_C = math.log(10) / 9
EXPECTED = 2 * R_A + 3 * R_B + R_C


def test_hand_computed_constants():
    assert EXPECTED == pytest.approx(1.005748, abs=1e-6)
    assert EXPECTED / 6 == pytest.approx(0.167625, abs=1e-6)


def risk(typed, ctx, **given):
    plugin = IndividualRisk()
    params = validate_params(plugin.params, given)
    plugin.check(params, anonymized=typed)
    return plugin.compute(None, typed, params, ctx)


def weighted_table(ctx, weights=WEIGHTS):
    return run({"key": KEYS, "w": weights, "v": [1.0] * 6}, ctx, quasi=["key"], weight="w",
               insensitive=["v"])[0]


def test_individual_risk_uses_the_typing_weight():
    ctx = make_context()
    typed = weighted_table(ctx)
    assert weight_source(typed, {}) == ("w", "typing")
    values = risk(typed, ctx)
    assert values["individual-risk.expected_reidentifications"] == pytest.approx(EXPECTED, rel=1e-12)
    assert values["individual-risk"] == pytest.approx(EXPECTED / 6, rel=1e-12)
    assert values["individual-risk.max"] == pytest.approx(R_C, rel=1e-12)
    assert values["individual-risk.above_threshold"] == 6  # every risk is above 0.1
    assert values["individual-risk.sample_uniques"] == 1
    assert values["individual-risk.keys"] == 3 and values["individual-risk.records"] == 6
    # the same as naming the column
    assert risk(typed, ctx, weight="w") == values
    # weights typed from text: the same numbers
    text = weighted_table(ctx, [str(w) for w in WEIGHTS])
    assert risk(text, ctx) == values


def test_individual_risk_weight_precedence():
    ctx = make_context()
    typed = weighted_table(ctx)
    # 1. the weight parameter wins: the column v of ones is the population (r = 1/f); a note says so
    assert weight_source(typed, {"weight": "v"}) == ("v", "parameter")
    values = risk(typed, ctx, weight="v")
    assert values["individual-risk.expected_reidentifications"] == pytest.approx(3.0)  # 2/2 + 3/3 + 1
    assert any("'v'" in n and "instead of the typing's weight column 'w'" in n for n in ctx.notes)
    # 2. population_size over the typed column: every record weighs 60 / 6 = 10, and a note says so
    ctx.notes.clear()
    assert weight_source(typed, {"population_size": 60}) == (None, "population_size")
    values = risk(typed, ctx, population_size=60)
    p = 0.1  # f / F = 1/10 for every key
    r1 = p / (1 - p) * math.log(1 / p)
    r2 = p / (1 - p) - (p / (1 - p)) ** 2 * math.log(1 / p)
    r3 = p / (2 + p)
    assert values["individual-risk.expected_reidentifications"] == pytest.approx(2 * r2 + 3 * r3 + r1, rel=1e-12)
    assert ctx.notes == ["individual-risk: population_size 60 was used (every record weighs N / n) instead of "
                         "the typing's weight column 'w'"]
    # 4. no weight at all: the sample is the population
    ctx.notes.clear()
    plain = run({"key": KEYS}, ctx, quasi=["key"])[0]
    assert weight_source(plain, {}) == (None, "none")
    assert risk(plain, ctx)["individual-risk.expected_reidentifications"] == pytest.approx(3.0)
    assert ctx.notes == []


def test_individual_risk_typed_weight_with_suppressed_cells():
    # a null QI is a wildcard: the typed weights still weigh its compatible records.
    # Keys: (A) x2, weights 3 + 5, and one record (null), weight 4: f_A = 3 (A, A and the null),
    # F_A = 12, p = 1/4: r = p / (2 + p) = 1/9; the null record: f = 3, F = 12, the same.
    ctx = make_context()
    typed = run({"key": ["A", "A", None], "w": [3.0, 5.0, 4.0]}, ctx, quasi=["key"], weight="w",
                missing="category")[0]
    # missing: category turned the null into "?": a value of its own; build the wildcard table by hand
    wild = typed.replace(data=typed.data.set_column(1, "key", pa.array(["A", "A", None])))
    assert wild.typing.weight == "w"
    values = risk(wild, ctx)
    assert values["individual-risk.expected_reidentifications"] == pytest.approx(3 * (0.25 / 2.25), rel=1e-12)


def test_individual_risk_refuses_a_typed_weight_the_table_lost():
    ctx = make_context()
    typed = weighted_table(ctx)
    lost = typed.replace(data=typed.data.drop_columns(["w"]))
    with pytest.raises(InputError) as exc:
        risk(lost, ctx)
    assert "individual-risk: the typing's weight column 'w' is not in the table" in one_line(exc)
    # population_size does without it
    assert risk(lost, ctx, population_size=60)["individual-risk.records"] == 6
    with pytest.raises(InputError, match="weight column 'x' is not in the table .declare it under weight"):
        risk(typed, ctx, weight="x")


# -- end to end ------------------------------------------------------------------------------

# Five records, QI age; MDAV with k = 2 groups {20, 21} and {40, 41, 42} (the record farthest
# from the centroid 32.8 is 20, so its group of 2 is formed first) and publishes their centroids
# 20.5 and 41; the weights pass through unchanged.
#   before (every age unique, f = 1, F = w, p = 1/w):  r = 1/(w-1) log w
#       w = 2, 3, 4, 5, 6:  log 2 + log(3)/2 + log(4)/3 + log(5)/4 + log(6)/5
#   after: key 20.5, f = 2, F = 2 + 3 = 5, p = 2/5: r = 2/3 - (4/9) log(5/2)
#          key 41,   f = 3, F = 4 + 5 + 6 = 15, p = 1/5: r = p / (2 + p) = 1/11
CSV = "age,wt,city\n20,2,x\n21,3,y\n40,4,x\n41,5,y\n42,6,x\n"
BEFORE = [math.log(w) / (w - 1) for w in (2, 3, 4, 5, 6)]
AFTER = [2 / 3 - 4 / 9 * math.log(2.5)] * 2 + [1 / 11] * 3


def workflow(tmp_path, typing_extra: str = "weight: wt", metric: str = "individual-risk") -> str:
    (tmp_path / "survey.csv").write_text(CSV)
    text = textwrap.dedent(f"""\
        name: weighted
        seed: 1
        sources:
          survey: {{path: survey.csv}}
        steps:
          typed:
            uses: typing
            input: survey
            with:
              quasi: {{age: continuous}}
              {typing_extra}
          grouped:
            uses: mdav
            input: typed
            with: {{k: 2}}
          risk:
            uses: evaluate
            input: [typed, grouped]
            with:
              metrics: [{metric}]
              risk_before: true
          published:
            uses: publish
            input: grouped
            with: {{publisher: csv, path: out.csv}}
        """)
    path = tmp_path / "wf.yaml"
    path.write_text(text)
    return str(path)


def test_workflow_with_a_weight_role(tmp_path, cli):
    wf = workflow(tmp_path)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    m = out["metrics"]
    assert m["risk.individual-risk.before.expected_reidentifications"] == pytest.approx(sum(BEFORE), rel=1e-12)
    assert m["risk.individual-risk.before"] == pytest.approx(sum(BEFORE) / 5, rel=1e-12)
    assert m["risk.individual-risk.expected_reidentifications"] == pytest.approx(sum(AFTER), rel=1e-12)
    assert m["risk.individual-risk"] == pytest.approx(sum(AFTER) / 5, rel=1e-12)
    assert m["risk.individual-risk.max"] == pytest.approx(2 / 3 - 4 / 9 * math.log(2.5), rel=1e-12)
    published = (tmp_path / "out" / "out.csv").read_text().splitlines()
    assert published[0] == "age,wt,_class"  # 'city', named in no role, is dropped
    rows = [dict(zip(published[0].split(","), line.split(","))) for line in published[1:]]
    assert sorted(float(r["wt"]) for r in rows) == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert sorted(float(r["age"]) for r in rows) == [20.5, 20.5, 41.0, 41.0, 41.0]
    notes = [n for step in out["steps"] for n in step["notes"]]
    assert not any("individual-risk" in n for n in notes)  # the typed weights were used: nothing to note


def test_workflow_population_size_overrides_the_weight_role(tmp_path):
    from anonflow import testing

    result = testing.run_workflow(workflow(tmp_path, metric="{individual-risk: {population_size: 50}}"), tmp_path)
    # every record weighs 50 / 5 = 10, p = 1/10 (before: f = 1 each; after: f = 2 and f = 3)
    p = 0.1
    r1 = p / (1 - p) * math.log(1 / p)
    r2 = p / (1 - p) - (p / (1 - p)) ** 2 * math.log(1 / p)
    r3 = p / (2 + p)
    assert result.metrics["risk.individual-risk.before.expected_reidentifications"] == pytest.approx(5 * r1)
    assert result.metrics["risk.individual-risk.expected_reidentifications"] == pytest.approx(2 * r2 + 3 * r3)
    # the run notes, once (though risk_before measures two tables), that population_size was used
    risk = next(step for step in result.steps if step["step"] == "risk")
    assert risk["notes"] == ["individual-risk: population_size 50 was used (every record weighs N / n) instead "
                             "of the typing's weight column 'wt'"]


def test_workflow_refuses_bad_weights_in_one_line(tmp_path, cli):
    wf = workflow(tmp_path)
    (tmp_path / "survey.csv").write_text("age,wt\n20,2\n21,0\n40,4\n41,5\n42,6\n")
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert "weight column 'wt' has 1 record(s) whose weight is not a finite number > 0, the first in record 2" \
        in res.output
