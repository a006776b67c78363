"""What leaves the process: the egress policy (anonflow.egress, docs/egress.md; issue 28, section 1
and three items of section 8).

Each hole the audit found is driven through the CLI (and the Python API where it is about the
API): a host other than this machine is reached only when the person running anonflow names it
(``--allow-host``, ``allow_hosts=``, the user's allowed-hosts file), never on the word of a
workflow file or a manifest; ``verify --rerun`` replays no external sink and offers the
verifier's credentials only to hosts the verifier named; connection URLs are read by libpq's
rules and a password anywhere in them is refused without being repeated; only the command line
or the API names a Dask scheduler, and a LocalCluster anonflow starts speaks TLS; a source query
runs under a statement timeout; ``verify`` never prints the digest of what a manifest's query
returns.

"Another host" is :data:`tests.support.netns.OTHER_HOST`, an address added to the loopback interface
of a network namespace of the test's own, with a fake PostgreSQL server listening there that
records whatever a client sends it (a password included): nothing ever leaves the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import textwrap
import threading
import time
from pathlib import Path

import pyarrow.csv as pacsv
import pytest

from anonflow import registry as plugins
from anonflow.api import Output, Param, Publisher, hookimpl

from tests.support import netns, pgserver
from tests.support.helpers import DATA, census_workflow
from tests.support.netns import OTHER_HOST

ROOT = Path(__file__).resolve().parents[2]
CENSUS = DATA / "sdcmicro" / "CASCrefmicrodata.csv"
PG_SECRET = "verifier-pg-secret-3b9e"     # the verifier's PGPASSWORD in the namespace tests
HASH_SECRET = "hash-user-secret-91c4"     # the password hidden behind 'u#:' in a URL


def one_line(res, *needles: str) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "Traceback" not in res.output, res.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def runs_recorded(cli, db: Path) -> int:
    if not db.exists():
        return 0
    return len(json.loads(cli("runs", "--db", db, "--json").output))


# -- the server ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pg():
    pytest.importorskip("adbc_driver_postgresql", reason="the ADBC PostgreSQL driver is not installed")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install '.[postgres]')")
    try:
        server = pgserver.start()
    except pgserver.Unavailable as exc:
        pytest.skip(f"no PostgreSQL server: {exc}")
    sql(server, "CREATE ROLE \"u#\" LOGIN PASSWORD '" + HASH_SECRET + "'")
    from adbc_driver_postgresql import dbapi

    census = pacsv.read_csv(CENSUS)
    with dbapi.connect(server.socket_url()) as con:
        cur = con.cursor()
        cur.adbc_ingest("census", census, mode="create", db_schema_name="public")
        cur.execute('GRANT SELECT ON public.census TO "u#"')
        con.commit()
        cur.close()
    yield server
    server.stop()


@pytest.fixture
def pgenv(pg, monkeypatch, tmp_path):
    monkeypatch.setenv("PGPASSWORD", pgserver.PASSWORD)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    return pg


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch, tmp_path):
    """No allowed-hosts file of the real user's is read."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def sql(pg, *statements: str, fetch: bool = False):
    from adbc_driver_postgresql import dbapi

    with dbapi.connect(pg.socket_url()) as con:
        cur = con.cursor()
        for s in statements:
            cur.execute(s)
        out = cur.fetch_arrow_table() if fetch else None
        con.commit()
        cur.close()
    return out


def pg_census_workflow(folder: Path, url: str, extra: str = "") -> Path:
    """The Census MDAV workflow in ``folder``, its source table ``census`` of ``url``."""
    folder.mkdir(parents=True, exist_ok=True)
    wf = census_workflow(folder, extra=extra)
    wf.write_text(wf.read_text().replace("{path: data/sdcmicro/CASCrefmicrodata.csv}",
                                         f"{{postgres: '{url}', table: census}}"))
    return wf


# -- 1. connection URLs: libpq's reading, a password anywhere refused ---------------------------

@pytest.mark.parametrize("url, word", [
    ("postgresql://u#:s3cret-pw@127.0.0.1:5432/db", "password"),   # libpq: user 'u#', a password
    ("postgresql://u@127.0.0.1/db?password=s3cret-pw", "password"),
    ("postgresql://u@127.0.0.1/db?sslpassword=s3cret-pw", "password"),
    ("postgresql://u@127.0.0.1/db?passfile=/tmp/s3cret-pw", "passfile"),
    ("postgresql://u@127.0.0.1/db?service=s3cret-pw", "service"),
    ("postgresql://u@127.0.0.1/db?host=h&password=s3cret-pw", "password"),
    ("postgresql://u@127.0.0.1/db?%zzs3cret-pw", "not a valid libpq connection URL"),
])
@pytest.mark.parametrize("where", ["source", "publisher"])
def test_a_password_anywhere_in_a_url_is_refused_without_repeating_it(cli, project, url, word, where):
    pytest.importorskip("psycopg")
    if where == "source":
        wf = pg_census_workflow(project, url)
        needle = "source 'census'"
    else:
        wf = census_workflow(project, extra=f"""
            pg: {{uses: publish, input: grouped, with: {{publisher: postgres, url: '{url}', table: t}}}}
        """)
        needle = "step 'pg'"
    for command in ("plan", "run"):
        res = cli(command, wf, *(("--db", project / "s.duckdb") if command == "run" else ()))
        line = one_line(res, needle, word)
        assert "s3cret-pw" not in res.output and "s3cret-pw" not in line
    assert runs_recorded(cli, project / "s.duckdb") == 0


def test_the_u_hash_password_never_reaches_the_server_or_the_store(cli, pgenv, project):
    """``postgresql://u#:secret@127.0.0.1/db``: Python's urlsplit sees host 'u' and no
    password; libpq sees user 'u#' with password 'secret'. The run used to connect with it, and
    the password landed in the store, the lineage and a release's manifest. Now it is refused
    before anything runs, and no file anonflow wrote holds it."""
    url = f"postgresql://u#:{HASH_SECRET}@127.0.0.1:{pgenv.port}/postgres"
    wf = pg_census_workflow(project, url, extra="""
        release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
    """)
    db = project / "s.duckdb"
    res = cli("run", wf, "--db", db, "--out-dir", project / "out")
    one_line(res, "source 'census'", "holds a password", "PGPASSWORD")
    assert HASH_SECRET not in res.output
    assert runs_recorded(cli, db) == 0
    for path in [db, *(project / "out").rglob("*")] if (project / "out").exists() else [db]:
        if Path(path).is_file():
            assert HASH_SECRET.encode() not in Path(path).read_bytes(), path
    # the same URL without the password runs (the password comes from PGPASSWORD)
    wf.write_text(wf.read_text().replace(f"u#:{HASH_SECRET}@", "anonflow@"))
    res = cli("run", wf, "--db", db, "--out-dir", project / "out", "--json")
    assert res.exit_code == 0, res.output
    lineage = cli("lineage", str(project / "out" / "release" / "published.parquet"), "--db", db).output
    assert HASH_SECRET not in lineage and pgserver.PASSWORD not in lineage


# -- 1. a workflow file reaches another host only when the user names it ------------------------

def other_host_workflow(folder: Path, *, source: bool) -> Path:
    """The Census workflow reading from, or publishing into, PostgreSQL on OTHER_HOST."""
    url = f"postgresql://anonflow@{OTHER_HOST}:5432/postgres"
    if source:
        return pg_census_workflow(folder, url)
    return census_workflow(folder, extra=f"""
        pg: {{uses: publish, input: grouped, with: {{publisher: postgres, url: '{url}', table: t}}}}
    """)


def test_plan_refuses_a_sink_on_another_host_unless_named(cli, project):
    """Before anything runs (plan, as run): the publisher's host is not this machine and
    nobody named it. --allow-host, allow_hosts= and a line of the user's file name it."""
    pytest.importorskip("psycopg")
    wf = other_host_workflow(project, source=False)
    line = one_line(cli("plan", wf, "--no-preview"), "step 'pg' (publisher postgres)", f"host '{OTHER_HOST}'",
                    "is not this machine", f"--allow-host {OTHER_HOST}")
    assert "workflow file or a manifest never allows one" in line
    assert cli("plan", wf, "--no-preview", "--allow-host", OTHER_HOST).exit_code == 0
    one_line(cli("plan", wf, "--no-preview", "--allow-host", "10.99.0.2"), "is not this machine")
    one_line(cli("plan", wf, "--no-preview", "--allow-host", "tcp://x:1"), "--allow-host", "not a host name")
    # every host libpq may reach is checked: a host list, host= and hostaddr= (the address it
    # connects to; host= is then only the name a password is looked up by), 0.0.0.0, a name
    url = f"postgresql://anonflow@{OTHER_HOST}:5432/postgres"
    for hostile in (f"postgresql://anonflow@127.0.0.1,{OTHER_HOST}/postgres",
                    f"postgresql://anonflow@127.0.0.1/postgres?host={OTHER_HOST}",
                    f"postgresql://anonflow@localhost/postgres?hostaddr={OTHER_HOST}",
                    f"postgresql://anonflow@[::1]:5432,[{OTHER_HOST}]:5432/postgres",
                    "postgresql://anonflow@0.0.0.0/postgres", "postgresql://anonflow@db.example.org/postgres"):
        wf.write_text(wf.read_text().replace(url, hostile))
        one_line(cli("plan", wf, "--no-preview"), "step 'pg' (publisher postgres)", "is not this machine")
        wf.write_text(wf.read_text().replace(hostile, url))
    for local in ("postgresql://anonflow@[::1]:5432/postgres", "postgresql://anonflow@/postgres?host=/run/pg",
                  "postgresql://anonflow@LocalHost/postgres", "postgresql://anonflow@127.0.0.2/postgres"):
        wf.write_text(wf.read_text().replace(url, local))
        assert cli("plan", wf, "--no-preview").exit_code == 0, local
        wf.write_text(wf.read_text().replace(local, url))

    import anonflow

    with pytest.raises(anonflow.InputError, match="is not this machine"):
        anonflow.load(wf).plan(preview=False)
    assert anonflow.load(wf).plan(preview=False, allow_hosts=[OTHER_HOST])["workflow"] == "census-test"

    # the user's file: one host a line; one that others may write is refused
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "anonflow" / "allowed-hosts"
    config.parent.mkdir(parents=True)
    config.write_text(f"# databases I publish to\n{OTHER_HOST}  # the test's other host\n")
    config.chmod(0o644)
    assert cli("plan", wf, "--no-preview").exit_code == 0
    config.chmod(0o666)
    one_line(cli("plan", wf, "--no-preview"), "may be written by other users", "chmod go-w")


RUN_IN_NAMESPACE = '''
    import os
    from click.testing import CliRunner
    from anonflow.cli import main
    import anonflow
    from anonflow import registry as plugins

    def cli(*args):
        plugins.set_registry(None)
        res = CliRunner().invoke(main, [str(a) for a in args])
        return {{"code": res.exit_code, "output": res.output}}

    WF, TMP = {wf!r}, {tmp!r}
    OUT["refused"] = cli("run", WF, "--db", TMP + "/a.duckdb", "--out-dir", TMP + "/a")
    try:
        anonflow.load(WF).run(db=TMP + "/b.duckdb", out_dir=TMP + "/b")
        OUT["api_refused"] = "ran"
    except anonflow.InputError as exc:
        OUT["api_refused"] = str(exc)
    OUT["seen_before_allowed"] = {{k: dict(v) for k, v in SEEN.items()}}
    OUT["allowed"] = cli("run", WF, "--db", TMP + "/c.duckdb", "--out-dir", TMP + "/c", "--allow-host", "{host}")
    try:
        anonflow.load(WF).run(db=TMP + "/d.duckdb", out_dir=TMP + "/d", allow_hosts=["{host}"])
        OUT["api_allowed"] = "ran"
    except anonflow.InputError as exc:
        OUT["api_allowed"] = str(exc)
'''


@pytest.mark.parametrize("source", [True, False], ids=["source", "sink"])
def test_a_workflow_file_reaches_another_host_only_when_the_user_names_it(project, source):
    """A workflow file naming PostgreSQL on another host (a source it reads, or a sink the
    unanonymized... any table goes to): refused by the CLI and the API before any connection
    (the fake server there sees none); named with --allow-host / allow_hosts=, it is reached
    (the server sees the connection and, as the user chose, the password)."""
    pytest.importorskip("psycopg")
    wf = other_host_workflow(project, source=source)
    result = netns.run(RUN_IN_NAMESPACE.format(wf=str(wf), tmp=str(project), host=OTHER_HOST),
                       listen=[f"{OTHER_HOST}:5432"], env={"PGPASSWORD": PG_SECRET,
                                                           "PGPASSFILE": str(project / "none")})
    out, seen = result["out"], result["seen"][f"{OTHER_HOST}:5432"]
    assert out["refused"]["code"] == 2 and "is not this machine" in out["refused"]["output"], out["refused"]
    assert len(out["refused"]["output"].strip().splitlines()) == 1
    assert "is not this machine" in out["api_refused"]
    assert out["seen_before_allowed"][f"{OTHER_HOST}:5432"]["connections"] == 0
    # named: reached (the fake server then refuses the login; the run fails there)
    assert out["allowed"]["code"] != 0 and "fake server" in out["allowed"]["output"], out["allowed"]
    assert "fake server" in out["api_allowed"]
    assert seen["connections"] >= 2 and PG_SECRET in seen["received"]


# -- 1. verify --rerun ----------------------------------------------------------------------------

def test_a_rerun_never_replays_a_postgres_publisher(cli, pgenv, project):
    """A release whose workflow also wrote its table into PostgreSQL with if_exists: replace:
    verifying it (even with the verifier's password and the host named) leaves the verifier's
    table as it was, and the verdict says the step was not replayed."""
    url = pgenv.url()
    wf = census_workflow(project, extra=f"""
        pg: {{uses: publish, input: grouped, with: {{publisher: postgres, url: '{url}', table: precious,
             if_exists: replace}}}}
        release: {{uses: publish, input: grouped, with: {{publisher: release, path: release}}}}
    """)
    res = cli("run", wf, "--db", project / "s.duckdb", "--out-dir", project / "out", "--json")
    assert res.exit_code == 0, res.output
    manifest = json.loads((project / "out" / "release" / "manifest.json").read_text())
    assert any(s["step"] == "pg" for s in manifest["steps"])  # it ran before the release: it is recorded
    # the verifier's own table of that name
    sql(pgenv, "DROP TABLE public.precious", "CREATE TABLE public.precious (mine text)",
        "INSERT INTO public.precious VALUES ('the verifier''s row')")
    res = cli("verify", project / "out" / "release", "--rerun", "--allow-host", "127.0.0.1")
    assert res.exit_code == 0, res.output
    assert "step pg: not replayed: it writes outside the re-run's scratch folder" in res.output
    assert "(step pg not replayed" in res.output.splitlines()[-1]
    rows = sql(pgenv, "SELECT * FROM public.precious", fetch=True).to_pylist()
    assert rows == [{"mine": "the verifier's row"}]
    res = cli("verify", project / "out" / "release", "--rerun", "--json")
    assert json.loads(res.output)["rerun"]["not_replayed"] == ["pg"]


def retarget(release: Path, old: str, new: str) -> None:
    """Rewrite every mention of ``old`` in the manifest as ``new``, its workflow sha256 and its
    integrity digest redone: a hostile manifest that passes its own checks."""
    from anonflow_std.publishing.manifest import integrity, manifest_bytes

    text = (release / "manifest.json").read_text()
    assert old in text
    manifest = json.loads(text.replace(old, new))
    manifest["workflow"]["sha256"] = hashlib.sha256(manifest["workflow"]["text"].encode()).hexdigest()
    manifest.pop("integrity")
    manifest["integrity"] = integrity(manifest)
    (release / "manifest.json").write_bytes(manifest_bytes(manifest))


VERIFY_IN_NAMESPACE = '''
    from click.testing import CliRunner
    from anonflow.cli import main
    from anonflow import registry as plugins

    def cli(*args):
        plugins.set_registry(None)
        res = CliRunner().invoke(main, [str(a) for a in args])
        return {{"code": res.exit_code, "output": res.output}}

    OUT["other"] = cli("verify", {other!r}, "--rerun")
    OUT["local"] = cli("verify", {local!r}, "--rerun")
    OUT["seen_unnamed"] = {{k: dict(v) for k, v in SEEN.items()}}
    OUT["other_named"] = cli("verify", {other!r}, "--rerun", "--allow-host", "{host}")
'''


def test_a_rerun_offers_no_credentials_to_a_host_the_verifier_did_not_name(cli, pgenv, project):
    """A release from a PostgreSQL source, its manifest rewritten to name a fake server: on
    another host (the re-run does not connect at all), and on this machine's loopback (it
    connects, and offers no password). The verifier's PGPASSWORD reaches a server only when
    the verifier names its host."""
    wf = pg_census_workflow(project / "wf", pgenv.url(), extra="""
        release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
    """)
    res = cli("run", wf, "--db", project / "s.duckdb", "--out-dir", project / "wf" / "out")
    assert res.exit_code == 0, res.output
    release = project / "wf" / "out" / "release"
    fake_port = pgserver.free_port()
    other, local = project / "other" / "release", project / "local" / "release"
    for copy, target in ((other, f"{OTHER_HOST}:5432"), (local, f"127.0.0.1:{fake_port}")):
        shutil.copytree(release, copy)
        retarget(copy, f"127.0.0.1:{pgenv.port}", target)
    result = netns.run(VERIFY_IN_NAMESPACE.format(other=str(other), local=str(local), host=OTHER_HOST),
                       listen=[f"{OTHER_HOST}:5432", f"127.0.0.1:{fake_port}"],
                       env={"PGPASSWORD": PG_SECRET, "PGPASSFILE": str(project / "none")})
    out, seen = result["out"], result["out"]["seen_unnamed"]
    assert out["other"]["code"] != 0 and "Traceback" not in out["other"]["output"]
    [line] = [ln for ln in out["other"]["output"].splitlines() if "source census" in ln]
    assert "cannot be read" in line and "is not this machine" in line and f"--allow-host {OTHER_HOST}" in line
    assert seen[f"{OTHER_HOST}:5432"]["connections"] == 0
    # this machine: connected to, no credentials offered (libpq refuses the server's request)
    assert out["local"]["code"] != 0
    [line] = [ln for ln in out["local"]["output"].splitlines() if "source census" in ln]
    assert "offers none to a host you did not name" in line and "--allow-host 127.0.0.1" in line
    assert seen[f"127.0.0.1:{fake_port}"]["connections"] >= 1
    assert PG_SECRET not in seen[f"127.0.0.1:{fake_port}"]["received"]
    assert "anonflow" in seen[f"127.0.0.1:{fake_port}"]["received"]  # the startup message did arrive
    # named by the verifier: the password goes there (the verifier's choice)
    assert PG_SECRET in result["seen"][f"{OTHER_HOST}:5432"]["received"]
    assert PG_SECRET not in json.dumps(out)


# -- 1. a third party's sink: it declares its destination, the engine decides ------------------

CALLS: list[str] = []


class UploadSink(Publisher):
    name = "test.upload"
    version = "0.0.1"
    description = "Pretends to upload the table to a web service (never connects)."
    outputs = ()
    params = (Param("endpoint", "str", help="the service's URL"),)

    def destinations(self, params):
        return [params["endpoint"]]

    def publish(self, table, params, ctx):
        from anonflow.api import check_destination

        check_destination(params["endpoint"], f"step {ctx.step!r}")
        CALLS.append(params["endpoint"])
        return [Output(params["endpoint"], "0" * 64, table.num_rows)]


class _Sinks:
    @hookimpl
    def anonflow_register_publishers(self, register):
        register(UploadSink())


def use_upload_sink():
    pm, dists = plugins.plugin_manager()
    pm.register(_Sinks(), name="test-sinks")
    plugins.set_registry(plugins.Registry(pm, dists))


def test_a_third_party_sink_declares_its_destination_and_the_engine_decides(cli, project):
    CALLS.clear()
    use_upload_sink()
    wf = census_workflow(project, extra="""
        up: {uses: publish, input: grouped, with: {publisher: test.upload, endpoint: 'https://sink.example.org/in'}}
        release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
    """)
    db = project / "s.duckdb"
    one_line(cli("run", wf, "--db", db), "step 'up' (publisher test.upload)", "host 'sink.example.org'",
             "--allow-host sink.example.org")
    assert CALLS == [] and runs_recorded(cli, db) == 0
    one_line(cli("plan", wf, "--no-preview"), "host 'sink.example.org'")
    res = cli("run", wf, "--db", db, "--allow-host", "sink.example.org", "--json")
    assert res.exit_code == 0, res.output
    assert CALLS == ["https://sink.example.org/in"]
    # a password in the declared destination is refused, never repeated
    wf.write_text(wf.read_text().replace("https://sink", "https://me:pw-9f1@sink"))
    line = one_line(cli("run", wf, "--db", db, "--allow-host", "sink.example.org"), "holds no user or password")
    assert "pw-9f1" not in line
    # a re-run of the release does not replay it, even with the host named
    res = cli("verify", project / "out" / "release", "--rerun", "--allow-host", "sink.example.org")
    assert res.exit_code == 0, res.output
    assert CALLS == ["https://sink.example.org/in"]
    assert "step up: not replayed" in res.output


# -- 8. only the command line or the API names a Dask scheduler ------------------------------------

class Listener:
    """A TCP listener on a free loopback port that counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def test_neither_a_workflow_file_nor_a_manifest_names_a_dask_scheduler(cli, project):
    """Whatever listens at a scheduler address receives every record: a workflow file naming
    one, even on loopback, is refused, and so is a release whose manifest's workflow names one
    (its re-run connects nowhere)."""
    listener = Listener()
    try:
        block = f'executor: {{kind: dask, address: "tcp://127.0.0.1:{listener.port}"}}\n'
        wf = census_workflow(project, extra="""
            release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
        """)
        text = wf.read_text()
        wf.write_text(text.replace("seed: 7\n", "seed: 7\n" + block))
        one_line(cli("run", wf, "--db", project / "s.duckdb"), "may not name a Dask scheduler",
                 f"--executor dask:tcp://127.0.0.1:{listener.port}")
        # a release whose manifest's workflow names one
        wf.write_text(text)
        res = cli("run", wf, "--db", project / "s.duckdb", "--out-dir", project / "out")
        assert res.exit_code == 0, res.output
        release = project / "out" / "release"
        retarget(release, "seed: 7\\n", "seed: 7\\n" + json.dumps(block)[1:-1])
        res = cli("verify", release, "--rerun")
        assert res.exit_code == 1 and "may not name a Dask scheduler" in res.output, res.output
        assert listener.connections == 0
    finally:
        listener.close()


def test_a_local_cluster_speaks_tls_and_a_plain_client_cannot_join():
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("cryptography")
    from distributed.security import Security

    from anonflow.executor_spec import ExecutorSpec
    from anonflow.runner.executors import DaskExecutor

    executor = DaskExecutor(ExecutorSpec("dask", 1))
    try:
        address = executor.cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        for how, kwargs in (("plain tcp", {"address": address.replace("tls://", "tcp://")}),
                            ("tls, another key", {"address": address, "security": Security.temporary()})):
            t0 = time.perf_counter()
            with pytest.raises((OSError, TimeoutError, TypeError, ValueError)):
                client = distributed.Client(timeout="2s", set_as_default=False, **kwargs)
                client.close()
                pytest.fail(f"a {how} client joined the LocalCluster")
            assert time.perf_counter() - t0 < 30
        assert executor.client.submit(sum, [1, 2]).result() == 3  # anonflow's own client works
    finally:
        executor.close()


# -- 8. a source query runs under a statement timeout -------------------------------------------------

def test_a_source_query_ends_at_its_timeout(cli, pgenv, project):
    wf = pg_census_workflow(project, pgenv.url())
    wf.write_text(wf.read_text().replace("table: census}", "query: 'SELECT pg_sleep(60)::text AS s, * FROM census', "
                                                           "timeout: 1s}"))
    t0 = time.perf_counter()
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert time.perf_counter() - t0 < 30
    one_line(res, "source 'census'", "statement timeout")
    # the server has no session of ours left sleeping
    left = sql(pgenv, "SELECT count(*) AS n FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' "
                      "AND pid <> pg_backend_pid()", fetch=True)
    assert left.column("n")[0].as_py() == 0


@pytest.mark.parametrize("value", ["soon", "0s", "2y", "-1", "true", "[1]"])
def test_a_bad_timeout_is_one_line(cli, project, value):
    pytest.importorskip("psycopg")
    wf = pg_census_workflow(project, "postgresql://u@127.0.0.1/db")
    wf.write_text(wf.read_text().replace("table: census}", f"table: census, timeout: {value}}}"))
    one_line(cli("plan", wf, "--no-preview"), "source 'census'", "timeout")


def test_the_statement_timeout_is_in_force_on_the_server(pgenv):
    """The session a source is read in has ``statement_timeout`` set: DEFAULT_TIMEOUT without
    ``timeout:``, the source's own with it (read back from the server)."""
    from anonflow.pgurl import check_timeout
    from anonflow.sources.pgtable import DEFAULT_TIMEOUT, SourceReader
    from anonflow.sourcekind import SourceSpec

    def setting(**options) -> str:
        src = SourceSpec("q", "postgres", options={"postgres": pgenv.url(), "query": "SELECT current_setting("
                                                   "'statement_timeout') AS t, current_setting('lock_timeout') AS l",
                                                   **options})
        with SourceReader(src) as reader:
            row = next(reader.batches()).to_pylist()[0]
        return row["t"], row["l"]

    assert setting() == (DEFAULT_TIMEOUT, "30s")
    assert setting(timeout="2.5s")[0] == "2500ms"
    assert check_timeout(30) == "30000ms" and check_timeout("1.5 min") == "90000ms"


# -- DuckDB extensions: never installed or loaded (the lead's hostile pass) ---------------------

def test_a_type_from_an_extension_installs_nothing_and_fails_in_one_line(cli, tmp_path):
    """DuckDB installs a missing extension from its repository over the network, and loads it,
    as soon as a name needs it: a workflow's ``types: {AGI: INET}`` made the run resolve and
    connect to DuckDB's extension host (and would have run the code it downloaded). Now no
    connection of the store installs or loads any extension: the run fails in one line."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(CENSUS, data / "census.csv")
    wf = tmp_path / "wf.yaml"
    wf.write_text(textwrap.dedent("""\
        name: ext
        sources:
          census: {path: data/census.csv, types: {AGI: INET}}
        steps:
          typed: {uses: typing, input: census, with: {quasi: [AGI]}}
          published: {uses: publish, input: typed, with: {publisher: csv, path: o.csv}}
        """))
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    line = one_line(res, "source 'census'", "INET")
    assert "install" not in line.split("INET", 1)[0].lower() and "automatically install" not in line


def test_no_store_connection_may_install_or_load_an_extension(tmp_path):
    from anonflow.api import sandboxed_connection
    from anonflow.store import Store

    with Store(tmp_path / "s.duckdb") as store:
        settings = store.con.execute(
            "SELECT current_setting('autoinstall_known_extensions'), current_setting('autoload_known_extensions'), "
            "current_setting('allow_community_extensions')").fetchone()
    assert settings == (False, False, False)
    con = sandboxed_connection()
    assert con.execute("SELECT current_setting('autoinstall_known_extensions'), "
                       "current_setting('enable_external_access')").fetchone() == (False, False)
