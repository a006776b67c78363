"""The built-in typing step (SPEC section 1): roles, inference, declared types, missing values."""

import pyarrow as pa
import pytest

from anonflow.schema import MISSING_CATEGORY
from anonflow.steps import TypingStep
from anonflow.errors import InputError, WorkflowError
from anonflow.params import validate_params
from anonflow.testing import make_context

STEP = TypingStep()


def run(columns, **given):
    n = len(next(iter(columns.values())))
    table = pa.table({"_row": pa.array(range(n), pa.int64()), **{k: pa.array(v) for k, v in columns.items()}})
    params = validate_params(STEP.params, given)
    return STEP.run(table, params, make_context(), "wf.yaml: step 'typed'")


def test_inference_numbers_codes_and_categories():
    typed, summary = run({"age": [30, 41], "zip": ["15001", "06111"], "sex": ["F", "M"], "id": ["a", "b"]},
                         quasi=["age", "zip", "sex"], identifier=["id"])
    t = typed.typing
    assert [(a.name, a.role, a.type, a.source) for a in t.attributes] == [
        ("age", "quasi", "continuous", "inferred"), ("zip", "quasi", "semantic", "inferred"),
        ("sex", "quasi", "nominal", "inferred")]
    assert "id" not in typed.columns and summary["columns_dropped"] == ["id"]


def test_declared_types_override_inference_and_others_default_to_drop():
    typed, summary = run({"edu": ["HS", "BSc", "MSc"], "x": [1, 2, 3], "note": ["a", "b", "c"]},
                         quasi={"edu": {"type": "ordinal", "order": ["HS", "BSc", "MSc"], "weights": [1, 2]},
                                "x": "nominal"})
    edu = typed.typing.get("edu")
    assert edu.type == "ordinal" and edu.order == ("HS", "BSc", "MSc") and edu.weights == (1.0, 2.0)
    assert typed.typing.get("x").type == "nominal"
    assert "note" not in typed.columns and summary["columns_dropped"] == ["note"]
    typed, _ = run({"x": [1, 2], "note": ["a", "b"]}, quasi=["x"], others="insensitive")
    assert typed.columns == ["_row", "x", "note"] and typed.typing.get("note").role == "insensitive"


def test_ordinal_order_must_cover_every_value():
    with pytest.raises(InputError, match="ordinal column 'edu': value 'PhD' is not in its 'order'"):
        run({"edu": ["HS", "PhD"]}, quasi={"edu": {"order": ["HS", "BSc"]}})


def test_semantic_codes_must_have_one_length():
    with pytest.raises(InputError, match="most have 6 symbols but '1500' has 4"):
        run({"z": ["150001", "150002", "1500"]}, quasi={"z": "semantic"})


def test_numbers_as_text_become_numbers_when_declared_continuous():
    typed, _ = run({"x": ["1.5", "2", "-3e2"]}, quasi={"x": "continuous"})
    assert typed.data.column("x").to_pylist() == [1.5, 2.0, -300.0]


def test_missing_values_policies():
    cols = {"a": ["x", "?", None, "y"], "b": [1, 2, 3, 4]}
    with pytest.raises(InputError, match="column 'a' has 2 missing value.s., the first in record 2"):
        run(cols, quasi=["a", "b"], missing_values=["?"])
    typed, summary = run(cols, quasi=["a", "b"], missing_values=["?"], missing="drop")
    assert typed.data.column("_row").to_pylist() == [0, 3]
    assert summary["records_dropped_missing"] == 2
    typed, _ = run(cols, quasi=["a", "b"], missing_values=["?"], missing="category")
    assert typed.data.column("a").to_pylist() == ["x", "?", "?", "y"]
    with pytest.raises(InputError, match="numeric: missing values cannot be a category"):
        run({"b": [1, None]}, quasi=["b"], missing="category")


@pytest.mark.parametrize("given, fragment", [
    ({"quasi": ["a"], "sensitive": ["a"]}, "column 'a' is given two roles: quasi and sensitive"),
    ({"quasi": {"a": "ordinal"}}, "needs 'order'"),
    ({"quasi": {"a": {"type": "nominal", "order": ["x", "y"]}}}, "'order' is only for ordinal columns"),
    ({"quasi": {"a": {"order": ["x", "x"]}}}, "lists a category twice"),
    ({"quasi": {"a": {"order": ["x", "y"], "weights": [0]}}}, "'weights' must be 1 positive numbers"),
    ({"quasi": {"a": {"typ": "nominal"}}}, "unknown key 'typ' (did you mean 'type'?)"),
    ({"identifier": {"a": "nominal"}}, "identifier column 'a' is dropped; it takes no type"),
])
def test_bad_role_declarations(given, fragment):
    with pytest.raises(WorkflowError) as info:
        run({"a": ["x", "y"]}, **given)
    assert fragment in str(info.value)


def test_semantic_options_and_grading_are_carried_in_the_typing(tmp_path):
    (tmp_path / "g.yaml").write_text("levels:\n  - {alpha: 0.3, values: [flu]}\n  - {alpha: 0.6, values: [cold, none]}\n")
    given = {"quasi": {"zip": {"type": "semantic", "beta": 2, "w12": 0.5}},
             "sensitive": {"disease": {"grading": "g.yaml"}}}
    params = STEP.check_params(given, None, "w", tmp_path)
    assert params["sensitive"]["disease"]["grading"]["sha256"]
    table = pa.table({"_row": pa.array([0, 1], pa.int64()), "zip": ["150001", "150002"], "disease": ["flu", "cold"]})
    ctx = make_context()
    typed, _ = STEP.run(table, params, ctx, "w")
    assert typed.typing.get("zip").options == {"beta": 2.0, "w12": 0.5}
    grading = typed.typing.get("disease").options["grading"]
    assert [lv["values"] for lv in grading["levels"]] == [["flu"], ["cold", "none"]]
    assert ctx.notes == ["grading of 'disease' names 'none', which does not occur in the data"]


@pytest.mark.parametrize("given, fragment", [
    ({"quasi": {"a": {"type": "nominal", "beta": 1}}}, "'beta' is a code hierarchy tree weight and needs type: semantic"),
    ({"quasi": {"a": {"grading": "g.yaml"}}}, "a sensitivity grading belongs to a sensitive attribute"),
    ({"quasi": ["a"], "sensitive": {"s": {"grading": "missing.yaml"}}}, "grading file not found"),
])
def test_bad_semantic_and_grading_declarations(tmp_path, given, fragment):
    with pytest.raises(WorkflowError) as info:
        STEP.check_params(given, None, "w", tmp_path)
    assert fragment in str(info.value)


@pytest.mark.parametrize("policy", ["drop", "category"])
def test_missing_values_are_written_into_sql_safely_whatever_the_names_and_spellings(policy):
    """The typed records are a view (drop) or a table (category) written in SQL from the data's
    own missing spellings: a column named with a '?' or a quote, and spellings holding quotes,
    a question mark or SQL, keep their meaning."""
    odd = "it's'); DROP TABLE x; --"
    cols = {"a?b": ["x", "?", "y", odd, "x", "z"], "c'd": ["u", "v", "", "u", "w", "u"]}
    typed, summary = run(cols, quasi=["a?b", "c'd"], missing=policy, missing_values=["?", odd])
    got = typed.select(["_row", "a?b", "c'd"]).to_pylist()
    if policy == "drop":
        assert summary["records_dropped_missing"] == 3
        assert got == [{"_row": 0, "a?b": "x", "c'd": "u"}, {"_row": 4, "a?b": "x", "c'd": "w"},
                       {"_row": 5, "a?b": "z", "c'd": "u"}]
    else:
        assert [r["a?b"] for r in got] == ["x", MISSING_CATEGORY, "y", MISSING_CATEGORY, "x", "z"]
        assert [r["c'd"] for r in got] == ["u", "v", MISSING_CATEGORY, "u", "w", "u"]
