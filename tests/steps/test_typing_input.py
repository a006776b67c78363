"""Hostile input at the typing step and at the sources, driven through the command line.

* Spellings of "missing" (NA, null, ?, -, ...) in a quasi-identifier, sensitive or label
  column must be declared (``missing_values`` or ``not_missing``); whitespace-only cells are
  always missing.
* Columns nobody declared are dropped (``others: drop``, the default); with ``others:
  insensitive`` an undeclared column that looks like an identifier stops the run.
* Bad source files: empty, blank, header-only, a repeated header name, a BOM, an empty Parquet.
"""

import json

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest



def workflow(folder, typing: str, source: str = "{path: d.csv}", publish: bool = True):
    text = (f"name: hostile\nseed: 1\nsources:\n  d: {source}\nsteps:\n"
            f"  typed:\n    uses: typing\n    input: d\n    with: {typing}\n")
    if publish:
        text += "  published:\n    uses: publish\n    input: typed\n    with: {publisher: csv, path: t.csv}\n"
    path = folder / "wf.yaml"
    path.write_text(text)
    return path


def run(cli, folder, *extra):
    return cli("run", folder / "wf.yaml", "--db", folder / "s.duckdb", "--out-dir", folder / "o", *extra)


def one_error_line(res, *fragments):
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1, res.output
    assert "Traceback" not in res.output
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


# -- missing-value spellings -------------------------------------------------------------

SPELLINGS = ["NA", "N/A", "null", "NULL", "None", "NaN", "?", "-"]


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("role", ["quasi", "sensitive"])
def test_an_undeclared_missing_spelling_stops_the_typing_step(cli, tmp_path, spelling, role):
    (tmp_path / "d.csv").write_text("zip,disease\n" + "".join(
        f"Z{i % 3},{spelling if i in (2, 5) else ['flu', 'cold', 'ulcer'][i % 3]}\n" for i in range(9)))
    workflow(tmp_path, "{quasi: [zip, disease]}" if role == "quasi" else "{quasi: [zip], sensitive: [disease]}")
    for res in (run(cli, tmp_path), cli("plan", tmp_path / "wf.yaml")):
        one_error_line(res, "step 'typed'", f"column 'disease' holds {spelling!r} 2 time(s)",
                       "a common spelling of a missing value",
                       f"missing_values: [{spelling!r}]", f"not_missing: [{spelling!r}]")
    assert not (tmp_path / "o").exists()


def test_declared_spellings_are_missing_or_real_as_the_workflow_says(cli, tmp_path):
    (tmp_path / "d.csv").write_text("zip,disease\n" + "".join(
        f"Z{i % 2},{['flu', 'NA', 'None', 'cold'][i % 4]}\n" for i in range(8)))
    # NA is missing (a category here), None is a real value (no disease)
    workflow(tmp_path, "{quasi: [zip], sensitive: [disease], missing: category, missing_values: [NA], "
                       "not_missing: [None]}")
    res = run(cli, tmp_path, "--json")
    assert res.exit_code == 0, res.output
    published = pacsv.read_csv(tmp_path / "o" / "t.csv")
    assert sorted(published.column("disease").to_pylist()) == ["?", "?", "None", "None", "cold", "cold",
                                                              "flu", "flu"]


def test_whitespace_only_cells_are_always_missing(cli, tmp_path):
    (tmp_path / "d.csv").write_text("zip,disease\nZ1,flu\nZ1,\"   \"\nZ2,cold\nZ2,\"\t\"\n")
    workflow(tmp_path, "{quasi: [zip], sensitive: [disease]}")
    one_error_line(run(cli, tmp_path), "column 'disease' has 2 missing value(s), the first in record 2")
    workflow(tmp_path, "{quasi: [zip], sensitive: [disease], missing: drop}")
    res = run(cli, tmp_path, "--json")
    assert res.exit_code == 0, res.output
    assert pacsv.read_csv(tmp_path / "o" / "t.csv").column("disease").to_pylist() == ["flu", "cold"]


def test_nan_in_a_number_column_is_missing(cli, tmp_path):
    (tmp_path / "d.csv").write_text("age,sex\n30,F\nNaN,M\n40,F\n")  # DuckDB reads NaN as a float NaN
    workflow(tmp_path, "{quasi: [age, sex]}")
    one_error_line(run(cli, tmp_path), "column 'age' has 1 missing value(s), the first in record 2")
    workflow(tmp_path, "{quasi: [age, sex], missing: drop}")
    assert run(cli, tmp_path).exit_code == 0
    assert pacsv.read_csv(tmp_path / "o" / "t.csv").column("age").to_pylist() == [30.0, 40.0]


@pytest.mark.parametrize("typing, fragment", [
    ("{quasi: [zip], missing_values: [NA], not_missing: [NA]}",
     "'NA' is listed under both missing_values and not_missing"),
    ("{quasi: [zip], missing: category, not_missing: ['?']}",
     "not_missing lists '?', but missing: category writes '?' for a missing value"),
])
def test_contradicting_missing_declarations(cli, tmp_path, typing, fragment):
    (tmp_path / "d.csv").write_text("zip\nA\nB\n")
    workflow(tmp_path, typing)
    one_error_line(cli("plan", tmp_path / "wf.yaml"), "step 'typed'", fragment)


def test_insensitive_columns_are_not_checked_for_spellings(cli, tmp_path):
    (tmp_path / "d.csv").write_text("zip,comment\nA,NA\nB,fine\n")
    workflow(tmp_path, "{quasi: [zip], insensitive: [comment]}")
    res = run(cli, tmp_path)
    assert res.exit_code == 0, res.output
    assert pacsv.read_csv(tmp_path / "o" / "t.csv", convert_options=pacsv.ConvertOptions(
        strings_can_be_null=False)).column("comment").to_pylist() == ["NA", "fine"]


# -- undeclared columns --------------------------------------------------------------------


def _households(path, n=30):
    path.write_text("hhid,age,sex,income\n" + "".join(f"H{1000 + i},{20 + i % 40},{'FM'[i % 2]},{i % 5}\n"
                                                      for i in range(n)))


def test_undeclared_columns_are_dropped_by_default_and_noted(cli, tmp_path):
    _households(tmp_path / "d.csv")
    workflow(tmp_path, "{quasi: [age, sex]}")
    res = run(cli, tmp_path, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert pacsv.read_csv(tmp_path / "o" / "t.csv").column_names == ["age", "sex"]
    notes = next(s for s in out["steps"] if s["step"] == "typed")["notes"]
    assert "columns not named in the typing were dropped (others: drop): hhid, income" in notes


@pytest.mark.parametrize("column, header, values, why", [
    ("hhid", "hhid", lambda i: f"H{i % 3}", "its name says so"),
    ("record_id", "record_id", lambda i: str(i % 4), "its name says so"),
    ("Email", "Email", lambda i: f"u{i % 2}@x", "its name says so"),
    ("code", "code", lambda i: f"C{i:04d}", "its values are distinct for 30 of 30 records"),
])
def test_others_insensitive_refuses_an_undeclared_identifier(cli, tmp_path, column, header, values, why):
    (tmp_path / "d.csv").write_text(f"{header},age\n" + "".join(f"{values(i)},{20 + i % 3}\n" for i in range(30)))
    workflow(tmp_path, "{quasi: [age], others: insensitive}")
    for res in (run(cli, tmp_path), cli("plan", tmp_path / "wf.yaml")):
        one_error_line(res, "step 'typed'", f"column {column!r} is named in no role and {why}",
                       "declare it under 'identifier' (dropped) or under 'insensitive'")
    assert not (tmp_path / "o" / "t.csv").exists()


def test_others_insensitive_publishes_harmless_columns_and_a_declared_id_with_a_note(cli, tmp_path):
    _households(tmp_path / "d.csv")
    workflow(tmp_path, "{quasi: [age, sex], insensitive: [hhid], others: insensitive}")
    res = run(cli, tmp_path, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert pacsv.read_csv(tmp_path / "o" / "t.csv").column_names == ["hhid", "age", "sex", "income"]
    notes = next(s for s in out["steps"] if s["step"] == "typed")["notes"]
    assert any("column 'hhid' is declared insensitive and is published as it is, though its name says so" in n
               for n in notes), notes
    # paid / PAID.UP.CAPITAL end in "id" but are no identifiers
    (tmp_path / "d.csv").write_text("paid,PAID.UP.CAPITAL,age\n" + "".join(f"{i % 2},{i % 3},{i}\n" for i in range(9)))
    workflow(tmp_path, "{quasi: [age], others: insensitive}")
    assert run(cli, tmp_path).exit_code == 0


# -- bad source files ------------------------------------------------------------------------


@pytest.mark.parametrize("content, fragment", [
    (b"", "d.csv is empty (0 bytes): no header and no records"),
    (b"\n\n   \n", "d.csv holds only blank lines: no header and no records"),
    (b"age,sex\n", "d.csv has a header but no records"),
    (b"age,sex\n\n\n", "d.csv has a header but no records"),
    (b"age,sex,age\n30,F,31\n40,M,41\n", "names column 'age' twice, columns 1 and 3"),
    (b"age,Age\n30,31\n", "names column 'age' twice (as 'Age': names ignore case), columns 1 and 2"),
    (b"age,,sex\n30,1,F\n", "has no name for column 2"),
])
def test_bad_csv_files_are_one_clear_line(cli, tmp_path, content, fragment):
    (tmp_path / "d.csv").write_bytes(content)
    workflow(tmp_path, "{quasi: [age]}")
    for res in (run(cli, tmp_path), cli("plan", tmp_path / "wf.yaml"),
                cli("plan", tmp_path / "wf.yaml", "--no-preview")):
        one_error_line(res, "source 'd'", fragment)


def test_a_byte_order_mark_is_not_part_of_the_first_name(cli, tmp_path):
    (tmp_path / "d.csv").write_bytes(b"\xef\xbb\xbfage,sex\n30,F\n40,M\n")
    workflow(tmp_path, "{quasi: [age, sex]}")
    res = run(cli, tmp_path)
    assert res.exit_code == 0, res.output
    assert pacsv.read_csv(tmp_path / "o" / "t.csv").column_names == ["age", "sex"]


def test_a_parquet_file_without_records(cli, tmp_path):
    pq.write_table(pa.table({"age": pa.array([], pa.int64())}), tmp_path / "d.parquet")
    workflow(tmp_path, "{quasi: [age]}", source="{path: d.parquet}")
    for res in (run(cli, tmp_path), cli("plan", tmp_path / "wf.yaml")):
        one_error_line(res, "source 'd'", "d.parquet has no records")
