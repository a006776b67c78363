"""``top-bottom-coding`` and ``global-recode``: hand-computed toys (R's ``cut`` labels and
intervals), the Census and Adult data recoded and checked against numpy / pandas (``np.where``,
``pd.cut``, ``Series.replace``), the typing of a recoded column, bad parameters in one line, and a
CLI workflow run twice byte for byte."""

from __future__ import annotations

import json
import math

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from anonflow.api import Attribute, Typing, TypedTable, generalization
from anonflow.errors import InputError
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.perturbation.recode import GlobalRecode, TopBottomCoding, cut_labels, number_text

from tests.support import data
from tests.support.helpers import DATA

TBC, GR = TopBottomCoding(), GlobalRecode()


def run(algo, table, **params):
    ctx = make_context()
    p = validate_params(algo.params, params)
    algo.check(p, table=table)
    out = algo.run(table, p, ctx)
    return out, ctx


def toy():
    return typed_table({"age": [0, 5, 10, 11, 20, None], "inc": [1.5, 2.0, float("nan"), 100.0, -3.0, 4.0],
                        "m": ["a", "b", "c", "a", "b", "c"]},
                       quasi={"age": "continuous", "inc": "continuous", "m": "nominal"})


# -- labels --------------------------------------------------------------------------------------

def test_cut_labels_as_r_writes_them():
    # R: levels(cut(x, c(0, 10, 20.5))) == c("(0,10]", "(10,20.5]")
    assert cut_labels([0, 10, 20.5]) == ["(0,10]", "(10,20.5]"]
    # right = FALSE: "[0,10)" "[10,20.5)"; include.lowest closes the outer end
    assert cut_labels([0, 10, 20.5], right=False) == ["[0,10)", "[10,20.5)"]
    assert cut_labels([0, 10, 20.5], include_lowest=True) == ["[0,10]", "(10,20.5]"]
    assert cut_labels([0, 10, 20.5], right=False, include_lowest=True) == ["[0,10)", "[10,20.5]"]
    assert cut_labels([-math.inf, 0, math.inf]) == ["(-Inf,0]", "(0,Inf]"]
    assert [number_text(v) for v in (3.0, -2.0, 0.1, 1e20)] == ["3", "-2", "0.1", "1e+20"]  # R too: 1e+20


# -- top and bottom coding -----------------------------------------------------------------------

def test_top_bottom_coding_by_hand():
    out, ctx = run(TBC, toy(), columns={"age": {"top": 10, "bottom": 2, "bottom_value": 0},
                                        "inc": {"top": 50, "top_value": 50.5}})
    # age: 0 < 2 -> 0 (bottom_value); 11, 20 > 10 -> 10 (top_value defaults to top); 10 is not above 10
    assert out.data.column("age").to_pylist() == [0, 5, 10, 10, 10, None]
    assert out.data.column("age").type == pa.int64()
    # inc: 100 > 50 -> 50.5; NaN is left as it is; no bottom
    inc = out.data.column("inc").to_pylist()
    assert inc[:2] == [1.5, 2.0] and math.isnan(inc[2]) and inc[3:] == [50.5, -3.0, 4.0]
    assert out.data.column("_class").to_pylist() == list(range(6))
    assert out.data.column("m").equals(toy().data.column("m"))
    assert ctx.notes == ["top-bottom-coding 'age': 2 value(s) top-coded, 1 bottom-coded of 6",
                         "top-bottom-coding 'inc': 1 value(s) top-coded, 0 bottom-coded of 6"]


#: sdcMicro's tests/testthat/test_topBotCoding.R: runif(10, 1, 100) after set.seed(3), as its
#: expected vectors give the values (those at most 35 in the kind = "top" case, the others in "bottom")
SDCMICRO_X = [17.63611, 80.94412, 39.10929, 33.44570, 60.60797, 60.83501, 13.33871, 30.16549, 58.18338, 63.46695]


@pytest.mark.parametrize("missing", [False, True])
def test_sdcmicros_topbotcoding_examples(missing):
    x = list(SDCMICRO_X)
    if missing:  # sample_Data[c(1, 2, 7), 1] <- NA
        x[0] = x[1] = x[6] = None
    t = typed_table({"Var1": x}, quasi={"Var1": "continuous"})
    top, _ = run(TBC, t, columns={"Var1": {"top": 35, "top_value": 0}})
    bottom, _ = run(TBC, t, columns={"Var1": {"bottom": 35, "bottom_value": 0}})
    want_top = [17.63611, 0, 0, 33.44570, 0, 0, 13.33871, 30.16549, 0, 0]
    want_bottom = [0, 80.94412, 39.10929, 0, 60.60797, 60.83501, 0, 0, 58.18338, 63.46695]
    if missing:
        for w in (want_top, want_bottom):
            w[0] = w[1] = w[6] = None
    assert top.data.column("Var1").to_pylist() == want_top
    assert bottom.data.column("Var1").to_pylist() == want_bottom


def test_an_integer_column_with_a_fractional_replacement_becomes_double():
    out, _ = run(TBC, toy(), columns={"age": {"top": 10, "top_value": 10.5}})
    assert out.data.column("age").type == pa.float64()
    assert out.data.column("age").to_pylist() == [0, 5, 10, 10.5, 10.5, None]


@pytest.fixture(scope="module")
def census():
    t = data.sdcmicro("census")
    return typed_table({c: t.column(c) for c in t.column_names}, quasi={c: "continuous" for c in t.column_names})


def test_top_bottom_coding_on_census_equals_numpy(census):
    x = census.data.column("PTOTVAL").to_numpy()
    top, bottom = float(np.quantile(x, 0.95)), float(np.quantile(x, 0.05))
    out, _ = run(TBC, census, columns={"PTOTVAL": {"top": top, "top_value": -1, "bottom": bottom}})
    expected = np.where(x > top, -1.0, np.where(x < bottom, bottom, x))
    assert np.array_equal(out.data.column("PTOTVAL").to_numpy(), expected)
    others = [c for c in census.columns if c != "PTOTVAL"]
    assert out.data.select(others).equals(census.data.select(others))


def test_top_bottom_declaration():
    p = validate_params(TBC.params, {"columns": {"x": {"bottom": 1.5}, "y": {"top": 7, "top_value": 6}}})
    assert TBC.perturbs(p) == {"x": {"kind": "recode", "method": "top-bottom-coding", "bottom": 1.5,
                                     "bottom_value": 1.5},
                               "y": {"kind": "recode", "method": "top-bottom-coding", "top": 7, "top_value": 6}}


# -- global recoding by breaks --------------------------------------------------------------------

def test_breaks_by_hand_right_closed():
    # R: cut(c(5, 10, 11, 20), c(0, 10, 20)) -> (0,10] (0,10] (10,20] (10,20]; NA stays NA
    t = typed_table({"age": [5, 10, 11, 20, None]}, quasi={"age": "continuous"})
    out, _ = run(GR, t, columns={"age": {"breaks": [0, 10, 20]}})
    assert out.data.column("age").to_pylist() == ["(0,10]", "(0,10]", "(10,20]", "(10,20]", None]
    assert out.data.column("age_lo").to_pylist() == [0, 0, 10, 10, None]
    assert out.data.column("age_hi").to_pylist() == [10, 10, 20, 20, None]
    assert generalization(out, "age") == {"kind": "interval", "lo": "age_lo", "hi": "age_hi"}
    attr = out.typing.get("age")
    assert (attr.role, attr.type) == ("quasi", "continuous")
    assert out.typing.get("age_lo").role == "insensitive"


def test_breaks_left_closed_include_lowest_and_labels():
    # [0,10) [10,20]: 0 -> first, 10 -> second, 20 -> second (include_lowest closes the last on the right)
    t = typed_table({"age": [0, 9.5, 10, 20]}, quasi={"age": "continuous"})
    out, _ = run(GR, t, columns={"age": {"breaks": [0, 10, 20], "right": False, "include_lowest": True,
                                         "labels": ["young", "old"]}})
    assert out.data.column("age").to_pylist() == ["young", "young", "old", "old"]


def test_a_value_outside_the_breaks_is_one_line_or_kept():
    t = typed_table({"age": [0, 5, 25, 30]}, quasi={"age": "continuous"})
    with pytest.raises(InputError) as err:
        run(GR, t, columns={"age": {"breaks": [0, 10, 20]}})
    # 0 is outside (0,10] (R gives NA), 25 and 30 above 20: three values, the least 0
    assert str(err.value) == ("global-recode: column 'age' has 3 value(s) outside its intervals (0,10] .. (10,20] "
                              "(breaks 0 to 20), the least 0; widen the breaks or set outside: keep")
    out, _ = run(GR, t, columns={"age": {"breaks": [0, 10, 20], "outside": "keep"}})
    assert out.data.column("age").to_pylist() == ["0", "(0,10]", "25", "30"]
    assert out.data.column("age_lo").to_pylist() == [0, 0, 25, 30]
    assert out.data.column("age_hi").to_pylist() == [0, 10, 25, 30]


def test_infinite_breaks_as_r_writes_them():
    t = typed_table({"x": [-5.0, 0.0, 7.0]}, quasi={"x": "continuous"})
    out, _ = run(GR, t, columns={"x": {"breaks": ["-Inf", 0, "Inf"]}})
    assert out.data.column("x").to_pylist() == ["(-Inf,0]", "(-Inf,0]", "(0,Inf]"]
    assert GR.perturbs(validate_params(GR.params, {"columns": {"x": {"breaks": ["-Inf", 0, "Inf"]}}}))["x"] == {
        "kind": "recode", "method": "global-recode", "breaks": ["-Inf", 0, "Inf"], "labels": ["(-Inf,0]", "(0,Inf]"],
        "right": True, "include_lowest": False, "outside": "error"}


def test_breaks_on_census_equal_pandas_cut(census):
    x = census.data.column("AGI").to_numpy().astype(float)
    breaks = [-1.0, *np.unique(np.quantile(x, [0.2, 0.4, 0.6, 0.8])).tolist(), float(x.max())]
    out, _ = run(GR, census, columns={"AGI": {"breaks": breaks}})
    codes = pd.cut(x, breaks, right=True, labels=False)  # pandas, independently: interval index per value
    labels = np.array(cut_labels(breaks))
    assert out.data.column("AGI").to_pylist() == labels[codes].tolist()
    assert np.array_equal(out.data.column("AGI_lo").to_numpy(), np.array(breaks)[codes])
    assert np.array_equal(out.data.column("AGI_hi").to_numpy(), np.array(breaks)[codes + 1])


# -- global recoding by merges --------------------------------------------------------------------

def test_merge_on_adult_equals_pandas_replace():
    t = data.adult_full()
    table = typed_table({"marital-status": t.column("marital-status"), "sex": t.column("sex")},
                        quasi={"marital-status": "nominal", "sex": "nominal"})
    merge = {"Married": ["Married-civ-spouse", "Married-AF-spouse", "Married-spouse-absent"],
             "Divorced": ["Separated"]}
    out, _ = run(GR, table, columns={"marital-status": {"merge": merge}})
    expected = t.column("marital-status").to_pandas().replace({o: n for n, olds in merge.items() for o in olds})
    assert out.data.column("marital-status").to_pylist() == expected.tolist()
    assert out.typing.get("marital-status").type == "nominal" and not generalization(out, "marital-status")


def test_merge_of_an_integer_coded_column_gives_text():
    t = typed_table({"c": [1, 2, 3, 2]}, quasi={"c": "nominal"})
    out, _ = run(GR, t, columns={"c": {"merge": {"low": [1, 2]}}})
    assert out.data.column("c").to_pylist() == ["low", "low", "3", "low"]


def ordinal(order):
    data = pa.table({"_row": pa.array([0, 1, 2, 3], pa.int64()), "e": ["lo", "mid", "hi", "top"]})
    return TypedTable(data, Typing((Attribute("e", "quasi", "ordinal", order=order),)))


def test_merging_an_ordinal_column_merges_its_order():
    out, _ = run(GR, ordinal(("lo", "mid", "hi", "top")), columns={"e": {"merge": {"high": ["hi", "top"]}}})
    assert out.typing.get("e").order == ("lo", "mid", "high")
    assert out.data.column("e").to_pylist() == ["lo", "mid", "high", "high"]
    with pytest.raises(InputError, match="merge 'x' of ordinal column 'e' is not a run of consecutive categories"):
        run(GR, ordinal(("lo", "mid", "hi", "top")), columns={"e": {"merge": {"x": ["lo", "hi"]}}})


# -- bad parameters --------------------------------------------------------------------------------

BAD = [
    (TBC, {"nope": {"top": 1}}, "top-bottom-coding: column 'nope' is not in the table"),
    (TBC, {"m": {"top": 1}}, "top-bottom-coding works on numbers, but column 'm' holds string values"),
    (TBC, {"age": {}}, "column 'age' needs 'top' or 'bottom'"),
    (TBC, {"age": {"top": 1, "bottom": 5}}, "column 'age' has bottom 5 above top 1"),
    (TBC, {"age": {"top": 1, "cap": 5}}, "unknown key 'cap' for column 'age'"),
    (TBC, {"age": {"top": "high"}}, "'top' of column 'age' must be a number, got 'high'"),
    (TBC, {"age": {"bottom_value": 3}}, "needs 'top' or 'bottom'"),
    (TBC, {"age": {"top": 3, "bottom_value": 3}}, "column 'age' has 'bottom_value' but no 'bottom'"),
    (GR, {"age": {"breaks": [0, 10], "merge": {"a": ["b"]}}}, "needs either 'breaks'"),
    (GR, {"age": {"breaks": [10, 0]}}, "'breaks' of column 'age' must increase strictly, got [10, 0]"),
    (GR, {"age": {"breaks": [10]}}, "must be a list of at least two numbers"),
    (GR, {"age": {"breaks": [0, 10, 30], "labels": ["a"]}}, "'labels' of column 'age' must be 2 label(s)"),
    (GR, {"age": {"breaks": [0, 10, 30], "labels": ["a", "a"]}}, "name a label twice"),
    (GR, {"age": {"breaks": [0, 30], "outside": "drop"}}, "'outside' of column 'age' must be 'error' or 'keep'"),
    (GR, {"m": {"breaks": [0, 30]}}, "global-recode works on numbers, but column 'm' holds string values"),
    (GR, {"m": {"merge": {"ab": ["a", "zz"]}}}, "merge of column 'm' names 'zz', which is not a value of the column"),
    (GR, {"m": {"merge": {"ab": ["a"], "ac": ["a"]}}}, "category 'a' of column 'm' is merged into both 'ab' and 'ac'"),
    (GR, {"age": {"merge": {"x": ["5"]}}}, "global-recode merges categories, but column 'age' is typed continuous"),
    (GR, {"age": {"breaks": [0, 30]}, "age_lo": {"breaks": [0, 1]}}, "column 'age_lo' is not in the table"),
]


@pytest.mark.parametrize("algo, columns, message", BAD, ids=[m[:40] for _, _, m in BAD])
def test_bad_parameters_are_one_line(algo, columns, message):
    with pytest.raises(InputError) as err:
        run(algo, toy(), columns=columns)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bound_columns_may_not_exist_already():
    t = typed_table({"age": [1, 2], "age_lo": [0, 0]}, quasi={"age": "continuous"})
    with pytest.raises(InputError, match="would publish its bounds as 'age_lo', which the table holds already"):
        run(GR, t, columns={"age": {"breaks": [0, 10]}})


# -- through the CLI -------------------------------------------------------------------------------

WORKFLOW = """\
name: recode-census
seed: 1
sources:
  census: {{path: {data}}}
steps:
  typed:
    uses: typing
    input: census
    with: {{quasi: [AFNLWGT, AGI, FEDTAX, PTOTVAL]}}
  coded:
    uses: top-bottom-coding
    input: typed
    with: {{columns: {{PTOTVAL: {{top: 100000, top_value: 100000, bottom: 1000, bottom_value: 0}}}}}}
  recoded:
    uses: global-recode
    input: coded
    with: {{columns: {{FEDTAX: {{breaks: ["-Inf", 0, 5000, 20000, "Inf"]{extra}}}}}}}
  published:
    uses: publish
    input: recoded
    with: {{publisher: csv, path: out.csv}}
"""


def run_cli(cli, folder, extra=""):
    folder.mkdir()
    wf = folder / "wf.yaml"
    wf.write_text(WORKFLOW.format(data=DATA / "sdcmicro" / "CASCrefmicrodata.csv", extra=extra))
    return cli("run", wf, "--db", folder / "s.duckdb", "--json")


def test_cli_workflow_is_byte_identical_and_declares_its_rules(cli, tmp_path):
    runs = []
    for name in ("a", "b"):
        res = run_cli(cli, tmp_path / name)
        assert res.exit_code == 0, res.output
        runs.append((json.loads(res.output), (tmp_path / name / "out" / "out.csv").read_bytes()))
    assert runs[0][1] == runs[1][1]
    df = pd.read_csv(tmp_path / "a" / "out" / "out.csv")
    original = data.sdcmicro("census").to_pandas()
    assert sorted(df["PTOTVAL"]) == sorted(np.where(original.PTOTVAL > 100000, 100000,
                                                    np.where(original.PTOTVAL < 1000, 0, original.PTOTVAL)))
    assert set(df["FEDTAX"]) <= {"(-Inf,0]", "(0,5000]", "(5000,20000]", "(20000,Inf]"}
    con = duckdb.connect(str(tmp_path / "a" / "s.duckdb"), read_only=True)
    rows = dict(con.execute("SELECT step, summary FROM af_step_runs WHERE run_id = ?", [runs[0][0]["run_id"]]).fetchall())
    con.close()
    assert json.loads(rows["coded"])["perturbs"]["PTOTVAL"] == {
        "kind": "recode", "method": "top-bottom-coding", "top": 100000, "top_value": 100000, "bottom": 1000,
        "bottom_value": 0}
    assert json.loads(rows["recoded"])["perturbs"]["FEDTAX"]["breaks"] == ["-Inf", 0, 5000, 20000, "Inf"]


def test_cli_bad_parameter_is_one_line_with_exit_code_2(cli, tmp_path):
    res = run_cli(cli, tmp_path / "bad", extra=", labels: [a, b]")
    assert res.exit_code == 2, res.output
    assert "'labels' of column 'FEDTAX' must be 4 label(s), one per interval" in res.output


# -- apply: a fixed rule applied to new records ------------------------------------------------------

RELEASE = """\
name: recode-release
seed: 1
sources:
  census: {{path: {data}}}
steps:
  typed:
    uses: typing
    input: census
    with: {{quasi: [AFNLWGT, AGI, FEDTAX, PTOTVAL]}}
  recoded:
    uses: {uses}
    input: typed
    with: {{columns: {{FEDTAX: {rule}}}}}
  published:
    uses: publish
    input: recoded
    with: {{publisher: release, path: rel}}
"""


@pytest.mark.parametrize("uses, rule", [("global-recode", '{breaks: ["-Inf", 0, 5000, 20000, "Inf"]}'),
                                        ("top-bottom-coding", "{top: 5000, bottom: 100, bottom_value: 0}")])
def test_apply_publishes_new_records_by_the_releases_rule(cli, tmp_path, uses, rule):
    wf = tmp_path / "wf.yaml"
    wf.write_text(RELEASE.format(data=DATA / "sdcmicro" / "CASCrefmicrodata.csv", uses=uses, rule=rule))
    assert cli("run", wf, "--db", tmp_path / "s.duckdb").exit_code == 0
    new = data.sdcmicro("census").slice(100, 150).to_pandas()
    new.to_csv(tmp_path / "new.csv", index=False)
    res = cli("apply", tmp_path / "out" / "rel", tmp_path / "new.csv")
    assert res.exit_code == 0, res.output
    assert f"{uses}: the release's rule applied to 150 new record(s)" in res.output
    assert f"150 record(s) published with the release's rule (FEDTAX: {uses})" in res.output
    got = pd.read_csv(tmp_path / "out" / "rel-applied" / "published.csv").sort_values(["AFNLWGT", "AGI"])
    want = new.sort_values(["AFNLWGT", "AGI"])
    if uses == "global-recode":
        breaks = [-np.inf, 0, 5000, 20000, np.inf]
        expected = np.array(cut_labels(breaks))[pd.cut(want["FEDTAX"], breaks, labels=False)]
    else:
        expected = np.where(want["FEDTAX"] > 5000, 5000, np.where(want["FEDTAX"] < 100, 0, want["FEDTAX"]))
    assert got["FEDTAX"].astype(str).tolist() == pd.Series(expected).astype(str).tolist()
