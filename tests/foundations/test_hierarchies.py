"""Hierarchies (SPEC section 2): ARX files load unchanged, built hierarchies are right, and a
bad hierarchy is a one-line error naming the file, column and value."""

import json

import pyarrow as pa
import pytest

from anonflow.errors import InputError
from anonflow.hierarchy import Hierarchy, value_keys
from anonflow.testing import make_context
from anonflow_std.generalization.hierarchies import ArxFile, Intervals, Masking, Taxonomy

from tests.support.helpers import DATA, write

ARX = DATA / "arx"
ATTRIBUTES = ["age", "education", "marital-status", "native-country", "occupation", "race", "salary-class",
              "sex", "workclass"]
LEVELS = {"age": 5, "education": 4, "marital-status": 3, "native-country": 3, "occupation": 3, "race": 2,
          "salary-class": 2, "sex": 2, "workclass": 3}


@pytest.mark.parametrize("attribute", ATTRIBUTES)
def test_arx_files_load_unchanged_and_cover_arx_adult(attribute, arx_adult):
    path = ARX / f"adult_hierarchy_{attribute}.csv"
    h = ArxFile().build(attribute, pa.array([]), {"file": str(path), "delimiter": ";"}, make_context())
    assert h.height + 1 == LEVELS[attribute]
    raw_rows = [line.split(";") for line in path.read_text().splitlines() if line]
    assert h.table.num_rows == len(raw_rows)
    assert sorted(map(tuple, raw_rows)) == sorted(tuple(r.values()) for r in h.table.to_pylist())
    h.validate("w")
    h.check_covers(arx_adult.column(attribute), "w")
    assert set(h.level(h.height).to_pylist()) == {"*"}


def test_generalize_is_a_vectorized_lookup():
    h = Hierarchy.from_levels("zip", [["12555", "12556", "13001"], ["1255*", "1255*", "1300*"],
                                      ["125**", "125**", "130**"]])
    values = pa.array(["13001", "12555", "12555"])
    assert h.generalize(values, 1).to_pylist() == ["1300*", "1255*", "1255*"]
    assert h.generalize(values, 0).to_pylist() == ["13001", "12555", "12555"]
    assert h.leaves_under(1).tolist() == [2, 2, 1]
    assert value_keys(pa.array([17.0, 30.0])).to_pylist() == ["17", "30"]


def test_interval_hierarchy_nests_bins():
    h = Intervals().build("age", pa.array([17, 23, 40, 90]), {"widths": [5, 10, 20], "anchor": 0}, make_context())
    rows = {r["level0"]: list(r.values())[1:] for r in h.table.to_pylist()}
    assert rows["23"] == ["[20-25)", "[20-30)", "[20-40)", "*"]
    assert rows["40"] == ["[40-45)", "[40-50)", "[40-60)", "*"]
    h.validate("w")
    with pytest.raises(InputError, match="must nest: 15 is not a multiple of 10"):
        Intervals().build("age", pa.array([1]), {"widths": [10, 15], "anchor": None}, make_context())


def test_masking_hierarchy_masks_one_more_symbol_per_level():
    h = Masking().build("zip", pa.array(["12555", "13001"]), {"levels": None, "symbol": "*"}, make_context())
    assert h.table.to_pylist()[0] == {"level0": "12555", "level1": "1255*", "level2": "125**", "level3": "12***",
                                      "level4": "1****", "level5": "*****"}
    h2 = Masking().build("zip", pa.array([12555, 13001]), {"levels": 2, "symbol": "*"}, make_context())
    assert h2.height == 2
    with pytest.raises(InputError, match="codes of one length"):
        Masking().build("zip", pa.array(["1255", "13001"]), {"levels": None, "symbol": "*"}, make_context())


def test_taxonomy_pads_shallow_leaves_at_the_bottom():
    tree = {"Europe": {"West": ["France", "Germany"], "East": ["Poland"]}, "Asia": ["China"]}
    h = Taxonomy().build("country", pa.array([]), {"tree": tree}, make_context())
    rows = {r["level0"]: list(r.values()) for r in h.table.to_pylist()}
    assert rows["France"] == ["France", "West", "Europe", "*"]
    assert rows["China"] == ["China", "China", "Asia", "*"]
    h.validate("w")


def test_a_value_missing_from_the_hierarchy_is_named(tmp_path):
    f = write(tmp_path / "h.csv", "a;x;*\nb;x;*\n")
    h = ArxFile().build("col", pa.array([]), {"file": str(f), "delimiter": ";"}, make_context())
    with pytest.raises(InputError, match=r"hierarchy of 'col' \(h.csv\) has no row for the value 'c'"):
        h.check_covers(pa.array(["a", "c"]), "w", "h.csv")


def test_a_non_functional_hierarchy_is_named(tmp_path):
    f = write(tmp_path / "h.csv", "a;x;p\nb;x;q\n")
    h = ArxFile().build("col", pa.array([]), {"file": str(f), "delimiter": ";"}, make_context())
    with pytest.raises(InputError, match="not a function of the level below: at level 1, 'x' maps to both 'p' and 'q'"):
        h.validate("w")
    f2 = write(tmp_path / "h2.csv", "a;x\na;y\n")
    h2 = ArxFile().build("col", pa.array([]), {"file": str(f2), "delimiter": ";"}, make_context())
    with pytest.raises(InputError, match="listed twice with different generalizations"):
        h2.validate("w")


def test_ragged_hierarchy_file_is_an_error(tmp_path):
    f = write(tmp_path / "h.csv", "a;x;*\nb;*\n")
    with pytest.raises(InputError, match="cannot read hierarchy file"):
        ArxFile().build("col", pa.array([]), {"file": str(f), "delimiter": ";"}, make_context())


def hierarchy_workflow(folder, body):
    (folder / "data").mkdir(exist_ok=True)
    return write(folder / "wf.yaml", f"""
        name: hier
        sources:
          adult: {{path: {DATA / 'arx' / 'adult.csv'}, delimiter: ";"}}
        steps:
          typed:
            uses: typing
            input: adult
            with: {{quasi: [age, education, sex], sensitive: [occupation], others: drop}}
          hier:
            uses: hierarchy
            input: typed
            with:
        {body}
        """)


def test_hierarchy_step_stores_hierarchies_with_lineage_and_cli_shows_them(cli, tmp_path):
    wf = hierarchy_workflow(tmp_path, f"""
              age: {{interval: {{widths: [5, 10, 20], anchor: 0}}}}
              education: {{arx: {ARX / 'adult_hierarchy_education.csv'}}}
              sex: {{taxonomy: [Female, Male]}}
    """)
    db = tmp_path / "s.duckdb"
    res = cli("run", wf, "--db", db, "--json")
    assert res.exit_code == 0, res.output
    listing = cli("hierarchy", "show", "hier", "--db", db)
    assert "education" in listing.output and "levels 0..3" in listing.output
    shown = json.loads(cli("hierarchy", "show", "hier", "education", "--db", db, "--json").output)
    assert {"level0": "Masters", "level1": "Graduate", "level2": "Higher education", "level3": "*"} \
        in shown["rows"]
    run = json.loads(cli("runs", json.loads(res.output)["run_id"], "--db", db, "--json").output)
    step = next(s for s in run["steps"] if s["step"] == "hier")
    assert len(step["params"]["education"]["files"]["file"]) == 64  # the file's sha256 is in the lineage
    # a hierarchy file edited in place changes the fingerprint: the step is not served from the cache
    f = ARX / "adult_hierarchy_education.csv"
    copy = write(tmp_path / "edu.csv", f.read_text())
    wf.write_text(wf.read_text().replace(str(f), str(copy)))
    cli("run", wf, "--db", db)
    assert json.loads(cli("run", wf, "--db", db, "--json").output)["steps"][2]["status"] == "cached"
    copy.write_text(copy.read_text().replace("Graduate;", "Grad;"))
    assert json.loads(cli("run", wf, "--db", db, "--json").output)["steps"][2]["status"] == "succeeded"


@pytest.mark.parametrize("body, fragment", [
    ("      age: {interval: [5, 7]}", "interval widths must nest"),
    ("      age: {intervl: [5]}", "unknown hierarchy 'intervl' (did you mean 'interval'?)"),
    ("      age: {arx: nothere.csv}", "hierarchy file not found"),
    ("      agee: {interval: [5]}", "column 'agee' is not in input 'typed' (did you mean 'age'?)"),
    (f"      education: {{arx: {ARX / 'adult_hierarchy_sex.csv'}}}", "has no row for the value"),
])
def test_bad_hierarchy_steps(cli, tmp_path, body, fragment):
    res = cli("run", hierarchy_workflow(tmp_path, body), "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert fragment in res.output and res.output.count("\n") == 1
