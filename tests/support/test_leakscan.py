"""The leak scanner (tests/support/leakscan.py) on hand-made bytes and a hand-made output folder: what
it finds, what it must not, and that a planted leak fails the check. No workflow runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support import leakscan
from tests.support.leakscan import distinctive_values, original_rows, release_leaks, scan


def _table(**cols: list[str]) -> pa.Table:
    return pa.table({k: pa.array(v, pa.string()) for k, v in cols.items()})


@pytest.mark.parametrize("text,distinctive", [
    ("39", False), ("2174", False), ("Male", False), ("?", False), ("NULL", False), ("", False), ("-----", False),
    ("77516", True), ("-18931", True), ("183523.8", True), ("1996-01-01", True), ("12.34", False),
    ("White", True), ("Never-married", True), ("<=50K", True), (">50K", False),
])
def test_the_distinctive_rule(text, distinctive):
    assert leakscan.is_distinctive(text) is distinctive


def test_distinctive_values_leave_out_the_allowed_and_the_short():
    t = _table(name=["Alice Smith", "Bob", "Alice Smith", "?"], zip=["12345", "1234", "98765", "NA"])
    assert distinctive_values(t, ["name", "zip"]) == {"Alice Smith", "12345", "98765"}
    assert distinctive_values(t, ["name", "zip"], allowed={"98765"}) == {"Alice Smith", "12345"}


def test_a_value_is_found_as_a_whole_token():
    data = b"id,amount\n1,12345\n2,Private\n"
    assert scan(data, {"12345", "Private", "54321"}) == {"12345", "Private"}


@pytest.mark.parametrize("data", [b"112345", b"123456", b"12345.5", b"0.12345", b"abc_12345", b"x12345",
                                  b"A12345B"])
def test_a_number_inside_a_longer_token_is_not_found(data):
    assert scan(b"a " + data + b" b", {"12345"}) == set()


@pytest.mark.parametrize("data", [b"12345", b"12345.0", b"-12345", b'"12345"', b"<td>12345</td>", b"[10000-12345]",
                                  b"{'v': 12345}", b"12345."])
def test_a_number_written_otherwise_is_found(data):
    assert scan(b"a " + data + b" b", {"12345"}) == {"12345"}


def test_words_are_not_found_inside_words():
    assert scan(b"Female, Other-service, Privately, private", {"Male", "Other", "Private"}) == set()
    assert scan(b"Female, Other-service", {"Female", "Other-service"}) == {"Female", "Other-service"}


def test_a_value_of_several_words_is_found():
    data = b"<p>utility: Alaska Electric Light&amp;Power Co, state AK</p>"
    values = {"Alaska Electric Light&Power Co", "Alaska Electric", "Electric Light", "Power Co Ltd", "Juneau Hydro"}
    assert scan(data, values) == {"Alaska Electric Light&Power Co", "Alaska Electric", "Electric Light"}
    # exactly: the same words with other separators are not the value
    assert scan(b"Alaska/Electric", {"Alaska Electric"}) == set()
    assert scan(b"Alaska/Electric", {"Alaska Electric"}, exact=False) == {"Alaska Electric"}


def test_a_value_with_signs_is_found_only_as_written():
    assert scan(b"income &lt;=50K here", {"<=50K"}) == {"<=50K"}
    assert scan(b"income >50K here", {"<=50K"}) == set()


def test_a_whole_record_is_found_with_any_separators():
    original = _table(age=["39", "50"], work=["State-gov", "Self-emp-not-inc"], wgt=["77516", "83311"])
    rows = original_rows(original, ["age", "work", "wgt"])
    assert rows == {"39,State-gov,77516", "50,Self-emp-not-inc,83311"}
    for data in (b"x\n39,State-gov,77516\ny", b"<tr><td>39</td><td>State-gov</td><td>77516</td></tr>",
                 b'{"row": [39, "State-gov", 77516]}', b"39;State-gov;77516"):
        assert scan(data, rows, exact=False) == {"39,State-gov,77516"}, data
    assert scan(b"39,State-gov,775160 50,Self-emp-inc,83311", rows, exact=False) == set()
    assert original_rows(_table(a=["39", "40"], b=["1", "2"], c=["2", "Bachelors"]), ["a", "b", "c"]) == {
        "40,2,Bachelors"}  # three short numbers are any row of a table of figures


def test_a_record_across_chunks_is_found(monkeypatch):
    monkeypatch.setattr(leakscan, "CHUNK", 64)
    rows = {"39,State-gov,Bachelors,77516"}
    data = b"filler " * 7 + b"39,State-gov,Bachelors,77516" + b" more" * 20
    assert scan(data, rows, exact=False) == rows
    assert scan(data, {"77516", "Bachelors"}) == {"77516", "Bachelors"}


def test_binary_bytes_are_scanned():
    data = bytes(range(256)) * 50 + b"\x00\x0512345\x00Never-married\xff\xfe" + bytes(range(256))
    assert scan(data, {"12345", "Never-married", "Divorced"}) == {"12345", "Never-married"}


def test_scan_release_reports_what_leaked_where(tmp_path):
    original = _table(age=["39", "50"], wgt=["77516", "83311"], job=["Adm-clerical", "Exec-managerial"])
    report = tmp_path / "report.html"
    report.write_text("<html><td>83311</td> <p>Adm-clerical</p></html>")
    clean = tmp_path / "manifest.json"
    clean.write_text('{"rows": 2, "k": 5}')
    found = leakscan.scan_release([report, clean], original, ["wgt", "job"], published={"Adm-clerical"},
                                  rows=["age", "wgt", "job"])
    assert found == {report: {"83311"}}


# -- a hand-made workflow and output folder ------------------------------------------------


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A workflow typing a small source (an identifier, an undeclared column, two QIs, a
    sensitive attribute; an ARX-style hierarchy file), and an output folder holding what a clean
    run would publish: a generalized CSV, a Parquet copy, a manifest and a report."""
    wf = tmp_path / "wf"
    (wf / "data").mkdir(parents=True)
    (wf / "data" / "people.csv").write_text(textwrap.dedent("""\
        ssn;name;zip;job;salary
        123-45-6789;Alice Smith;13053;Adm-clerical;48210
        987-65-4321;Bob Jones;13068;Exec-managerial;91377
        555-12-3456;Carol White;14850;Adm-clerical;48210
        """))
    (wf / "data" / "zip.csv").write_text("13053;130**;1****\n13068;130**;1****\n14850;148**;1****\n")
    (wf / "w.yaml").write_text(textwrap.dedent("""\
        name: w
        sources:
          people: {path: data/people.csv, delimiter: ";"}
        steps:
          typed:
            uses: typing
            input: people
            with:
              quasi: [zip, job]
              sensitive: [salary]
              identifier: [ssn]
          hier:
            uses: hierarchy
            input: typed
            with:
              zip: {arx: data/zip.csv}
        """))
    out = tmp_path / "out"
    (out / "release").mkdir(parents=True)
    published = "zip,job,salary\n1****,Adm-clerical,48210\n1****,Exec-managerial,91377\n1****,Adm-clerical,48210\n"
    (out / "w.csv").write_text(published)
    pq.write_table(_table(zip=["1****"] * 3, job=["Adm-clerical", "Exec-managerial", "Adm-clerical"],
                          salary=["48210", "91377", "48210"]), out / "release" / "published.parquet")
    (out / "release" / "manifest.json").write_text('{"rows": 3, "hierarchy": ["13053", "130**"]}')
    (out / "release" / "report.html").write_text("<html><body><h1>Release</h1><td>1****</td> k = 3</body></html>")
    return wf / "w.yaml", out


def test_a_clean_output_folder_passes(tmp_path):
    workflow, out = _project(tmp_path)
    found = leakscan.assert_release_leaks_nothing(workflow, out)
    # zip codes are hierarchy labels (domain metadata); the identifier and the undeclared name are dropped
    assert found.checked == 0 and found.dropped == 6 and found.rows == 3 and found.files == 4


def test_roles_follow_the_typing_step(tmp_path):
    workflow, _ = _project(tmp_path)
    import yaml
    roles = leakscan.workflow_roles(yaml.safe_load(workflow.read_text()), ["ssn", "name", "zip", "job", "salary"])
    assert roles.rows == ["zip", "job", "salary"] and roles.kept == ["zip", "job", "salary"]
    assert roles.dropped == ["ssn", "name"]


@pytest.mark.parametrize("plant,where,what", [
    ("<td>Bob Jones</td>", "release/report.html", "dropped columns"),            # an undeclared column
    ("ssn 987-65-4321", "release/report.html", "dropped columns"),             # an identifier
    ('"ssn": "555-12-3456"', "release/manifest.json", "dropped columns"),
    ("<td>13068</td><td>Exec-managerial</td><td>91377</td>", "release/report.html", "original records"),
    ("example: 13068;Exec-managerial;91377", "README.txt", "original records"),
])
def test_a_planted_leak_is_caught(tmp_path, plant, where, what):
    workflow, out = _project(tmp_path)
    path = out / where
    path.write_text((path.read_text() if path.exists() else "") + plant)
    found = release_leaks(workflow, out)
    assert any(p.startswith(where) and what in p for p in found.problems), found.problems
    with pytest.raises(AssertionError, match=what):
        leakscan.assert_release_leaks_nothing(workflow, out)


def test_a_dropped_column_in_a_data_file_is_caught(tmp_path):
    workflow, out = _project(tmp_path)
    (out / "w.csv").write_text("name,zip\nAlice Smith,1****\n")
    assert any(p.startswith("w.csv") and "'Alice Smith'" in p for p in release_leaks(workflow, out).problems)


def test_an_unpublished_value_in_the_report_is_caught_and_a_published_one_is_not(tmp_path):
    workflow, out = _project(tmp_path)
    # salary 91377 is in the published tables: a report may show it; 13068 only as a hierarchy label
    report = out / "release" / "report.html"
    report.write_text(report.read_text() + "<td>13068</td><td>Adm-clerical</td><td>91377</td>")
    assert release_leaks(workflow, out).problems == []
    # publish the salaries coarsened: the original amounts are then a leak in the report
    (out / "w.csv").write_text("zip,job,salary\n1****,Adm-clerical,40000-49999\n1****,Exec-managerial,90000+\n")
    (out / "release" / "published.parquet").unlink()
    problems = release_leaks(workflow, out).problems
    assert problems and all(p.startswith("release/report.html") for p in problems), problems
    assert "['91377']" in problems[0]
