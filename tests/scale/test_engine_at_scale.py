"""The engine at census scale: tables stay in the store, resources bound DuckDB, running out
of memory is one line, and results do not depend on how the work is cut."""

from __future__ import annotations

import hashlib
import json

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from anonflow.api import Algorithm, TypedTable
from anonflow.errors import WorkflowError
from anonflow.workflow.spec import Resources, load_workflow
from anonflow.store import Store
from anonflow.table import table_hash

from tests.support.helpers import DATA, census_workflow, write
from tests.support.mockplugins import census_using


def run_json(cli, *args):
    res = cli("run", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- resources ---------------------------------------------------------------------------


@pytest.mark.parametrize("block, message", [
    ("{memory: lots}", "resources.memory must be a size such as 2GB"),
    ("{memory: 2GB, threads: 0}", "resources.threads must be an integer from 1 to 1024"),
    ("{temp_directory: ../elsewhere}", "lies outside the workflow's folder"),
    ("{temp_directory: /tmp}", "lies outside the workflow's folder"),
    ("{memmory: 2GB}", "unknown key 'memmory' (did you mean 'memory'?)"),
    ("[2GB]", "expected a mapping such as {memory: 2GB"),
])
def test_a_bad_resources_block_is_one_line(project, block, message):
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("seed: 7", f"seed: 7\nresources: {block}"))
    with pytest.raises(WorkflowError) as err:
        load_workflow(wf)
    assert message in str(err.value)


def test_resources_from_the_file_and_the_cli_reach_duckdb(tmp_path):
    wf = write(tmp_path / "wf.yaml", """
        resources: {memory: 300MB, threads: 1, temp_directory: spill}
        sources: {d: d.csv}
        steps:
          t: {uses: typing, input: d, with: {quasi: [a]}}
        """)
    spec = load_workflow(wf)
    assert spec.resources == Resources("300MB", 1, (tmp_path / "spill").resolve())
    merged = spec.resources.merged(Resources(memory="500MB"))
    assert (merged.memory, merged.threads) == ("500MB", 1)
    with Store(tmp_path / "s.duckdb") as store:
        store.configure(merged)
        settings = dict(store.con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('memory_limit', 'threads', "
            "'temp_directory')").fetchall())
        spill = settings["temp_directory"]
        assert spill.startswith(str(tmp_path / "spill"))
        assert oct((tmp_path / "spill").stat().st_mode & 0o777) == "0o700"
        assert settings["threads"] == "1" and store.threads == 1
        assert settings["memory_limit"].startswith("476")   # 500 MB in MiB
    assert not (tmp_path / "spill").joinpath(spill.rsplit("/", 1)[-1]).exists()  # removed on close


class OutOfMemory(Algorithm):
    name = "test.oom"
    version = "1"

    def run(self, table, params, ctx):
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block of size 256 KiB")


def test_running_out_of_memory_is_one_line_naming_the_step_and_the_setting(cli, project):
    wf = census_using(project, OutOfMemory())
    res = cli("run", wf, "--db", project / "s.duckdb", "--memory", "300MB")
    assert res.exit_code == 1
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert "step 'grouped': out of memory" in lines[0]
    assert "resources: {memory: ...}" in lines[0] and "--memory" in lines[0]
    assert "memory limit is 286" in lines[0]   # the limit in force, as DuckDB reports it


# -- tables stay in the store ------------------------------------------------------------


def test_records_are_written_once_and_typing_and_hierarchies_are_views(cli, tmp_path):
    """A source is stored as read; a typing that changes no value and a hierarchy step add
    views, not copies."""
    src = DATA / "arx" / "adult.csv"
    wf = write(tmp_path / "wf.yaml", f"""
        sources:
          adult: {{path: {src}, delimiter: ";"}}
        steps:
          typed:
            uses: typing
            input: adult
            with: {{quasi: {{sex: nominal, race: nominal}}, sensitive: [salary-class]}}
          hier:
            uses: hierarchy
            input: typed
            with:
              sex: {{arx: {DATA / 'arx' / 'adult_hierarchy_sex.csv'}}}
              race: {{arx: {DATA / 'arx' / 'adult_hierarchy_race.csv'}}}
        """)
    out = run_json(cli, wf, "--db", tmp_path / "s.duckdb")
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    try:
        kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables "
                                 "WHERE table_schema = 'main' AND table_name LIKE 't\\_%' ESCAPE '\\'").fetchall())
        tables = {s["step"]: s for s in out["steps"]}
        for step in ("adult", "typed", "hier"):
            table = con.execute("SELECT output_table FROM af_step_runs WHERE run_id = ? AND step = ?",
                                [out["run_id"], step]).fetchone()[0]
            assert kinds[table] == "VIEW", step
        raw = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                         "WHERE table_name LIKE 'af\\_raw\\_%' ESCAPE '\\'").fetchall()]
        assert len(raw) == 1
        assert con.execute(f'SELECT count(*) FROM "{raw[0]}"').fetchone()[0] == tables["adult"]["rows"] == 30162
        # _row is each record's position in the file
        first = pacsv.read_csv(src, parse_options=pacsv.ParseOptions(delimiter=";")).slice(0, 3)
        table = con.execute("SELECT output_table FROM af_step_runs WHERE run_id = ? AND step = 'hier'",
                            [out["run_id"]]).fetchone()[0]
        got = con.execute(f'SELECT _row, sex, race FROM "{table}" LIMIT 3').fetchall()
        assert got == [(i, first.column("sex")[i].as_py(), first.column("race")[i].as_py()) for i in range(3)]
    finally:
        con.close()


def test_a_stored_table_is_read_column_by_column_and_hashes_as_in_memory(tmp_path):
    data = pa.table({"_row": pa.array([2, 0, 1], pa.int64()), "s": ["c", "a", None], "x": [3.0, 1.0, -0.0]})
    with Store(tmp_path / "s.duckdb") as store:
        art = store.put(TypedTable(data))
        back = store.get(art.table)
        assert not back.loaded
        assert back.columns == ["_row", "s", "x"] and back.num_rows == 3
        assert back.column("s").to_pylist() == ["a", None, "c"]   # in _row order, nothing else read
        assert back.select(["x"]).column(0).to_pylist() == [1.0, -0.0, 3.0]
        assert not back.loaded
        assert store._hash_stored(art.table) == table_hash(data)
        assert table_hash(back.data) == table_hash(data)


def test_a_value_past_duckdbs_type_sample_is_read_as_written(cli, tmp_path):
    """Column types are sniffed on the whole file: sniffed on DuckDB's sample (the first
    20,480 rows), a later 12.5 in a column of integers would be read as 13, silently."""
    n = 40_000
    rows = [f"{i % 90},{'F' if i % 2 else 'M'}" for i in range(n)]
    rows[-1] = "12.5,F"
    (tmp_path / "d.csv").write_text("age,sex\n" + "\n".join(rows) + "\n")
    wf = write(tmp_path / "wf.yaml", """
        sources: {d: d.csv}
        steps:
          t: {uses: typing, input: d, with: {quasi: {age: continuous, sex: nominal}}}
        """)
    out = run_json(cli, wf, "--db", tmp_path / "s.duckdb")
    assert out["steps"][0]["rows"] == n
    with Store(tmp_path / "s.duckdb", read_only=True) as store:
        table = store.get(store.step_in_run(out["run_id"], "t")["output_table"])
        ages = table.column("age")
        assert pa.types.is_floating(ages.type) and ages[n - 1].as_py() == 12.5


def test_outputs_are_byte_identical_with_any_number_of_threads_and_memory_limit(cli, tmp_path):
    """The lattice workflow on ARX's Adult: the published CSV and Parquet files are the same
    bytes with 1 or 2 DuckDB threads and a small or a default memory limit."""
    wf_text = (DATA.parent / "arx-adult-k5.yaml").read_text().replace("data/arx/", f"{DATA / 'arx'}/")
    wf_text = wf_text.replace("with: {publisher: csv, path: arx-adult-k5.csv}",
                              "with: {publisher: csv, path: arx-adult-k5.csv}\n"
                              "  published-parquet:\n    uses: publish\n    input: anon\n"
                              "    with: {publisher: parquet, path: arx-adult-k5.parquet}")
    wf = tmp_path / "wf.yaml"
    wf.write_text(wf_text)
    digests = []
    for i, flags in enumerate((["--threads", "1"], ["--threads", "2", "--memory", "64MB"], [])):
        out = run_json(cli, wf, "--db", tmp_path / f"s{i}.duckdb", "--out-dir", tmp_path / f"o{i}", *flags)
        digests.append(sorted((o["path"].rsplit("/", 1)[-1], o["sha256"]) for o in out["outputs"]))
    assert digests[0] == digests[1] == digests[2]
    assert {name for name, _ in digests[0]} == {"arx-adult-k5.csv", "arx-adult-k5.parquet"}


def test_the_typing_is_carried_in_the_parquet_file_written_by_duckdb(cli, project):
    wf = census_workflow(project)
    out = run_json(cli, wf, "--db", project / "s.duckdb")
    import pyarrow.parquet as pq

    path = next(o["path"] for o in out["outputs"] if o["path"].endswith(".parquet"))
    meta = pq.read_schema(path).metadata
    typing = json.loads(meta[b"anonflow.typing"])
    assert any(a["name"] == "AFNLWGT" and a["role"] == "quasi" for a in typing["attributes"])
    assert np.array_equal(pq.read_table(path).column("_class").to_numpy(),
                          np.sort(pq.read_table(path).column("_class").to_numpy()))


def test_a_duckdb_source_streams_in_order_and_its_views_may_not_read_files(cli, tmp_path):
    """A DuckDB source is read through a sandboxed connection, streamed into the store in
    batches: the records keep their order, and a view in the file that reads another file is
    refused in one line instead of leaking it."""
    n = 300_000   # a few of the store's batches
    src = tmp_path / "src.duckdb"
    con = duckdb.connect(str(src))
    con.execute(f"CREATE TABLE people AS SELECT (i * 7919) % {n} AS age, "
                f"CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex FROM range({n}) t(i)")
    (tmp_path / "secret.txt").write_text("secret\n")
    con.execute(f"CREATE VIEW leak AS SELECT * FROM read_text('{tmp_path / 'secret.txt'}')")
    con.close()
    steps = "steps:\n  t: {uses: typing, input: d, with: {quasi: {age: continuous, sex: nominal}}}\n"
    wf = write(tmp_path / "wf.yaml", "sources: {d: {db: src.duckdb, table: people}}\n" + steps)
    out = run_json(cli, wf, "--db", tmp_path / "s.duckdb")
    with Store(tmp_path / "s.duckdb", read_only=True) as store:
        ages = store.get(store.step_in_run(out["run_id"], "t")["output_table"]).column("age").to_numpy()
    assert np.array_equal(ages, (np.arange(n) * 7919) % n)
    wf = write(tmp_path / "leak.yaml", "sources: {d: {db: src.duckdb, table: leak}}\n" + steps)
    res = cli("run", wf, "--db", tmp_path / "s2.duckdb")
    assert res.exit_code == 2
    assert "cannot read table 'leak'" in res.output and "secret" not in res.output.replace("secret.txt", "")


def test_duckdb_draws_no_progress_bar_into_the_output(tmp_path):
    """DuckDB draws a progress bar on stdout for any query longer than two seconds, terminal or
    not: it corrupted ``--json`` at 3 million records. Every connection anonflow opens has it
    off, and the sandbox for workflow SQL stays locked."""
    from anonflow.sandbox import _sandbox

    with Store(tmp_path / "s.duckdb") as store:
        assert store.con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0] is False
    con = _sandbox()
    try:
        assert con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0] is False
        with pytest.raises(duckdb.Error):
            con.execute("SET enable_external_access = true")
    finally:
        con.close()


@pytest.mark.parametrize("late, typ, value", [
    ("12.5", "double", 12.5),                        # a fraction: the column is DOUBLE
    ("12", "int64", 12),                             # whole numbers: BIGINT, as sniffed
    ("9007199254740993", "int64", 9007199254740993),  # beyond 2^53: read again, exactly
    ("twelve", "string", "twelve"),                  # text: read again as text
])
def test_a_late_value_keeps_its_exact_value_and_the_whole_files_type(cli, tmp_path, late, typ, value):
    n = 30_000
    (tmp_path / "d.csv").write_text("a,b\n" + "".join(f"{i},x{i % 7}\n" for i in range(n)) + f"{late},x\n")
    wf = write(tmp_path / "wf.yaml", """
        sources: {d: d.csv}
        steps:
          t: {uses: typing, input: d, with: {quasi: {b: nominal}, insensitive: [a]}}
        """)
    out = run_json(cli, wf, "--db", tmp_path / "s.duckdb")
    with Store(tmp_path / "s.duckdb", read_only=True) as store:
        col = store.get(store.step_in_run(out["run_id"], "d")["output_table"]).column("a")
    assert str(col.type) == typ and col[n].as_py() == value and col[n - 1].as_py() in (n - 1, str(n - 1))


def test_scratch_left_by_a_killed_process_is_dropped_when_the_store_next_opens(tmp_path):
    """A step's output is written to a scratch table, then renamed to its address; a process
    killed in between leaves the scratch table (and a view over it) behind, and the next
    writer removes them, leaving every artifact in place."""
    data = pa.table({"_row": pa.array([0, 1], pa.int64()), "x": [1.0, 2.0]})
    with Store(tmp_path / "s.duckdb") as store:
        art = store.put(TypedTable(data))
        store.con.execute("CREATE TABLE af_scratch_dead AS SELECT * FROM range(5)")
        store.con.execute("CREATE VIEW af_scratch_deadview AS SELECT * FROM af_scratch_dead")
    with Store(tmp_path / "s.duckdb") as store:
        left = store.con.execute("SELECT table_name FROM information_schema.tables "
                                 "WHERE starts_with(table_name, 'af_scratch_')").fetchall()
        assert left == []
        assert store.get(art.table).column("x").to_pylist() == [1.0, 2.0]
