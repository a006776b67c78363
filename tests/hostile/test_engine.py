"""The engine under hostile and messy input, driven through the CLI (issue 12).

Duplicate YAML keys; output confinement (absolute, ``..``, symbolic-link escapes; never over
the store, a source, the workflow file, a hierarchy file, or a file this store did not
publish); user SQL that tries to read files or add records; killed runs; damaged stores;
anonflow's own spill folder.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from anonflow.store import Store

from tests.support.helpers import census_workflow


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): _sha(p) for p in sorted(folder.rglob("*")) if p.is_file()}


# -- duplicate keys ------------------------------------------------------------------------------


def test_a_parameter_given_twice_is_refused_not_silently_last(cli, project):
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("with: {k: 5}", "with: {k: 5, k: 2}"))
    for args in (("plan",), ("run", "--db", project / "s.duckdb")):
        res = cli(args[0], wf, *args[1:])
        assert res.exit_code == 2, res.output
        assert "key 'k' appears twice" in res.output and "line 14" in res.output
    assert not (project / "out").exists() and not (project / "s.duckdb").exists()


def test_a_step_given_twice_is_refused(cli, project):
    wf = census_workflow(project, extra="""
        grouped:
          uses: mdav
          input: typed
          with: {k: 2}
        """)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 2 and "key 'grouped' appears twice (first at line 11)" in res.output, res.output


def test_a_duplicate_key_in_a_set_value_is_refused(cli, project):
    wf = census_workflow(project)
    res = cli("plan", wf, "--set", "scores.thresholds={sse-il: {max: 20, max: 99}}")
    assert res.exit_code == 2 and "appears twice" in res.output, res.output


# -- output confinement --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/tmp/anonflow-escape.csv", "../escape.csv", "a/../../escape.csv", "..", ".",
                                  "out/../../escape.csv", "C:\\\\escape.csv"])
@pytest.mark.parametrize("publisher", ["csv", "release"])
def test_output_paths_that_leave_the_output_folder_fail_at_plan_time(cli, project, path, publisher):
    wf = census_workflow(project, extra=f"""
        leak:
          uses: publish
          input: grouped
          with: {{publisher: {publisher}, path: "{path}"}}
        """)
    before = _snapshot(project)
    for args in (("plan",), ("run", "--db", project / "s.duckdb")):
        res = cli(args[0], wf, *args[1:])
        assert res.exit_code == 2, res.output
        assert "step 'leak'" in res.output and "parameter 'path'" in res.output, res.output
    assert _snapshot(project) == before  # nothing written: no store, no output, no escape
    assert not Path("/tmp/anonflow-escape.csv").exists()


def test_the_default_output_folder_is_out_beside_the_workflow(cli, project):
    wf = census_workflow(project)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 0, res.output
    assert (project / "out" / "census.parquet").is_file()


def _run(cli, wf, db, *extra):
    return cli("run", wf, "--db", db, *extra)


def test_publishing_never_writes_over_the_store_a_source_or_the_workflow(cli, project):
    db = project / "store.duckdb"
    assert _run(cli, census_workflow(project), db).exit_code == 0
    protected = {"the store": "store.duckdb", "a source": "data/sdcmicro/CASCrefmicrodata.csv",
                 "the workflow": "wf2.yaml"}
    for what, target in protected.items():
        wf = census_workflow(project, name="wf2.yaml", extra=f"""
            clobber:
              uses: publish
              input: grouped
              with: {{publisher: csv, path: "{target}"}}
            """)
        before = _snapshot(project)
        res = _run(cli, wf, db, "--out-dir", project)  # the output folder holds them all
        assert res.exit_code == 2, (what, res.output)
        assert "step 'clobber'" in res.output and "would write over" in res.output, res.output
        assert _snapshot(project) == before, what
    res = cli("runs", "--db", db)
    assert res.exit_code == 0 and "succeeded" in res.output


def test_publishing_never_writes_over_a_hierarchy_file(cli, tmp_path):
    from tests.support.helpers import DATA

    (tmp_path / "h.csv").write_text("Male;*\nFemale;*\n")
    (tmp_path / "data").mkdir()
    import shutil

    shutil.copy(DATA / "arx" / "adult.csv", tmp_path / "data" / "adult.csv")
    wf = tmp_path / "wf.yaml"
    wf.write_text("""
name: h
sources:
  adult: {path: data/adult.csv, delimiter: ";"}
steps:
  typed:
    uses: typing
    input: adult
    with: {quasi: [sex], sensitive: [salary-class]}
  h:
    uses: hierarchy
    input: typed
    with: {sex: {arx: h.csv}}
  out:
    uses: publish
    input: h
    with: {publisher: csv, path: h.csv}
""")
    before = _sha(tmp_path / "h.csv")
    res = _run(cli, wf, tmp_path / "s.duckdb", "--out-dir", tmp_path)
    assert res.exit_code == 2 and "would write over" in res.output, res.output
    assert _sha(tmp_path / "h.csv") == before


def test_publishing_never_writes_over_a_file_this_store_did_not_publish(cli, project):
    mine = project / "out" / "census.parquet"
    mine.parent.mkdir()
    mine.write_text("my own notes")
    wf = census_workflow(project)
    res = _run(cli, wf, project / "s.duckdb")
    assert res.exit_code == 2 and "did not publish" in res.output, res.output
    assert mine.read_text() == "my own notes"
    assert cli("runs", "--db", project / "s.duckdb").output.startswith("no runs recorded")  # refused before any run began


def test_a_file_this_store_published_may_be_rewritten_but_not_once_changed(cli, project):
    wf = census_workflow(project)
    db = project / "s.duckdb"
    assert _run(cli, wf, db).exit_code == 0
    assert _run(cli, wf, db).exit_code == 0  # the same store may replace what it published
    other = _run(cli, wf, project / "other.duckdb")
    assert other.exit_code == 2 and "did not publish" in other.output
    out = project / "out" / "census.parquet"
    out.write_bytes(out.read_bytes() + b"edited")
    res = _run(cli, wf, db)
    assert res.exit_code == 2 and "was changed after this store published it" in res.output, res.output
    assert out.read_bytes().endswith(b"edited")


def test_a_symbolic_link_cannot_lead_outside_the_output_folder(cli, project, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (project / "out").mkdir()
    (project / "out" / "link").symlink_to(outside, target_is_directory=True)
    wf = census_workflow(project, extra="""
        leak:
          uses: publish
          input: grouped
          with: {publisher: csv, path: link/x.csv}
        """)
    res = _run(cli, wf, project / "s.duckdb")
    assert res.exit_code == 2 and "outside the output folder" in res.output, res.output
    assert not list(outside.iterdir())


def test_two_steps_may_not_publish_the_same_path(cli, project):
    wf = census_workflow(project, extra="""
        again:
          uses: publish
          input: grouped
          with: {publisher: csv, path: ./census.parquet}
        """)
    res = _run(cli, wf, project / "s.duckdb")
    assert res.exit_code == 2 and "'./census.parquet' is what step 'published' publishes" in res.output, res.output


# -- user SQL -----------------------------------------------------------------------------------


def _filtered(project, where: str) -> Path:
    wf = census_workflow(project)
    text = wf.read_text().replace("""  grouped:
    uses: mdav
    input: typed""", f"""  kept:
    uses: filter
    input: typed
    with: {{where: "{where}"}}
  grouped:
    uses: mdav
    input: kept""")
    wf.write_text(text)
    return wf


@pytest.mark.parametrize("where", [
    "(SELECT count(*) FROM read_csv('/etc/passwd')) > 0",
    "AGI > (SELECT count(*) FROM read_text('/etc/hostname'))",
    "EXISTS (SELECT * FROM glob('/etc/*'))",
    "AGI > 0 AND (SELECT count(*) FROM read_parquet('data/x.parquet')) = 0",
])
def test_filter_sql_cannot_read_files(cli, project, where):
    wf = _filtered(project, where)
    res = _run(cli, wf, project / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert "step 'kept'" in res.output and "disabled by configuration" in res.output, res.output
    assert not (project / "out").exists()


@pytest.mark.parametrize("where", [
    "1=1) AS BOOLEAN) AS keep FROM input; COPY (SELECT 1) TO '/tmp/anonflow-pwn.csv'; SELECT 1 AS r, CAST((1=1",
    "1=1) AS BOOLEAN) AS keep FROM input; ATTACH '/tmp/anonflow-pwn.duckdb' AS x; SELECT 1 AS r, CAST((1=1",
    "1=1) AS BOOLEAN) AS keep FROM input; INSTALL httpfs; SELECT 1 AS r, CAST((1=1",
    "1=1); COPY (SELECT 1) TO '/tmp/anonflow-pwn.csv'; SELECT 1 WHERE (1=1",
])
def test_filter_sql_cannot_add_statements(cli, project, where):
    wf = _filtered(project, where)
    res = cli("plan", wf, "--no-preview")
    assert res.exit_code == 2 and "step 'kept'" in res.output, res.output
    assert "'where' must be one SQL condition" in res.output or "not a valid SQL condition" in res.output
    if "AS BOOLEAN" in where:  # shaped to the engine's query: parses, as several statements
        assert "'where' must be one SQL condition" in res.output, res.output
    assert not Path("/tmp/anonflow-pwn.csv").exists() and not Path("/tmp/anonflow-pwn.duckdb").exists()


def test_filter_sql_cannot_add_or_repeat_records(cli, project):
    wf = _filtered(project, "true) AS BOOLEAN) AS keep FROM input UNION ALL SELECT _row, CAST((true")
    res = _run(cli, wf, project / "s.duckdb")
    assert res.exit_code == 2 and "is not a condition on each record" in res.output, res.output


def test_filter_sql_on_its_columns_still_works(cli, project):
    wf = _filtered(project, "AGI > (SELECT median(AGI) FROM input)")
    res = cli("run", wf, "--db", project / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    import json

    steps = {s["step"]: s for s in json.loads(res.output)["steps"]}
    assert steps["kept"]["rows"] == 540


# -- the store ------------------------------------------------------------------------------------


def test_a_killed_run_is_reported_interrupted_not_running(cli, project):
    db = project / "s.duckdb"
    code = ("import os, sys\nfrom anonflow.store import Store\ns = Store(sys.argv[1])\n"
            "s.begin_run(workflow='w', path='w.yaml', text='', text_hash='', seed=0, overrides=[], versions={})\n"
            "s.con.execute('CHECKPOINT')\nos._exit(9)\n")
    subprocess.run([sys.executable, "-c", code, str(db)], check=False)
    res = cli("runs", "--db", db)  # read-only: shown as interrupted
    assert res.exit_code == 0 and "interrupted" in res.output and " running " not in res.output, res.output
    assert _run(cli, census_workflow(project), db).exit_code == 0  # a writer records it as interrupted
    with Store(db, read_only=True) as store:
        statuses = sorted(r[0] for r in store.con.execute("SELECT status FROM af_runs").fetchall())
    assert statuses == ["interrupted", "succeeded"]


def _record(cli, project: Path) -> tuple[Path, str]:
    db = project / "s.duckdb"
    res = cli("run", census_workflow(project), "--db", db, "--json")
    assert res.exit_code == 0
    import json

    return db, json.loads(res.output)["run_id"]


@pytest.fixture(scope="module")
def recorded_once(tmp_path_factory):
    """A project folder (the Census data) with one run of census_workflow() in s.duckdb, made
    once: ``recorded`` copies it for each test."""
    from tests.support.helpers import census_project, cli_invoker

    folder = census_project(tmp_path_factory.mktemp("recorded"))
    return folder, _record(cli_invoker(), folder)


@pytest.fixture
def recorded(project, recorded_once):
    """A store holding one run of census_workflow() (a copy of ``recorded_once``'s, in the
    test's project folder): (store, run id). For a test that needs nothing of the run's own
    paths (the store names the files of the folder it ran in)."""
    import shutil

    folder, (db, run_id) = recorded_once
    shutil.copytree(folder, project, dirs_exist_ok=True)
    return project / db.name, run_id


def _damage(db: Path, how: str) -> Path:
    data = bytearray(db.read_bytes())
    bad = db.with_name(f"{how}.duckdb")
    if how == "truncated":
        data = data[: len(data) // 2]
    else:
        for pos in range(12288, len(data), 4099):
            data[pos] ^= 0x10
    bad.write_bytes(bytes(data))
    return bad


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_a_damaged_store_gives_one_line_never_a_traceback(cli, project, recorded, how):
    db, run_id = recorded
    bad = _damage(db, how)
    for args in (("runs",), ("runs", run_id), ("report", run_id), ("lineage", "grouped"),
                 ("run", str(census_workflow(project, name="wf3.yaml")), "--out-dir", str(project / "o3"))):
        res = cli(*args, "--db", bad)
        assert res.exit_code in (1, 2), (args, res.output)
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("Error: "), (args, res.output)
        assert "Traceback" not in res.output
        if res.exit_code == 1:
            assert str(bad) in res.output and "damaged" in res.output, (args, res.output)


def test_a_store_held_by_a_run_says_so(cli, project, recorded):
    db, _ = recorded
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time\nc = duckdb.connect(sys.argv[1])\n"
                               "print('ready', flush=True)\ntime.sleep(30)", str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        res = cli("runs", "--db", db)
        assert res.exit_code == 1 and f"process {holder.pid} holds it" in res.output, res.output
    finally:
        holder.kill()
        holder.wait()


def test_a_store_in_a_folder_that_does_not_exist_says_so(cli, project):
    db = project / "nowhere" / "s.duckdb"
    res = cli("run", census_workflow(project, name="wf8.yaml"), "--db", db)
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert f"its folder {db.parent} does not exist" in res.output and "damaged" not in res.output
    assert not db.parent.exists()


def test_the_store_spills_to_an_owner_only_folder_it_removes(tmp_path):
    store = Store(tmp_path / "s.duckdb")
    spill = Path(store.con.execute("SELECT current_setting('temp_directory')").fetchone()[0])
    assert spill.is_dir() and stat.S_IMODE(spill.stat().st_mode) == 0o700
    assert not spill.is_relative_to(tmp_path)
    store.close()
    assert not spill.exists()
    assert not (tmp_path / "s.duckdb.tmp").exists()
    assert os.listdir(tmp_path) == ["s.duckdb"]


@pytest.mark.parametrize("kind", ["data file", "empty file", "folder"])
def test_db_must_be_a_store_never_a_data_file(cli, project, kind):
    target = {"data file": project / "data" / "sdcmicro" / "CASCrefmicrodata.csv", "empty file": project / "e.db",
              "folder": project / "data"}[kind]
    if kind == "empty file":
        target.write_bytes(b"")
    before = _snapshot(project)
    for args in (("run", str(census_workflow(project, name="wf9.yaml"))), ("runs",)):
        res = cli(*args, "--db", target)
        assert res.exit_code == 1 and "cannot open store" in res.output, res.output
        assert res.output.count("\n") == 1
    after = _snapshot(project)
    after.pop("wf9.yaml")
    assert after == before


# -- found by a second hostile pass ---------------------------------------------------------------


def test_a_publish_step_may_not_write_into_another_steps_release(cli, project):
    wf = census_workflow(project, extra="""
        rel:
          uses: publish
          input: grouped
          with: {publisher: release, path: r}
        sneak:
          uses: publish
          input: grouped
          with: {publisher: csv, path: r/published.csv, row_id: true}
        """)
    res = _run(cli, wf, project / "s.duckdb")
    assert res.exit_code == 2 and "step 'sneak'" in res.output and "overlaps what step 'rel'" in res.output
    assert not (project / "out").exists()


def test_a_publish_step_may_not_write_a_lossy_join_file(cli, project):
    wf = census_workflow(project, extra="""
        pair:
          uses: publish
          input: grouped
          with: {publisher: lossy-join, path: x, format: csv, sensitive: FICA}
        raw:
          uses: publish
          input: typed
          with: {publisher: csv, path: x-sa.csv}
        """)
    res = _run(cli, wf, project / "s.duckdb")
    assert res.exit_code == 2 and "is what step 'pair' publishes" in res.output, res.output


def test_the_engine_stops_a_publisher_writing_over_another_steps_file(cli, project, monkeypatch):
    """A publisher whose output_files does not say what it writes is still stopped at write time."""
    from anonflow_std.publishing.publishers import CsvPublisher

    monkeypatch.setattr(CsvPublisher, "output_files", lambda self, params: [])
    wf = census_workflow(project, extra="""
        first:
          uses: publish
          input: grouped
          with: {publisher: csv, path: a.csv}
        second:
          uses: publish
          input: typed
          with: {publisher: csv, path: a.csv}
        """)
    res = _run(cli, wf, project / "s.duckdb")
    assert res.exit_code == 2 and "which step 'first' published earlier in this run" in res.output, res.output


@pytest.mark.parametrize("column", ["_ROW", "_Class"])
def test_reserved_column_names_are_refused_in_any_case(cli, tmp_path, column):
    (tmp_path / "d.csv").write_text(f"age,{column}\n" + "".join(f"{i},{i}\n" for i in range(30)))
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: r\nsources: {d: {path: d.csv}}\nsteps:\n"
                  "  typed: {uses: typing, input: d, with: {quasi: [age], others: insensitive}}\n")
    res = cli("plan", wf)
    assert res.exit_code == 2 and f"column name {column!r} is reserved" in res.output, res.output


@pytest.mark.parametrize("name", ["=2+5+cmd|' /C calc'!A0", "@SUM(A1)", "+1", "-1"])
def test_a_column_name_that_would_run_as_a_formula_is_refused(cli, tmp_path, name):
    import csv

    with open(tmp_path / "d.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["age", name])
        w.writerows([i, i % 3] for i in range(30))
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: r\nsources: {d: {path: d.csv}}\nsteps:\n"
                  "  typed: {uses: typing, input: d, with: {quasi: [age], others: insensitive}}\n"
                  "  g: {uses: mdav, input: typed, with: {k: 3}}\n"
                  "  p: {uses: publish, input: g, with: {publisher: csv, path: p.csv}}\n")
    for args in (("plan", wf), ("run", wf, "--db", tmp_path / "s.duckdb")):
        res = cli(*args)
        assert res.exit_code == 2 and "would run it as a formula" in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_a_yaml_alias_bomb_is_refused_quickly(cli, tmp_path):
    levels = ["&a0 [" + ", ".join(["lol"] * 10) + "]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: b\nsteps:\n  t:\n    uses: typing\n    with:\n      label: [" + ", ".join(levels) + "]\n")
    res = cli("plan", wf, "--no-preview")
    assert res.exit_code == 2 and "expands to more than 1,000,000 values" in res.output, res.output


def test_filter_sql_that_never_ends_is_interrupted(cli, project, monkeypatch):
    import anonflow.sandbox

    monkeypatch.setattr(anonflow.sandbox, "USER_SQL_TIMEOUT", 1.0)
    wf = _filtered(project, "(WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) "
                            "SELECT count(*) FROM t) > 0")
    res = _run(cli, wf, project / "s.duckdb")
    assert res.exit_code == 2 and "ran longer than 1 s and was interrupted" in res.output, res.output


def test_a_duckdb_source_cannot_read_other_files_through_a_view(cli, tmp_path):
    import duckdb

    secret = tmp_path / "secret.csv"
    secret.write_text("x,y\n" + "".join(f"{i},{i * 2}\n" for i in range(40)))
    con = duckdb.connect(str(tmp_path / "survey.duckdb"))
    con.execute(f"CREATE VIEW responses AS SELECT * FROM read_csv('{secret}')")
    con.close()
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: v\nsources: {survey: {table: responses, db: survey.duckdb}}\nsteps:\n"
                  "  typed: {uses: typing, input: survey, with: {quasi: [x, y]}}\n")
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2 and "disabled by configuration" in res.output, res.output


def test_report_never_writes_over_the_runs_inputs_and_asks_before_overwriting(cli, project):
    db, run_id = _record(cli, project)   # a run of its own: the store names this folder's files
    source = project / "data" / "sdcmicro" / "CASCrefmicrodata.csv"
    before = _sha(source)
    for target in (source, project / "wf.yaml", db):
        res = cli("report", run_id, "--db", db, "-o", target, "--overwrite")
        assert res.exit_code == 2 and "is the store or a file run" in res.output, res.output
    assert _sha(source) == before
    mine = project / "notes.html"
    mine.write_text("mine")
    res = cli("report", run_id, "--db", db, "-o", mine)
    assert res.exit_code == 2 and "exists" in res.output and mine.read_text() == "mine"
    assert cli("report", run_id, "--db", db, "-o", mine, "--overwrite").exit_code == 0
    assert mine.read_text().startswith("<!DOCTYPE html>")


# -- found by a third hostile pass ---------------------------------------------------------------


@pytest.fixture
def adult300(tmp_path):
    from tests.support.helpers import DATA

    lines = (DATA / "adult" / "adult_full.csv").read_text().splitlines()[:301]
    (tmp_path / "a.csv").write_text("\n".join(lines) + "\n")
    return tmp_path


def _chain(folder: Path, second: str) -> Path:
    wf = folder / "chain.yaml"
    wf.write_text(f"""name: chain
seed: 7
sources: {{src: {{path: a.csv}}}}
steps:
  typed: {{uses: typing, input: src, with: {{quasi: {{age: continuous, sex: nominal, race: nominal, education: nominal}}, sensitive: [occupation]}}}}
  a1: {{uses: alpha-k-gca, input: typed, with: {{k: 4, alpha: 0.5}}}}
  anon: {{uses: {second}, input: a1}}
  x: {{uses: evaluate, input: [typed, anon], with: {{metrics: [k-anonymity]}}}}
  pub: {{uses: publish, input: anon, with: {{publisher: release, path: rel}}}}
""")
    return wf


def test_a_chained_algorithm_claims_its_own_model_not_its_inputs(cli, adult300):
    wf = _chain(adult300, "alpha-k-gca, with: {k: 2, alpha: 1.0}")
    res = cli("run", wf, "--db", adult300 / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    import json

    out = json.loads(res.output)
    assert out["metrics"]["x.k-anonymity.k"] == 2  # the claim of the step that made the table, not a1's 4
    manifest = json.loads((adult300 / "out" / "rel" / "manifest.json").read_text())
    assert manifest["release"]["claims"]["alpha-k-anonymity"] == {"alpha": 1.0, "k": 2}
    assert cli("verify", adult300 / "out" / "rel").exit_code == 0


def test_maasae_runs_on_another_algorithms_output(cli, adult300):
    wf = _chain(adult300, "maasae, with: {k: 3, p: 2}")
    res = cli("run", wf, "--db", adult300 / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output


def test_a_release_refuses_row_id_when_validated(cli, project):
    wf = census_workflow(project, extra="""
        rel:
          uses: publish
          input: grouped
          with: {publisher: release, path: r, row_id: true}
        """)
    res = cli("plan", wf)
    assert res.exit_code == 2 and "does not publish _row" in res.output, res.output


@pytest.mark.parametrize("seed", ["9223372036854775808", "99999999999999999999"])
def test_a_seed_the_store_cannot_hold_is_a_clear_input_error(cli, project, seed):
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("seed: 7", f"seed: {seed}"))
    res = cli("plan", wf)
    assert res.exit_code == 2 and "'seed' must be an integer from 0 to 9223372036854775807" in res.output
    res = cli("run", census_workflow(project, name="ok.yaml"), "--db", project / "s.duckdb", "--seed", seed)
    assert res.exit_code == 2 and "damaged" not in res.output


def test_deep_nesting_and_non_regular_files_are_one_line(cli, tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 2000 + "]" * 2000 + "\n")
    res = cli("plan", deep)
    assert res.exit_code == 2 and "nests lists or mappings too deeply" in res.output, res.output
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "manifest.json").write_text("[" * 5000 + "]" * 5000)
    res = cli("verify", tmp_path / "rel")
    assert res.exit_code == 2 and "too deeply" in res.output, res.output
    res = cli("plan", "/dev/zero")
    assert res.exit_code == 2 and "is not a regular file" in res.output, res.output


def test_a_workflow_name_cannot_forge_terminal_lines(cli, tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text('name: "ok\\nrun 1: census-mdav succeeded"\nsteps: {a: {uses: typing}}\n')
    res = cli("plan", wf)
    assert res.exit_code == 2 and "'name' must be one line of printable characters" in res.output


def test_run_ids_match_by_literal_prefix_not_sql_patterns(cli, project, recorded):
    db, run_id = recorded
    for pattern in ("%", "_" * 8, "%" + run_id[-6:], ""):
        res = cli("runs", pattern, "--db", db)
        assert res.exit_code != 0 and "no run" in res.output, (pattern, res.output)
    assert cli("runs", run_id[:15], "--db", db).exit_code == 0


def test_a_signing_key_set_on_the_command_line_stays_out_of_the_release(cli, project):
    pytest.importorskip("cryptography")
    (project / "keys").mkdir()
    assert cli("keygen", project / "keys" / "k").exit_code == 0
    wf = census_workflow(project, extra="""
        rel:
          uses: publish
          input: grouped
          with: {publisher: release, path: r}
        """)
    res = cli("run", wf, "--db", project / "s.duckdb", "--set", "rel.sign=keys/k")
    assert res.exit_code == 0, res.output
    rel = project / "out" / "r"
    for name in ("manifest.json", "report.html"):
        assert "keys/k" not in (rel / name).read_text(), name
    assert cli("verify", rel, "--key", project / "keys" / "k.pub").exit_code == 0
    res = cli("verify", rel, "--rerun", "--sources", project)
    assert res.exit_code == 0, res.output


# -- found by a fourth hostile pass ---------------------------------------------------------------


def _graded(folder: Path, grading: str) -> Path:
    wf = folder / "g.yaml"
    wf.write_text(f"""name: g
sources: {{src: {{path: a.csv}}}}
steps:
  typed: {{uses: typing, input: src, with: {{quasi: [age], sensitive: {{occupation: {{grading: {grading}}}}}}}}}
""")
    return wf


@pytest.mark.parametrize("kind", ["device", "fifo", "deep"])
def test_a_hostile_grading_file_is_one_line(cli, adult300, kind):
    target = adult300 / "grading.yaml"
    if kind == "device":
        target.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.write_text("levels: " + "[" * 3000 + "]" * 3000 + "\n")
    res = cli("plan", _graded(adult300, "grading.yaml"), "--no-preview")
    assert res.exit_code == 2, res.output
    assert ("is not a regular file" if kind != "deep" else "nests lists or mappings too deeply") in res.output


def test_a_deeply_nested_set_value_is_one_line(cli, project):
    res = cli("plan", census_workflow(project), "--set", "grouped.k=" + "[" * 3000 + "]" * 3000)
    assert res.exit_code == 2 and "nests lists or mappings too deeply" in res.output, res.output


def test_an_interval_hierarchy_that_floating_point_cannot_bin_is_refused(cli, adult300):
    wf = adult300 / "h.yaml"
    wf.write_text("""name: h
sources: {src: {path: a.csv}}
steps:
  typed: {uses: typing, input: src, with: {quasi: [age], sensitive: [occupation]}}
  hier: {uses: hierarchy, input: typed, with: {age: {interval: {widths: [5, 10], anchor: -9223372036854775808}}}}
""")
    res = cli("plan", wf)
    assert res.exit_code == 2 and "cannot be computed exactly" in res.output, res.output


@pytest.mark.parametrize("path", ["a" * 300 + ".csv", "x\\x1b]0;pwn\\x07.csv", "line\\nbreak.csv"])
def test_output_names_too_long_or_with_control_characters_are_refused(cli, project, path):
    wf = census_workflow(project, extra=f"""
        odd:
          uses: publish
          input: grouped
          with: {{publisher: csv, path: "{path}"}}
        """)
    res = cli("plan", wf, "--no-preview")
    assert res.exit_code == 2 and "step 'odd'" in res.output and "Traceback" not in res.output, res.output


def test_rerunning_into_a_release_never_deletes_a_folder_someone_added(cli, project):
    wf = census_workflow(project, extra="""
        rel:
          uses: publish
          input: grouped
          with: {publisher: release, path: r}
        """)
    db = project / "s.duckdb"
    assert _run(cli, wf, db).exit_code == 0
    (project / "out" / "r" / "sub").mkdir()
    res = _run(cli, wf, db)
    assert res.exit_code == 2 and "holds a folder anonflow did not create" in res.output, res.output
    assert (project / "out" / "r" / "sub").is_dir()


def test_hierarchy_show_escapes_control_characters(cli, adult300):
    (adult300 / "sex.csv").write_text("Male;\x1b[31mRED\x07M\nFemale;F\n")
    wf = adult300 / "h.yaml"
    wf.write_text("""name: h
sources: {src: {path: a.csv}}
steps:
  typed: {uses: typing, input: src, with: {quasi: [sex], sensitive: [occupation]}}
  hier: {uses: hierarchy, input: typed, with: {sex: {arx: sex.csv}}}
""")
    assert cli("run", wf, "--db", adult300 / "s.duckdb").exit_code == 0
    res = cli("hierarchy", "show", "hier", "sex", "--db", adult300 / "s.duckdb")
    assert res.exit_code == 0 and "\x1b" not in res.output and "\\x1b[31mRED\\x07M" in res.output, res.output
