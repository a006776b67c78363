"""PostgreSQL as a source and a sink, against a real server (tests/support/pgserver.py).

Adult (workflows/data/arx/adult.csv) is loaded into PostgreSQL with the driver, read back by
workflows with ``postgres:`` + ``table:`` and ``query:``, and what they publish is compared
with what the same workflow publishes from the CSV file. The ``postgres`` publisher writes
the result (and a lossy-join pair) back, in one transaction committed with the run.
"""

from __future__ import annotations

import json
import random
import re
import textwrap
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from click.testing import CliRunner

from anonflow import registry as plugins
from anonflow.pgurl import display, url_problem
from anonflow.workflow import load_workflow

from tests.support import pgserver

ROOT = Path(__file__).resolve().parents[2]
ARX = ROOT / "workflows" / "data" / "arx"
COLUMNS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation",
           "salary-class"]


# -- the server -------------------------------------------------------------------------

@pytest.fixture(scope="session")
def pg():
    pytest.importorskip("adbc_driver_postgresql", reason="the ADBC PostgreSQL driver is not installed "
                                                         "(pip install '.[postgres]')")
    try:
        server = pgserver.start()
    except pgserver.Unavailable as exc:
        pytest.skip(f"no PostgreSQL server: {exc}")
    yield server
    server.stop()


@pytest.fixture
def pgenv(pg, monkeypatch, tmp_path):
    """The password in the environment, as a user would give it (never in a workflow)."""
    monkeypatch.setenv("PGPASSWORD", pgserver.PASSWORD)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    return pg


def sql(pg, *statements: str, fetch: bool = False):
    """Run statements over the trusted socket; the last one's rows as an Arrow table."""
    from adbc_driver_postgresql import dbapi

    with dbapi.connect(pg.socket_url()) as con:
        cur = con.cursor()
        for s in statements:
            cur.execute(s)
        out = cur.fetch_arrow_table() if fetch else None
        con.commit()
        cur.close()
    return out


def table_exists(pg, name: str) -> bool:
    return sql(pg, f"SELECT to_regclass('{name}') IS NOT NULL AS e", fetch=True).column("e")[0].as_py()


def adult_arrow() -> pa.Table:
    """adult.csv as anonflow reads it (DuckDB's types: age BIGINT, the rest VARCHAR), in file order."""
    from anonflow.sourcekind import SourceSpec
    from anonflow.sources import load_source
    from anonflow.store import Store

    with Store(":memory:") as store:
        art = load_source(store, SourceSpec("adult", "csv", ARX / "adult.csv", options={"delimiter": ";"}),
                          run_id="load")
        return store.sql(f'SELECT * EXCLUDE (_row) FROM "{art.table}" ORDER BY _row')


@pytest.fixture(scope="session")
def adult_pg(pg):
    """adult.csv in PostgreSQL: ``public.adult`` in file order, and ``public.adult_shuffled``
    (a column ``n``, the file position) with its records stored in a random order."""
    from adbc_driver_postgresql import dbapi

    data = adult_arrow()
    order = list(range(data.num_rows))
    random.Random(5).shuffle(order)
    shuffled = data.append_column("n", pa.array(range(data.num_rows), pa.int64())).take(order)
    with dbapi.connect(pg.socket_url()) as con:
        cur = con.cursor()
        cur.adbc_ingest("adult", data, mode="create", db_schema_name="public")
        cur.adbc_ingest("adult_shuffled", shuffled, mode="create", db_schema_name="public")
        con.commit()
        cur.close()
    return data


# -- workflows --------------------------------------------------------------------------

def workflow(folder: Path, source: str, publish: str = "{publisher: csv, path: adult-k5.csv}",
             name: str = "wf.yaml", extra: str = "", arx: str = str(ARX)) -> Path:
    """A k-anonymity lattice over four of Adult's quasi-identifiers, from ``source`` (the
    hierarchy files in folder ``arx``)."""
    text = textwrap.dedent("""\
        name: pg-adult
        seed: 11
        sources:
          adult: SOURCE
        steps:
          typed:
            uses: typing
            input: adult
            with:
              quasi: {sex: nominal, age: continuous, race: nominal, marital-status: nominal}
              sensitive: [salary-class]
              others: drop
          hier:
            uses: hierarchy
            input: typed
            with:
              sex: {arx: ARX/adult_hierarchy_sex.csv}
              age: {arx: ARX/adult_hierarchy_age.csv}
              race: {arx: ARX/adult_hierarchy_race.csv}
              marital-status: {arx: ARX/adult_hierarchy_marital-status.csv}
          anon:
            uses: lattice
            input: hier
            with: {model: k-anonymity, model_params: {k: 5}, suppression: 0.0, utility: loss}
          published:
            uses: publish
            input: anon
            with: PUBLISH
        """).replace("SOURCE", source).replace("PUBLISH", publish).replace("ARX", arx) + extra
    path = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run(path: Path, tmp: Path, *args: str, ok: bool = True) -> tuple[dict, str]:
    from anonflow.cli import main

    plugins.set_registry(None)
    res = CliRunner().invoke(main, ["run", str(path), "--db", str(tmp / "s.duckdb"), "--out-dir", str(tmp / "out"),
                                    "--json", *args], catch_exceptions=False)
    out = json.loads(res.stdout)
    if ok:
        assert res.exit_code == 0, res.output
        assert out["status"] == "succeeded"
    return out, res.output


def cli(*args: str) -> str:
    from anonflow.cli import main

    plugins.set_registry(None)
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def stored(db: Path) -> pa.Table:
    """The source's records as the latest run in store ``db`` read them."""
    latest = json.loads(cli("runs", "--db", db, "--json"))[0]["run_id"]
    detail = json.loads(cli("runs", latest, "--db", db, "--json"))
    table = next(s for s in detail["steps"] if s["kind"] == "source")["output_table"]
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.sql(f'SELECT * FROM "{table}" ORDER BY _row').to_arrow_table()
    finally:
        con.close()


@pytest.fixture(scope="session")
def from_csv(tmp_path_factory):
    """The workflow run on the CSV file: (output folder, store)."""
    tmp = tmp_path_factory.mktemp("csv")
    run(workflow(tmp, f"{{path: {ARX / 'adult.csv'}, delimiter: ';'}}"), tmp)
    return tmp


# -- reading ----------------------------------------------------------------------------

def test_table_source_publishes_what_the_csv_source_does(pgenv, adult_pg, from_csv, tmp_path):
    out, _ = run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: adult}}"), tmp_path)
    # the records as read: the CSV's, with the same column types and order
    pg_table, csv_table = stored(tmp_path / "s.duckdb"), stored(from_csv / "s.duckdb")
    assert pg_table.schema == csv_table.schema
    assert pg_table.equals(csv_table)
    # the published file: the same bytes
    assert (tmp_path / "out" / "adult-k5.csv").read_bytes() == (from_csv / "out" / "adult-k5.csv").read_bytes()

    # what the run records: the URL (no password), the table and the content hash of what was read
    detail = json.loads(cli("runs", out["run_id"], "--db", tmp_path / "s.duckdb", "--json"))
    src = next(s for s in detail["steps"] if s["kind"] == "source")
    assert src["uses"] == "postgres"
    assert src["params"]["postgres"] == pgenv.url() and src["params"]["table"] == "adult"
    assert src["inputs"] == [{"name": f"table adult of {pgenv.url()}", "sha256": src["output_hash"]}]
    assert src["rows"] == adult_pg.num_rows
    chain = cli("lineage", "published", "--db", tmp_path / "s.duckdb")
    assert f"table adult of {pgenv.url()}" in chain
    assert pgserver.PASSWORD not in (tmp_path / "s.duckdb").read_bytes().decode("latin-1")

    # a second run reads the table again (its content decides): the same hash, the later steps cached
    again, _ = run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: adult}}"), tmp_path)
    assert [s["status"] for s in again["steps"]][:4] == ["succeeded", "cached", "cached", "cached"]
    detail2 = json.loads(cli("runs", again["run_id"], "--db", tmp_path / "s.duckdb", "--json"))
    assert next(s for s in detail2["steps"] if s["kind"] == "source")["inputs"] == src["inputs"]


def test_query_source_with_order_by(pgenv, adult_pg, from_csv, tmp_path):
    """Records stored in a random order, read in file order by the query's ORDER BY."""
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    query = f"SELECT {cols} FROM public.adult_shuffled ORDER BY n"
    run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', query: '{query}'}}"), tmp_path)
    assert stored(tmp_path / "s.duckdb").equals(stored(from_csv / "s.duckdb"))
    assert (tmp_path / "out" / "adult-k5.csv").read_bytes() == (from_csv / "out" / "adult-k5.csv").read_bytes()
    step = json.loads(cli("runs", "--db", tmp_path / "s.duckdb", "--json"))[0]
    detail = json.loads(cli("runs", step["run_id"], "--db", tmp_path / "s.duckdb", "--json"))
    src = next(s for s in detail["steps"] if s["kind"] == "source")
    assert src["params"]["query"] == query and src["params"]["table"] is None


def test_release_manifest_records_the_source(pgenv, adult_pg, tmp_path):
    wf = workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: adult}}", publish="{publisher: release, path: rel}")
    run(wf, tmp_path)
    manifest = json.loads((tmp_path / "out" / "rel" / "manifest.json").read_text())
    src = manifest["sources"][0]
    assert src["format"] == "postgres" and src["path"] is None and src["table"] == "adult"
    assert src["options"] == {"postgres": pgenv.url()}
    assert src["rows"] == adult_pg.num_rows and len(src["sha256"]) == 64
    assert pgserver.PASSWORD not in (tmp_path / "out" / "rel" / "manifest.json").read_text()


def test_password_comes_from_pgpass(pg, adult_pg, monkeypatch, tmp_path):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{pg.port}:*:{pgserver.USER}:{pgserver.PASSWORD}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    run(workflow(tmp_path, f"{{postgres: '{pg.url()}', table: adult}}"), tmp_path)
    # without it: one line, naming the source, and nothing was recorded as read
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    out, text = run(workflow(tmp_path, f"{{postgres: '{pg.url()}', table: adult}}", name="b.yaml"),
                    tmp_path / "b", ok=False)
    assert out["status"] == "failed" and out["exit_code"] == 2
    assert "source 'adult'" in out["where"] and f"cannot connect to {display(pg.url())}" in out["error"]
    assert "\n" not in out["error"]


def test_a_missing_table_fails_in_one_line(pgenv, tmp_path):
    out, _ = run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: no_such_table}}"), tmp_path, ok=False)
    assert out["exit_code"] == 2 and "source 'adult'" in out["where"]
    assert "no_such_table" in out["error"] and "\n" not in out["error"]


def test_a_query_cannot_write(pgenv, adult_pg, tmp_path):
    """A query is one SELECT, run in a read-only transaction: it cannot change the database."""
    out, _ = run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', query: 'DELETE FROM public.adult RETURNING *'}}"),
                 tmp_path, ok=False)
    assert out["exit_code"] == 2 and "syntax error" in out["error"] and "\n" not in out["error"]
    sql(pgenv, "CREATE OR REPLACE FUNCTION public.zap() RETURNS bigint LANGUAGE sql AS "
               "'WITH d AS (DELETE FROM public.adult RETURNING 1) SELECT count(*) FROM d'")
    out, _ = run(workflow(tmp_path / "b", f"{{postgres: '{pgenv.url()}', query: 'SELECT *, public.zap() AS z "
                                          "FROM public.adult'}"), tmp_path / "b", ok=False)
    assert out["exit_code"] == 2 and "read-only transaction" in out["error"]
    assert sql(pgenv, "SELECT count(*) AS n FROM public.adult", fetch=True).column("n")[0].as_py() == 30162


# -- the workflow file never holds a password --------------------------------------------

@pytest.mark.parametrize("url", ["postgresql://anonflow:s3cret-pw@db.example:5432/census",
                                 "postgresql://anonflow@db.example/census?password=s3cret-pw",
                                 "postgres://anonflow:s3cret-pw@/census?host=/run/pg"])
def test_a_url_with_a_password_is_refused(url, tmp_path):
    from anonflow.errors import WorkflowError

    wf = workflow(tmp_path, f"{{postgres: '{url}', table: adult}}")
    with pytest.raises(WorkflowError) as exc:
        load_workflow(wf)
    text = str(exc.value)
    assert "source 'adult'" in text and "password" in text and "PGPASSWORD" in text
    assert "s3cret-pw" not in text and "\n" not in text
    # the publisher's url too, naming the step
    wf = workflow(tmp_path, f"{{path: {ARX / 'adult.csv'}, delimiter: ';'}}",
                  publish=f"{{publisher: postgres, url: '{url}', table: t}}")
    from anonflow.cli import main

    res = CliRunner().invoke(main, ["plan", str(wf)])
    assert res.exit_code == 2 and "step 'published'" in res.output and "password" in res.output
    assert "s3cret-pw" not in res.output


def test_url_checks():
    assert url_problem("postgresql://u@h:5432/db") is None
    assert url_problem("postgresql:///db?host=/tmp/x&port=5") is None
    assert "postgresql://" in url_problem("mysql://u@h/db")
    # read by libpq's rules: an empty 'u:@' is no password to libpq, an empty ?password= is one
    assert url_problem("postgresql://u:@h/db") is None
    assert "password" in url_problem("postgresql://u@h/db?password=")
    assert "password" in url_problem("postgresql://u#:secret@127.0.0.1:5432/db")
    assert "secret" not in url_problem("postgresql://u#:secret@127.0.0.1:5432/db")
    assert url_problem("host=h dbname=d") is not None
    assert display("postgresql://u@h:5432/db?sslmode=require") == "u@h:5432/db"
    assert display("postgresql:///db?host=/tmp/x&port=5&user=me") == "me@/tmp/x:5/db"


@pytest.mark.parametrize("extra, message", [
    ("", "needs 'table'"),
    (", table: a, query: 'SELECT 1'", "not both"),
    (", table: a, delimiter: ';'", "line 4: source 'adult': unknown key 'delimiter'; a postgres source takes postgres, "
                                   "table, query, timeout, format, description"),
])
def test_source_keys(extra, message, tmp_path):
    from anonflow.errors import WorkflowError

    with pytest.raises(WorkflowError, match=message):
        load_workflow(workflow(tmp_path, f"{{postgres: 'postgresql://u@h/db'{extra}}}"))


# -- publishing -------------------------------------------------------------------------

def published(pg, name: str) -> pa.Table:
    return sql(pg, f"SELECT * FROM {name}", fetch=True)


def csv_table(path: Path) -> pa.Table:
    return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))


def test_publisher_writes_the_published_table(pgenv, adult_pg, from_csv, tmp_path):
    publish = f"{{publisher: postgres, url: '{pgenv.url()}', schema: released, table: adult_k5}}"
    out, _ = run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: adult}}", publish=publish), tmp_path)
    written = published(pgenv, "released.adult_k5")
    from_file = csv_table(from_csv / "out" / "adult-k5.csv")
    assert written.column_names == from_file.column_names
    assert written.num_rows == from_file.num_rows == 30162
    assert sorted(written.to_pylist(), key=repr) == sorted(
        from_file.cast(written.schema.remove_metadata()).to_pylist(), key=repr)
    [o] = out["outputs"]
    assert o["path"] == f"postgresql://{display(pgenv.url())}#released.adult_k5" and o["rows"] == 30162
    from anonflow.table import table_hash

    assert o["sha256"] == table_hash(written.replace_schema_metadata(None).cast(
        pa.schema([pa.field(f.name, f.type) for f in written.schema])))
    comment = sql(pgenv, "SELECT obj_description('released.adult_k5'::regclass) AS c", fetch=True).column("c")[0]
    assert comment.as_py().startswith("anonflow: ") and "anonflow.typing" in comment.as_py()

    # the table is there: refused unless if_exists: replace, and left as it was
    sql(pgenv, "INSERT INTO released.adult_k5 (sex) VALUES ('marker')")
    again, _ = run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: adult}}", publish=publish),
                   tmp_path, ok=False)
    assert again["exit_code"] == 2 and "if_exists: replace" in again["error"]
    assert published(pgenv, "released.adult_k5").num_rows == 30163
    run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: adult}}", publish=publish), tmp_path,
        "--set", "published.if_exists=replace")
    assert published(pgenv, "released.adult_k5").num_rows == 30162


def test_a_failed_publish_leaves_nothing_written(pgenv, adult_pg, tmp_path):
    """Two tables: the second cannot be written, so the first (already ingested, in the same
    transaction) is rolled back; and a step failing after a publish step rolls that back too."""
    sql(pgenv, "CREATE SCHEMA IF NOT EXISTS atomic", "CREATE TABLE atomic.taken (x int)",
        "INSERT INTO atomic.taken VALUES (1)")
    pair = (f"{{publisher: postgres, url: '{pgenv.url()}', schema: atomic, qi_table: fresh_qi, "
            "sa_table: taken}")
    wf = gca_workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: adult}}", pair)
    out, _ = run(wf, tmp_path, ok=False)
    assert out["status"] == "failed" and "atomic.taken exists" in out["error"]
    assert not table_exists(pgenv, "atomic.fresh_qi")
    assert sql(pgenv, "SELECT count(*) AS n FROM atomic.taken", fetch=True).column("n")[0].as_py() == 1

    # one step writes its table, a later one fails: the run publishes nothing (database and files)
    first = f"{{publisher: postgres, url: '{pgenv.url()}', schema: atomic, table: first}}"
    later = textwrap.dedent(f"""\
          csv-too:
            uses: publish
            input: anon
            with: {{publisher: csv, path: a.csv}}
          second:
            uses: publish
            input: anon
            with: {{publisher: postgres, url: '{pgenv.url()}', schema: atomic, table: taken}}
        """)
    wf = workflow(tmp_path / "b", f"{{postgres: '{pgenv.url()}', table: adult}}", publish=first,
                  extra=textwrap.indent(later, "  "))
    out, _ = run(wf, tmp_path / "b", ok=False)
    assert [s["step"] for s in out["steps"]][-3:] == ["published", "csv-too", "second"]
    assert out["steps"][-1]["status"] == "failed"
    assert not table_exists(pgenv, "atomic.first")
    assert not (tmp_path / "b" / "out" / "a.csv").exists()
    # and once the obstacle is gone, the same run writes both
    sql(pgenv, "DROP TABLE atomic.taken")
    run(wf, tmp_path / "b")
    assert published(pgenv, "atomic.first").num_rows == published(pgenv, "atomic.taken").num_rows == 30162


def test_two_steps_writing_one_table_are_refused(pgenv, adult_pg, tmp_path):
    pub = f"{{publisher: postgres, url: '{pgenv.url()}', schema: twice, table: t}}"
    extra = textwrap.indent(textwrap.dedent(f"""\
          again:
            uses: publish
            input: anon
            with: {pub}
        """), "  ")
    out, _ = run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: adult}}", publish=pub, extra=extra),
                 tmp_path, ok=False)
    assert "written by an earlier publish step" in out["error"]
    assert not table_exists(pgenv, "twice.t")


def gca_workflow(folder: Path, source: str, publish: str) -> Path:
    """(alpha,k)-GCA on 2,000 Adult records, one sensitive attribute (occupation): classes to
    publish lossy-join style."""
    text = textwrap.dedent("""\
        name: pg-gca
        seed: 5
        sources:
          adult: SOURCE
        steps:
          few:
            uses: filter
            input: adult
            with: {where: "_row < 2000"}
          typed:
            uses: typing
            input: few
            with:
              quasi: [age, sex, race, marital-status]
              sensitive: [occupation]
              others: drop
          grouped:
            uses: alpha-k-gca
            input: typed
            with: {k: 4, alpha: 0.5, choice: nearest}
          files:
            uses: publish
            input: grouped
            with: {publisher: lossy-join, path: pair, format: csv}
          published:
            uses: publish
            input: grouped
            with: PUBLISH
        """).replace("SOURCE", source).replace("PUBLISH", publish)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gca.yaml").write_text(text)
    return folder / "gca.yaml"


def test_lossy_join_pair_as_two_tables(pgenv, adult_pg, tmp_path):
    pair = (f"{{publisher: postgres, url: '{pgenv.url()}', schema: lj, qi_table: adult_qi, sa_table: adult_sa}}")
    out, _ = run(gca_workflow(tmp_path, f"{{postgres: '{pgenv.url()}', table: adult}}", pair), tmp_path)
    qi, sa = published(pgenv, "lj.adult_qi"), published(pgenv, "lj.adult_sa")
    qi_file, sa_file = csv_table(tmp_path / "out" / "pair-qi.csv"), csv_table(tmp_path / "out" / "pair-sa.csv")
    for written, file in ((qi, qi_file), (sa, sa_file)):
        assert written.column_names == file.column_names
        assert sorted(written.to_pylist(), key=repr) == sorted(
            file.cast(written.schema.remove_metadata()).to_pylist(), key=repr)
    assert "occupation" not in qi.column_names and sum(sa.column("count").to_pylist()) == qi.num_rows == 2000
    paths = sorted(o["path"] for o in out["outputs"] if o["path"].startswith("postgresql://"))
    assert paths == [f"postgresql://{display(pgenv.url())}#lj.adult_{r}" for r in ("qi", "sa")]
    assert "alpha-k-gca" in cli("lineage", paths[0], "--db", tmp_path / "s.duckdb")  # lineage by the table's URL
    comment = sql(pgenv, "SELECT obj_description('lj.adult_qi'::regclass) AS c", fetch=True).column("c")[0].as_py()
    assert json.loads(comment.removeprefix("anonflow: "))["anonflow.lossy-join"]["partner"] == "adult_sa"


# -- verify ------------------------------------------------------------------------------

def verify(release: Path, *args: str) -> tuple[int, str]:
    from anonflow.cli import main

    plugins.set_registry(None)
    res = CliRunner().invoke(main, ["verify", str(release), *args], catch_exceptions=False)
    return res.exit_code, res.output


def release_workflow(folder: Path, url: str, table: str) -> Path:
    """The lattice workflow from ``table`` of ``url``, released, its hierarchy files copied into
    its folder (a release's re-run reads only files inside the workflow's folder)."""
    import shutil

    (folder / "h").mkdir(parents=True, exist_ok=True)
    for f in ARX.glob("adult_hierarchy_*.csv"):
        shutil.copy(f, folder / "h" / f.name)
    return workflow(folder, f"{{postgres: '{url}', table: {table}}}", publish="{publisher: release, path: rel}",
                    arx="h")


def test_verify_rerun_reads_the_source_again(pgenv, adult_pg, tmp_path):
    """A release from a postgres source: verify checks it; --rerun reads the table from the
    server again, compares its content hash with the recorded one, and reproduces the release
    byte for byte; a changed table is named (never its digest or count: the manifest chose the
    query), and so is a missing one. The verifier's password goes only to a host the verifier
    named (--allow-host)."""
    sql(pgenv, "DROP TABLE IF EXISTS public.adult_v", "CREATE TABLE public.adult_v AS TABLE public.adult")
    run(release_workflow(tmp_path, pgenv.url(), "adult_v"), tmp_path)
    rel = tmp_path / "out" / "rel"
    manifest = json.loads((rel / "manifest.json").read_text())
    [src] = manifest["sources"]
    assert src["format"] == "postgres" and src["path"] is None
    assert src["options"] == {"postgres": pgenv.url()} and src["table"] == "adult_v"
    assert src["rows"] == 30162 and len(src["sha256"]) == 64

    code, text = verify(rel)
    assert code == 0, text
    code, text = verify(rel, "--rerun", "--json", "--allow-host", "127.0.0.1")
    assert code == 0, text
    report = json.loads(text)
    assert report["rerun"]["verdict"] == "identical"
    [finding] = [x for x in report["findings"] if x["what"] == "source adult"]
    assert finding["ok"] and f"table adult_v of {pgenv.url()} matches its recorded content sha256" in finding["detail"]
    assert pgserver.PASSWORD not in text

    # one record changed on the server: the re-run names the source, and runs nothing
    sql(pgenv, "UPDATE public.adult_v SET age = age + 1 WHERE ctid = (SELECT min(ctid) FROM public.adult_v)")
    code, text = verify(rel, "--rerun", "--allow-host", "127.0.0.1")
    assert code != 0
    line = next(ln for ln in text.splitlines() if "source adult" in ln)
    assert line.startswith("FAIL") and f"table adult_v of {pgenv.url()} has changed" in line
    assert "sources[0].sha256" in line and src["sha256"][:16] not in line
    assert not re.search(r"[0-9a-f]{12}", line) and "30162" not in line  # no digest, no count of what it returned
    assert "not attempted" in text

    # the table is gone: one line naming it, no traceback
    sql(pgenv, "DROP TABLE public.adult_v")
    code, text = verify(rel, "--rerun", "--allow-host", "127.0.0.1")
    line = next(ln for ln in text.splitlines() if "source adult" in ln)
    assert code != 0 and "Traceback" not in text and "cannot be read" in line and "adult_v" in line


def test_verify_rerun_without_the_server(adult_pg, monkeypatch, tmp_path):
    """The server that held the source is gone: verify (without --rerun) still passes, and
    --rerun says in one line that it cannot connect."""
    monkeypatch.setenv("PGPASSWORD", pgserver.PASSWORD)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    other = pgserver.start()
    try:
        from adbc_driver_postgresql import dbapi

        with dbapi.connect(other.socket_url()) as con:
            cur = con.cursor()
            cur.adbc_ingest("adult", adult_pg, mode="create", db_schema_name="public")
            con.commit()
            cur.close()
        run(release_workflow(tmp_path, other.url(), "adult"), tmp_path)
    finally:
        other.stop()
    rel = tmp_path / "out" / "rel"
    code, text = verify(rel)
    assert code == 0, text
    code, text = verify(rel, "--rerun")
    assert code != 0 and "Traceback" not in text
    [line] = [ln for ln in text.splitlines() if "source adult" in ln]
    assert f"cannot connect to {display(other.url())}" in line
    assert "not attempted: a PostgreSQL source cannot be read from its server" in text


def test_typed_table_round_trip(pgenv, adult_pg, from_csv, tmp_path):
    """Adult in PostgreSQL with its own column types (age INTEGER, the rest TEXT; a key n, the
    file position, read with ORDER BY n: a table's physical order is not defined): the
    published CSV is the CSV-source run's byte for byte, and the table the publisher writes
    back holds what that file holds."""
    cols = ", ".join(f'"{c}" {"INTEGER" if c == "age" else "TEXT"}' for c in adult_pg.column_names)
    names = ", ".join(f'"{c}"' for c in adult_pg.column_names)
    sql(pgenv, "DROP TABLE IF EXISTS public.adult_typed",
        f"CREATE TABLE public.adult_typed (n INTEGER PRIMARY KEY, {cols})",
        f"INSERT INTO public.adult_typed SELECT n, {names} FROM public.adult_shuffled")
    back = textwrap.indent(textwrap.dedent(f"""\
          back:
            uses: publish
            input: anon
            with: {{publisher: postgres, url: '{pgenv.url()}', schema: typed, table: adult_k5, if_exists: replace}}
        """), "  ")
    query = f"SELECT {names} FROM public.adult_typed ORDER BY n"
    run(workflow(tmp_path, f"{{postgres: '{pgenv.url()}', query: '{query}'}}", extra=back), tmp_path)
    read = stored(tmp_path / "s.duckdb")
    assert read.schema.field("age").type == pa.int32()
    expect = stored(from_csv / "s.duckdb")
    assert read.cast(expect.schema).equals(expect)
    assert (tmp_path / "out" / "adult-k5.csv").read_bytes() == (from_csv / "out" / "adult-k5.csv").read_bytes()
    written = published(pgenv, "typed.adult_k5")
    from_file = csv_table(from_csv / "out" / "adult-k5.csv")
    assert written.column_names == from_file.column_names
    assert written.sort_by([(c, "ascending") for c in written.column_names]).equals(
        from_file.cast(written.schema.remove_metadata()).sort_by([(c, "ascending") for c in written.column_names]))
