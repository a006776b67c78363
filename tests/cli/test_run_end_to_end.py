"""End-to-end: workflow files run from the command line, as a user would."""

import hashlib
import json
import re
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from tests.support.helpers import CENSUS_QI, census_workflow


def run_json(cli, *args):
    res = cli("run", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_run_prints_metrics_and_outputs(cli, project):
    wf = census_workflow(project)
    db = project / "s.duckdb"
    out = run_json(cli, wf, "--db", db)
    assert out["status"] == "succeeded"
    assert abs(out["metrics"]["scores.sse-il"] - 9.09) < 0.05
    assert out["metrics"]["scores.k-anonymity"] >= 5
    assert out["metrics"]["scores.k-anonymity.holds"] == 1.0
    (published,) = out["outputs"]
    assert published["rows"] == 1080
    assert published["sha256"] == sha(published["path"])
    table = pq.read_table(published["path"])
    assert set(table.column_names) == set(CENSUS_QI) | {"_class"}
    # the human summary names the metrics and where the outputs went
    res = cli("run", wf, "--db", db)
    assert res.exit_code == 0
    assert "scores.sse-il" in res.output and "out/census.parquet" in res.output


def test_set_sweeps_k_without_editing_the_file(cli, project):
    wf = census_workflow(project)
    db = project / "s.duckdb"
    il = {k: run_json(cli, wf, "--db", db, "--set", f"grouped.k={k}")["metrics"]["scores.sse-il"] for k in (3, 10)}
    assert abs(il[3] - 5.69) < 0.05 and abs(il[10] - 14.16) < 0.05


def test_same_workflow_and_seed_give_byte_identical_outputs(cli, project):
    wf = census_workflow(project, extra="""
        csv: {uses: publish, input: grouped, with: {publisher: csv, path: census.csv}}
    """)
    a = run_json(cli, wf, "--db", project / "a.duckdb", "--out-dir", project / "a")
    b = run_json(cli, wf, "--db", project / "b.duckdb", "--out-dir", project / "b", "--no-cache")
    assert [o["sha256"] for o in a["outputs"]] == [o["sha256"] for o in b["outputs"]]
    assert len(a["outputs"]) == 2
    for o in a["outputs"]:
        other = Path(o["path"].replace(str(project / "a"), str(project / "b")))
        assert Path(o["path"]).read_bytes() == other.read_bytes()


def test_second_run_reuses_cached_steps_and_no_cache_reruns_them(cli, project):
    wf = census_workflow(project)
    db = project / "s.duckdb"
    first = run_json(cli, wf, "--db", db)
    second = run_json(cli, wf, "--db", db)
    status = {s["step"]: s["status"] for s in second["steps"]}
    assert status == {"census": "cached", "typed": "cached", "grouped": "cached", "scores": "cached",
                      "published": "succeeded"}
    assert second["metrics"] == first["metrics"]
    third = run_json(cli, wf, "--db", db, "--no-cache")
    assert {s["status"] for s in third["steps"]} == {"succeeded"}
    # a different parameter is a different fingerprint
    fourth = run_json(cli, wf, "--db", db, "--set", "grouped.k=6")
    assert {s["step"]: s["status"] for s in fourth["steps"]}["grouped"] == "succeeded"


def test_plan_validates_and_runs_nothing(cli, project):
    wf = census_workflow(project)
    res = cli("plan", wf)
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if line[:4].strip().rstrip(".").isdigit()]
    assert [line.split()[1] for line in lines] == ["census", "typed", "grouped", "scores", "published"]
    assert not list(project.glob("*.duckdb")) and not (project / "out").exists()
    data = json.loads(cli("plan", wf, "--json", "--set", "grouped.k=7").output)
    assert data["steps"][2]["params"]["k"] == 7


def test_plugins_lists_kind_name_version_and_distribution(cli):
    res = cli("plugins", "--json")
    entries = {(p["kind"], p["name"]): p for p in json.loads(res.output)}
    for key in [("algorithm", "mdav"), ("metric", "sse-il"), ("metric", "k-anonymity"), ("publisher", "csv"),
                ("publisher", "parquet")]:
        assert key in entries
        assert entries[key]["distribution"] == "anonflow"
        assert entries[key]["version"]
    assert "mdav" in cli("plugins").output


def test_runs_and_lineage_show_what_was_done(cli, project):
    wf = census_workflow(project)
    db = project / "s.duckdb"
    out = run_json(cli, wf, "--db", db, "--set", "grouped.k=4")
    listing = cli("runs", "--db", db)
    assert out["run_id"] in listing.output and "succeeded" in listing.output
    detail = json.loads(cli("runs", out["run_id"], "--db", db, "--json").output)
    grouped = next(s for s in detail["steps"] if s["step"] == "grouped")
    assert grouped["params"] == {"k": 4, "standardize": True}
    assert grouped["uses"] == "mdav" and grouped["plugin_version"]
    assert detail["run"]["overrides"] == [["grouped", "k", 4]]
    assert detail["run"]["versions"]["duckdb"] == duckdb.__version__
    # lineage of the published file reaches back to the source file and its hash
    chain = json.loads(cli("lineage", out["outputs"][0]["path"], "--db", db, "--json").output)
    steps = [rec["step"] for _, rec in chain]
    assert steps == ["published", "grouped", "typed", "census"]
    source = chain[-1][1]
    assert source["inputs"][0]["sha256"] == sha(project / "data" / "sdcmicro" / "CASCrefmicrodata.csv")
    text = cli("lineage", "grouped", "--db", db).output
    assert '"k": 4' in text and "mdav" in text


def test_runs_lists_each_runs_overrides_so_sweep_runs_differ(cli, project):
    import shlex

    wf = census_workflow(project)
    db = project / "s.duckdb"
    plain = run_json(cli, wf, "--db", db)
    k3 = run_json(cli, wf, "--db", db, "--set", "grouped.k=3")
    k10 = run_json(cli, wf, "--db", db, "--set", "grouped.k=10", "--set", "scores.metrics=[sse-il, k-anonymity]")
    lines = {line.split()[0]: line for line in cli("runs", "--db", db).output.splitlines()}
    assert lines[k3["run_id"]].endswith("  --set grouped.k=3")
    assert lines[k10["run_id"]].endswith("  --set grouped.k=10 --set 'scores.metrics=[sse-il, k-anonymity]'")
    assert "--set" not in lines[plain["run_id"]]
    # what is shown repeats the run: the same options give the same step fingerprints (all cached)
    line = lines[k10["run_id"]]
    again = run_json(cli, wf, "--db", db, *shlex.split(line[line.index("--set"):]))
    assert again["metrics"] == k10["metrics"]
    assert {s["status"] for s in again["steps"] if s["uses"] != "publish"} == {"cached"}
    # --json lists them as the run's detail records them
    listed = {r["run_id"]: r for r in json.loads(cli("runs", "--db", db, "--json").output)}
    assert listed[k3["run_id"]]["overrides"] == [["grouped", "k", 3]]
    assert listed[plain["run_id"]]["overrides"] == []
    for rid in (plain["run_id"], k3["run_id"], k10["run_id"]):
        detail = json.loads(cli("runs", rid, "--db", db, "--json").output)
        assert detail["run"]["overrides"] == listed[rid]["overrides"]
    assert "  overrides: --set grouped.k=3\n" in cli("runs", k3["run_id"], "--db", db).output


def _shown_outputs(text: str) -> dict[str, str]:
    """Published file name -> what ``run`` or ``runs RUN_ID`` prints in brackets after it."""
    shown = {}
    for line in text.splitlines():
        words = line.split()
        if "sha256" in line and "(" in line:
            path = words[1] if words[0] == "output" else words[0]
            shown[Path(path).name] = line[line.index("(") + 1:]
    return shown


def test_files_that_are_not_tables_show_no_row_count(cli, project):
    """A publisher says a file is not a table with ``Output(rows=None)``: ``run``, ``runs
    RUN_ID`` and their --json show no row count for it (null in JSON), and a table's count."""
    from anonflow.api import Output, Publisher, atomic_write

    from tests.support.mockplugins import Provider, use

    class TableAndNote(Publisher):
        name = "test.table-and-note"

        def publish(self, table, params, ctx):
            data = ctx.resolve_output("t.csv")
            note = ctx.resolve_output("t-note.txt")
            d1 = atomic_write(data, lambda p: p.write_text("a\n" + "1\n" * table.num_rows))
            d2 = atomic_write(note, lambda p: p.write_text("published by a test\n"))
            return [Output(str(data), d1, table.num_rows), Output(str(note), d2, None)]

    use(Provider(publishers=[TableAndNote()]))
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("{publisher: parquet, path: census.parquet}",
                                         "{publisher: test.table-and-note}"))
    db = project / "s.duckdb"
    out = run_json(cli, wf, "--db", db)
    assert {Path(o["path"]).name: o["rows"] for o in out["outputs"]} == {"t.csv": 1080, "t-note.txt": None}
    detail = json.loads(cli("runs", out["run_id"], "--db", db, "--json").output)
    assert {Path(o["path"]).name: o["rows"] for o in detail["outputs"]} == {"t.csv": 1080, "t-note.txt": None}
    for text in (cli("run", wf, "--db", db).output, cli("runs", out["run_id"], "--db", db).output):
        shown = _shown_outputs(text)
        assert shown["t.csv"].startswith("1080 rows, sha256 ")
        assert shown["t-note.txt"].startswith("sha256 ")


def test_a_releases_manifest_and_report_show_no_row_count(cli, project):
    wf = census_workflow(project, extra="""
        release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
    """)
    db = project / "s.duckdb"
    out = run_json(cli, wf, "--db", db)
    rows = {Path(o["path"]).name: o["rows"] for o in out["outputs"]}
    assert rows["manifest.json"] is None and rows["report.html"] is None
    assert rows["published.parquet"] == rows["published.csv"] == 1080
    for text in (cli("run", wf, "--db", db).output, cli("runs", out["run_id"], "--db", db).output):
        shown = _shown_outputs(text)
        assert shown["manifest.json"].startswith("sha256 ") and shown["report.html"].startswith("sha256 ")
        assert shown["published.csv"].startswith("1080 rows, ")
        assert not re.search(r"(?<![0-9])0 rows", text)


def test_threshold_miss_fails_the_run_and_publishes_nothing(cli, project):
    wf = census_workflow(project)
    text = wf.read_text().replace("with: {metrics: [sse-il, k-anonymity]}",
                                  "with: {metrics: [sse-il, k-anonymity], thresholds: {sse-il: {max: 5}}}")
    wf.write_text(text)
    db = project / "s.duckdb"
    res = cli("run", wf, "--db", db)
    assert res.exit_code == 1
    assert "step 'scores': sse-il = 9.0" in res.output and "above the threshold max 5" in res.output
    assert not (project / "out").exists()
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT status FROM af_runs").fetchall() == [("failed",)]
    # the metric values of the failed evaluation are kept for inspection
    assert con.execute("SELECT count(*) FROM af_metrics WHERE metric = 'sse-il'").fetchall() == [(1,)]


BAD_INPUTS = [
    # (how to break the workflow or data, expected exit code, fragment of the one-line error)
    ("missing file", lambda wf, p: wf.write_text(wf.read_text().replace("CASCrefmicrodata", "gone")), 2,
     "file not found"),
    ("missing column", lambda wf, p: wf.write_text(wf.read_text().replace("AFNLWGT", "AFNLWG")), 2,
     "column 'AFNLWG' is not in input 'census' (did you mean 'AFNLWGT'?)"),
    ("k larger than the table", lambda wf, p: wf.write_text(wf.read_text().replace("k: 5", "k: 5000")), 2,
     "step 'grouped': parameter 'k' = 5000 is larger than the table (1080 records)"),
    ("k < 2", lambda wf, p: wf.write_text(wf.read_text().replace("k: 5", "k: 1")), 2,
     "parameter 'k': expected an integer >= 2, got 1"),
    ("unknown plugin", lambda wf, p: wf.write_text(wf.read_text().replace("uses: mdav", "uses: mdv")), 2,
     "unknown step or algorithm 'mdv' (did you mean 'mdav'?)"),
    ("misspelt parameter", lambda wf, p: wf.write_text(wf.read_text().replace("k: 5", "kk: 5")), 2,
     "unknown parameter 'kk' (did you mean 'k'?)"),
    ("cycle", lambda wf, p: wf.write_text(wf.read_text().replace("input: census", "input: grouped")), 2,
     "the steps form a cycle: "),
]


@pytest.mark.parametrize("label, breaker, code, fragment", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_gives_one_line_and_writes_nothing(cli, project, label, breaker, code, fragment):
    wf = census_workflow(project)
    breaker(wf, project)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == code, res.output
    assert fragment in res.output
    assert res.output.startswith("Error: ") and res.output.count("\n") == 1
    assert "Traceback" not in res.output
    assert not (project / "out").exists()


def test_non_numeric_value_in_a_continuous_column(cli, project):
    csv = project / "data" / "sdcmicro" / "CASCrefmicrodata.csv"
    lines = csv.read_text().splitlines()
    cells = lines[17].split(",")
    cells[1] = "12O45"  # letter O typed for a zero
    lines[17] = ",".join(cells)
    csv.write_text("\n".join(lines) + "\n")
    wf = census_workflow(project)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 2
    assert ("step 'typed': column 'AGI' holds numbers except 1 value(s), the first in record 17: '12O45'"
            in res.output)
    assert not (project / "out").exists()
    wf.write_text(wf.read_text().replace("quasi: [AFNLWGT, AGI,", "quasi: [AFNLWGT, {AGI: continuous},"))
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 2
    assert "step 'typed': column 'AGI' is declared continuous but record 17 has the value '12O45'" in res.output
    assert not (project / "out").exists()


def test_failed_run_leaves_earlier_runs_and_tables_intact(cli, project):
    wf = census_workflow(project)
    db = project / "s.duckdb"
    good = run_json(cli, wf, "--db", db)
    before = duckdb.connect(str(db), read_only=True)
    tables = before.execute("SELECT name, hash FROM af_tables ORDER BY name").fetchall()
    before.close()
    res = cli("run", wf, "--db", db, "--set", "grouped.k=5000")
    assert res.exit_code == 2 and "recorded as failed" in res.output
    con = duckdb.connect(str(db), read_only=True)
    runs = dict(con.execute("SELECT run_id, status FROM af_runs").fetchall())
    assert runs[good["run_id"]] == "succeeded" and sorted(runs.values()) == ["failed", "succeeded"]
    assert con.execute("SELECT name, hash FROM af_tables ORDER BY name").fetchall() == tables
    for name, _ in tables:
        assert con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0] == 1080


def test_debug_shows_the_traceback(cli, project):
    wf = census_workflow(project)
    from anonflow.errors import InputError

    with pytest.raises(InputError):
        cli("--debug", "run", wf, "--db", project / "s.duckdb", "--set", "grouped.k=5000")


def test_missing_values_policy(cli, project):
    csv = project / "data" / "sdcmicro" / "CASCrefmicrodata.csv"
    lines = csv.read_text().splitlines()
    for i in (5, 9):
        cells = lines[i].split(",")
        cells[2] = ""
        lines[i] = ",".join(cells)
    csv.write_text("\n".join(lines) + "\n")
    wf = census_workflow(project)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 2
    assert "column 'EMCONTRB' has 2 missing value(s), the first in record 5; set missing: drop" in res.output
    wf.write_text(wf.read_text().replace("quasi: [", "missing: drop\n      quasi: ["))
    out = run_json(cli, wf, "--db", project / "s.duckdb")
    typed = next(s for s in out["steps"] if s["step"] == "typed")
    assert typed["rows"] == 1078
    assert any("dropped 2 record(s) with missing values (EMCONTRB: 2)" in n for n in typed["notes"])


def test_store_in_use_is_a_clear_error(cli, project):
    wf = census_workflow(project)
    db = project / "s.duckdb"
    run_json(cli, wf, "--db", db)
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c",
                               f"import duckdb,time; c=duckdb.connect({str(db)!r}); print('ok', flush=True); "
                               "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        res = cli("run", wf, "--db", db)
        assert res.exit_code == 1
        assert f"process {holder.pid} holds it" in res.output and "use another --db" in res.output
    finally:
        holder.kill()
        holder.wait()


def test_plan_shows_the_typing_it_will_use(cli, project):
    wf = census_workflow(project)
    text = wf.read_text()
    wf.write_text(text.replace("quasi: [AFNLWGT,", "quasi: [{AFNLWGT: continuous},"))
    res = cli("plan", wf)
    assert res.exit_code == 0, res.output
    assert "AFNLWGT: quasi continuous (declared)" in res.output
    assert "AGI: quasi continuous (inferred)" in res.output
    typing = json.loads(cli("plan", wf, "--json").output)["steps"][1]["typing"]
    assert typing["attributes"][1] == {"name": "AGI", "role": "quasi", "type": "continuous", "source": "inferred"}
    # the algorithm's input check runs on the previewed typing: a run that would fail fails here
    wf.write_text(text.replace("quasi: [AFNLWGT,", "quasi: [{AFNLWGT: nominal},"))
    res = cli("plan", wf)
    assert res.exit_code == 2
    assert "step 'grouped': mdav works on numbers only, but quasi-identifier 'AFNLWGT' is typed nominal" in res.output
    assert res.output.count("\n") == 1


def test_filter_and_sample_steps_count_what_they_remove(cli, project):
    wf = census_workflow(project)
    text = wf.read_text().replace("input: census\n", "input: rich\n").replace("steps:\n", """steps:
  few:
    uses: filter
    input: census
    with: {where: "_row < 600"}
  rich:
    uses: sample
    input: few
    with: {n: 300}
""")
    wf.write_text(text)
    out = run_json(cli, wf, "--db", project / "s.duckdb")
    steps = {s["step"]: s for s in out["steps"]}
    assert steps["few"]["rows"] == 600 and steps["rich"]["rows"] == 300
    assert any("removed by '_row < 600'" in n for n in steps["few"]["notes"])
    assert out["outputs"][0]["rows"] == 300
    again = run_json(cli, wf, "--db", project / "s.duckdb", "--no-cache")
    assert again["outputs"][0]["sha256"] == out["outputs"][0]["sha256"]  # the sample is seeded
    other = run_json(cli, wf, "--db", project / "s.duckdb", "--seed", "8")
    assert other["outputs"][0]["sha256"] != out["outputs"][0]["sha256"]
    wf.write_text(text.replace('"_row < 600"', '"nosuch > 3"'))
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 2 and "step 'few': cannot apply where: 'nosuch > 3'" in res.output
