"""The convention for publishing generalized values (``anonflow.generalization``).

The helpers on hand-computed examples; the one-line error of a numeric metric given
generalized labels (the regression: ``sse-il`` on a ``lattice`` output crashed with
``ValueError: could not convert string to float``), through the CLI; the ``lattice``
marking its published quasi-identifiers; ``l-clustering`` publishing the same text as the
kernel's renderer did before it used the helpers.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from anonflow import api
from anonflow.api import CLASS, Algorithm
from anonflow.errors import InputError
from anonflow.generalization import (OPTION, format_number, generalization, generalized_attribute, interval_label,
                                     interval_labels, mark_generalized, numeric_column, set_label, set_labels,
                                     structured_columns)
from anonflow_std.common.generalized import Generalized, render
from anonflow.params import validate_params
from anonflow.registry import get_registry
from anonflow.schema import Attribute, Typing
from anonflow.testing import make_context, typed_table
from anonflow_std.common.qi_space import qi_space
from anonflow_std.generalization.hierarchies import Intervals
from anonflow_std.generalization.lattice import Lattice
from anonflow_std.clustering.lclustering import LClustering
from anonflow_std.utility.classification import ClassificationAccuracy
from anonflow_std.utility.sse import SseIl

# -- labels ---------------------------------------------------------------------------------


def test_api_reexports_the_helpers():
    for name in ("interval_label", "interval_labels", "set_label", "set_labels", "generalized_attribute",
                 "mark_generalized", "generalization", "structured_columns", "numeric_column"):
        assert name in api.__all__ and getattr(api, name) is globals()[name]


@pytest.mark.parametrize("x, text", [(30, "30"), (30.0, "30"), (-2.0, "-2"), (52.5, "52.5"), (0.1, "0.1"),
                                     (1e-05, "1e-05"), (-0.0, "0"), (123456.789, "123456.789")])
def test_format_number(x, text):
    assert format_number(x) == text


@pytest.mark.parametrize("lo, hi, text", [
    (50, 52, "[50-52]"),
    (30.0, 39.0, "[30-39]"),
    (39, 39, "39"),                          # a single value, bare
    (0.5, 2.25, "[0.5-2.25]"),
    (-5, -2, "[-5--2]"),
    ("Bachelors", "Masters", "[Bachelors..Masters]"),   # an ordinal interval: categories
    ("HS-grad", "HS-grad", "HS-grad"),
])
def test_interval_label(lo, hi, text):
    assert interval_label(lo, hi) == text


def test_interval_labels_is_interval_label_on_each_pair():
    lo = np.array([50.0, 39.0, 0.5, -5.0])
    hi = np.array([52.0, 39.0, 2.25, -2.0])
    assert interval_labels(lo, hi).tolist() == ["[50-52]", "39", "[0.5-2.25]", "[-5--2]"]
    assert interval_labels(np.array(["a", "b"]), np.array(["c", "b"])).tolist() == ["[a..c]", "b"]
    assert interval_labels(lo, hi, sep="..").tolist()[0] == "[50..52]"
    with pytest.raises(ValueError):
        interval_label(float("nan"), 1.0)


def test_set_label_and_set_labels():
    assert set_label(["India", "China"]) == "{China,India}"
    assert set_label(["India", "China", "India"]) == "{China,India}"   # each member once
    assert set_label(["China"]) == "China"                              # a singleton, bare
    assert set_label([3, 10]) == "{10,3}"                               # sorted as text
    with pytest.raises(ValueError):
        set_label([])
    sets = pa.array([["China"], ["India", "Japan"]], type=pa.list_(pa.string()))
    assert set_labels(sets).to_pylist() == ["China", "{India,Japan}"]
    assert set_labels(pa.chunked_array([sets])).type == pa.string()


# -- the marking ----------------------------------------------------------------------------


def _typing() -> Typing:
    return Typing((Attribute("age", "quasi", "continuous"), Attribute("country", "quasi", "nominal"),
                   Attribute("dis", "sensitive", "nominal", options={"grading": {"x": 1}})))


def test_mark_generalized_keeps_role_and_type_and_records_how_to_read():
    t = _typing()
    marked = mark_generalized(t, "age", "interval", lo="age_lo", hi="age_hi", res=1.0)
    marked = mark_generalized(marked, "country", "set", set="country_set")
    age = marked.get("age")
    assert (age.role, age.type) == ("quasi", "continuous")
    assert age.options[OPTION] == {"kind": "interval", "lo": "age_lo", "hi": "age_hi", "res": 1.0}
    assert generalization(marked, "country") == {"kind": "set", "set": "country_set"}
    assert structured_columns(marked, "age") == ["age_lo", "age_hi"]
    assert structured_columns(marked, "country") == ["country_set"]
    # the structured columns are declared (the engine refuses an undeclared output column)
    assert marked.names() == ["age", "country", "dis", "age_lo", "age_hi", "country_set"]
    assert marked.get("age_hi") == Attribute("age_hi", "insensitive", None, options={"structured": "age"})
    assert marked.get("country_set").options == {"structured": "country"}
    # ... once: a column already declared is left as it is
    declared = Typing((*t.attributes, Attribute("age_lo", "insensitive", None, options={"x": 1})))
    again = mark_generalized(declared, "age", "interval", lo="age_lo", hi="age_hi")
    assert again.names() == ["age", "country", "dis", "age_lo", "age_hi"]
    assert again.get("age_lo").options == {"x": 1}
    # the input typing is unchanged; unmarked and unknown columns read None
    assert generalization(t, "age") is None and generalization(marked, "dis") is None
    assert generalization(marked, "nope") is None and structured_columns(marked, "dis") == []
    # other options are kept
    h = mark_generalized(t, "dis", "hierarchy")
    assert h.get("dis").options == {"grading": {"x": 1}, OPTION: {"kind": "hierarchy"}}
    # a table answers like its typing, and the answer is a copy
    table = typed_table({"age": [30]}, quasi={"age": "continuous"})
    table = table.replace(typing=mark_generalized(table.typing, "age", "hierarchy"))
    info = generalization(table, "age")
    info["kind"] = "changed"
    assert generalization(table, "age") == {"kind": "hierarchy"}
    assert generalized_attribute(Attribute("a", "quasi", "ordinal", order=("x", "y")), "interval",
                                 lo="a_lo", hi="a_hi").order == ("x", "y")


@pytest.mark.parametrize("column, kind, info, fragment", [
    ("age", "range", {}, "unknown kind"),
    ("age", "interval", {"lo": "age_lo"}, "'hi'"),
    ("age", "set", {}, "'set'"),
    ("nope", "hierarchy", {}, "no typing"),
])
def test_mark_generalized_refuses_incomplete_markings(column, kind, info, fragment):
    with pytest.raises(ValueError, match=fragment):
        mark_generalized(_typing(), column, kind, **info)


# -- numeric_column -------------------------------------------------------------------------


def test_numeric_column_reads_numbers_and_numeric_text():
    t = typed_table({"i": [1, 2, 3], "f": [0.5, None, 2.0], "s": ["39", "40", None], "w": [" 7", "8 ", "1_0"],
                     "b": [True, False, True]}, quasi={"i": "continuous", "f": "continuous"})
    assert numeric_column(t, "i", metric="m").tolist() == [1.0, 2.0, 3.0]
    f = numeric_column(t, "f", metric="m")
    assert f[0] == 0.5 and np.isnan(f[1]) and f[2] == 2.0          # a suppressed cell (null) is NaN
    s = numeric_column(t, "s", metric="m")
    assert s[:2].tolist() == [39.0, 40.0] and np.isnan(s[2])        # level-0 hierarchy labels are numbers
    assert numeric_column(t, "w", metric="m").tolist() == [7.0, 8.0, 10.0]
    assert numeric_column(t, "b", metric="m").tolist() == [1.0, 0.0, 1.0]
    assert numeric_column(t, "i", metric="m").dtype == np.float64
    with pytest.raises(InputError, match="m: column 'x' is not in the table"):
        numeric_column(t, "x", metric="m")


def test_numeric_column_fails_in_one_line_on_generalized_labels():
    t = typed_table({"age": ["[30-39]", "[30-39]", "*"]}, quasi={"age": "continuous"})
    with pytest.raises(InputError) as err:
        numeric_column(t, "age", metric="sse-il")
    msg = str(err.value)
    assert msg.startswith("column 'age' is typed continuous but holds text ('[30-39]')")
    assert "sse-il needs numbers" in msg and "use a metric that reads generalized values" in msg
    assert "\n" not in msg
    marked = t.replace(typing=mark_generalized(t.typing, "age", "hierarchy"))
    with pytest.raises(InputError, match=r"\('\[30-39\]', published generalized as labels of its hierarchy\)"):
        numeric_column(marked, "age", metric="sse-il")
    lo_hi = t.replace(typing=mark_generalized(t.typing, "age", "interval", lo="age_lo", hi="age_hi"))
    with pytest.raises(InputError, match="intervals with bounds in 'age_lo' and 'age_hi'.*dld needs numbers: do X"):
        numeric_column(lo_hi, "age", metric="dld", hint="do X")
    lists = typed_table({"c": [["a", "b"]]}, quasi={"c": "continuous"})
    with pytest.raises(InputError, match=r"holds list<item: string> values \(\['a', 'b'\]"):
        numeric_column(lists, "c", metric="m")


# -- the regression, through the CLI -----------------------------------------------------------

WORKFLOW = """\
    name: generalized-metrics
    seed: 3
    sources:
      people: {path: people.csv}
    steps:
      typed:
        uses: typing
        input: people
        with:
          quasi: {age: continuous}
          sensitive: [dis]
      hier:
        uses: hierarchy
        input: typed
        with:
          age: {interval: [10, 20]}
      anon:
        uses: lattice
        input: hier
        with: {model: k-anonymity, model_params: {k: 5}, suppression: 0.0, utility: loss}
      scores:
        uses: evaluate
        input: [hier, anon]
        with: {metrics: [METRICS]}
      published:
        uses: publish
        input: anon
        with: {publisher: parquet, path: anon.parquet}
    """


def _project(tmp_path, metrics: str):
    # 100 distinct ages: k = 5 needs the 10-year bins, published as the labels "[20-30)" ...
    rows = ["age,dis"] + [f"{20 + i},{'abc'[i % 3]}" for i in range(100)]
    (tmp_path / "people.csv").write_text("\n".join(rows) + "\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(textwrap.dedent(WORKFLOW).replace("METRICS", metrics))
    return wf


@pytest.mark.parametrize("metric", ["sse-il", "dld"])
def test_a_numeric_metric_on_lattice_output_fails_in_one_line(cli, tmp_path, metric):
    wf = _project(tmp_path, metric)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "out")
    assert res.exit_code == 2, res.stderr   # an InputError: the input is wrong (a traceback would raise here)
    assert "Traceback" not in res.stderr and "ValueError" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert line.startswith("Error: ") and "step 'scores'" in line
    assert "column 'age' is typed continuous but holds text ('[" in line
    assert "published generalized as labels of its hierarchy" in line
    assert f"{metric} needs numbers" in line
    assert "use a metric that reads generalized values (loss, generalization-rl" in line


def test_lattice_output_carries_the_marking_and_loss_metrics_read_it(cli, tmp_path):
    wf = _project(tmp_path, "loss, generalization-rl, relative-loss")
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "out")
    assert res.exit_code == 0, res.output
    published = pq.read_table(tmp_path / "out" / "anon.parquet")
    assert set(published.column("age").to_pylist()) == {f"[{a}-{a + 10})" for a in range(20, 120, 10)}
    typing = Typing.from_json(json.loads(published.schema.metadata[b"anonflow.typing"]))
    age = typing.get("age")
    assert (age.role, age.type, age.options) == ("quasi", "continuous", {OPTION: {"kind": "hierarchy"}})
    assert generalization(typing, "dis") is None


# -- the lattice, in process -------------------------------------------------------------------


def _ages(n=60):
    t = typed_table({"age": [20 + i for i in range(n)], "dis": ["abc"[i % 3] for i in range(n)]},
                    quasi={"age": "continuous"}, sensitive={"dis": "nominal"})
    h = Intervals().build("age", t.column("age").combine_chunks(), {"widths": [10.0, 20.0], "anchor": None},
                          make_context())
    return t.replace(hierarchies={"age": h})


def _lattice(table, **given):
    params = validate_params(Lattice.params, {"model": "k-anonymity", "model_params": {"k": 5},
                                              "suppression": 0.0, **given})
    lattice = get_registry().get("algorithm", "lattice").obj  # it looks its models up in its registry
    lattice.check(params, table=table)
    return lattice.run(table, params, make_context())


def test_lattice_marks_every_published_quasi_identifier_as_hierarchy_labels():
    t = _ages()
    out = _lattice(t)
    assert generalization(out, "age") == {"kind": "hierarchy"}
    assert out.typing.get("age").type == "continuous" and out.typing.quasi == ["age"]
    assert generalization(out, "dis") is None
    labels = set(out.column("age").to_pylist())
    assert labels <= set(t.hierarchies["age"].level(1).to_pylist())
    # sse-il on it: the one-line error, not a crash
    with pytest.raises(InputError, match="column 'age' is typed continuous but holds text"):
        SseIl().compute(t, out, {"columns": None}, make_context())


def test_lattice_with_a_numeric_utility_metric_fails_in_one_line():
    with pytest.raises(InputError, match="published generalized as labels of its hierarchy.*sse-il needs numbers"):
        _lattice(_ages(), utility="sse-il")


# -- l-clustering: the same bytes as before ------------------------------------------------------


def _mixed(n=240, seed=5):
    rng = np.random.default_rng(seed)
    edu = ["HS", "Some", "BSc", "MSc", "PhD"]
    t = typed_table({"age": rng.integers(18, 90, n).tolist(),
                     "w": np.round(rng.normal(50, 10, n), 2).tolist(),
                     "edu": rng.choice(edu, n).tolist(),
                     "country": rng.choice(["China", "India", "Japan", "Peru", "Chad"], n).tolist(),
                     "dis": rng.choice(["a", "b", "c", "d"], n).tolist()},
                    quasi={"age": "continuous", "w": "continuous", "edu": "ordinal", "country": "nominal"},
                    sensitive={"dis": "nominal"})
    attrs = [Attribute(a.name, a.role, a.type, order=tuple(edu)) if a.name == "edu" else a
             for a in t.typing.attributes]
    return t.replace(typing=t.typing.replace(attrs))


@pytest.mark.parametrize("seed", [5, 6])
def test_l_clustering_publishes_what_the_kernel_renderer_did(seed):
    t = _mixed(seed=seed)
    p = {"l": 3, "weights": None, "resolution": None}
    out = LClustering().run(t, p, make_context(seed=seed))
    # the renderer l-clustering used before the helpers, on the same classes
    space = qi_space(t)
    labels = out.column("_class").to_numpy()
    reps = Generalized.from_labels(space.records(), labels)
    before = render(reps, space.domain, space.categories, labels=labels, ordinal_labels=space.ordinal_labels)
    for q in ("age", "w", "edu", "country"):
        assert out.column(q).type == pa.string()
        assert out.column(q).to_pylist() == before[q].tolist(), q
    assert any(v.startswith("[") for v in out.column("w").to_pylist())
    assert any(".." in v for v in out.column("edu").to_pylist())
    assert any(v.startswith("{") for v in out.column("country").to_pylist())
    # each label is the helpers' label of the structured columns beside it
    d = out.data
    for lo, hi, text in zip(d.column("age_lo").to_pylist(), d.column("age_hi").to_pylist(),
                            d.column("age").to_pylist()):
        assert interval_label(lo, hi) == text
    for lo, hi, text in zip(d.column("edu_lo").to_pylist(), d.column("edu_hi").to_pylist(),
                            d.column("edu").to_pylist()):
        assert interval_label(lo, hi) == text
    for members, text in zip(d.column("country_set").to_pylist(), d.column("country").to_pylist()):
        assert set_label(members) == text
    # the marking, as before
    assert generalization(out, "age") == {"kind": "interval", "lo": "age_lo", "hi": "age_hi", "res": 1.0}
    assert generalization(out, "edu") == {"kind": "interval", "lo": "edu_lo", "hi": "edu_hi", "res": 1.0}
    assert generalization(out, "country") == {"kind": "set", "set": "country_set"}
    assert out.typing.get("country_set").options == {"structured": "country"}
    # and numeric metrics say what is wrong instead of crashing
    with pytest.raises(InputError, match="intervals with bounds in 'age_lo' and 'age_hi'"):
        numeric_column(out, "age", metric="sse-il")


def test_classification_accuracy_reads_intervals_by_their_midpoints():
    pytest.importorskip("sklearn")
    base = {"label": "dis", "features": ["age", "w"], "folds": 3, "seed": 0, "max_iter": 200,
            "classifier": "tree"}
    out = LClustering().run(_mixed(n=300, seed=9), {"l": 3, "weights": None, "resolution": None}, make_context())
    out = out.replace(typing=out.typing.replace(
        [Attribute("dis", "label", "nominal") if a.name == "dis" else a for a in out.typing.attributes]))
    res = ClassificationAccuracy().compute(None, out, base, make_context())
    assert 0.0 <= res["classification-accuracy"] <= 1.0 and res["classification-accuracy.features"] == 2.0
    # the midpoints are what the classifier saw: the same score as on a table holding them as numbers
    mid = {"age": ((np.array(out.column("age_lo").to_pylist()) + np.array(out.column("age_hi").to_pylist())) / 2),
           "w": ((np.array(out.column("w_lo").to_pylist()) + np.array(out.column("w_hi").to_pylist())) / 2)}
    plain = typed_table({"age": mid["age"].tolist(), "w": mid["w"].tolist(), "dis": out.column("dis").to_pylist()},
                        quasi={"age": "continuous", "w": "continuous"}, label={"dis": "nominal"})
    assert ClassificationAccuracy().compute(None, plain, base, make_context())["classification-accuracy"] == \
        pytest.approx(res["classification-accuracy"])


class Decades(Algorithm):
    """The example of the docs section "Publishing generalized values", as printed there."""
    name = "example.decades"
    version = "1.0.0"
    description = "Each age published as its decade, [30-39], with the bounds beside it."

    def run(self, table, params, ctx):
        age = numeric_column(table, "age", metric=self.name)   # one clear line if age holds labels
        lo = np.floor(age / 10) * 10
        hi = lo + 9
        data = table.data
        labels = pa.array(interval_labels(lo, hi).tolist(), type=pa.string())
        data = data.set_column(data.column_names.index("age"), "age", labels)
        data = data.append_column("age_lo", pa.array(lo)).append_column("age_hi", pa.array(hi))
        classes = np.unique(lo, return_inverse=True)[1].ravel().astype(np.int64)
        data = data.append_column(CLASS, pa.array(classes))
        # age keeps its role and type; age_lo and age_hi are declared (role insensitive) with it
        typing = mark_generalized(table.typing, "age", "interval", lo="age_lo", hi="age_hi")
        return table.replace(data=data, typing=typing)


def test_docs_section_example_publishes_intervals_by_the_convention():
    t = typed_table({"age": [31, 35, 52, 58]}, quasi={"age": "continuous"})
    out = Decades().run(t, {}, make_context())
    assert out.column("age").to_pylist() == ["[30-39]", "[30-39]", "[50-59]", "[50-59]"]
    assert out.column("age_lo").to_pylist() == [30, 30, 50, 50] and out.column("age_hi").to_pylist() == [39, 39, 59, 59]
    assert out.typing.get("age").type == "continuous"
    assert generalization(out, "age") == {"kind": "interval", "lo": "age_lo", "hi": "age_hi"}
    assert structured_columns(out, "age") == ["age_lo", "age_hi"]
    assert out.typing.get("age_lo").role == "insensitive"
    # run again on its own output: the one line, not a crash
    with pytest.raises(InputError, match="example.decades needs numbers"):
        Decades().run(out, {}, make_context())
