"""The store holds the original microdata: it is owner-only, it says what it holds, and its
confidential tables can be purged (by hand, or by a workflow's ``retain:``) without losing the
lineage, the hashes or ``verify --rerun``. File modes are checked by their bits (tests may run
as root, who reads anything)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import textwrap
import warnings
from datetime import timedelta
from pathlib import Path

import pytest

from anonflow import filemodes
from anonflow.errors import AnonflowWarning, InputError, StoreError
from anonflow.store import plan_purge, purge
from anonflow.store import Store

N = 120


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def secrets_csv(folder: Path) -> Path:
    """People with a name (an identifier), a note nobody declared, two numeric QIs and a diagnosis."""
    lines = ["name,note,age,income,diagnosis"]
    for i in range(N):
        lines.append(f"Qzname{i:04d}Vexley,Notewyrm{i:04d}Pix,{20 + i % 50},{1000 + 37 * i},"
                     f"{['flu', 'asthma', 'gout'][i % 3]}")
    path = folder / "people.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def workflow(folder: Path, *, retain: str | None = None, name: str = "wf.yaml", seed: int = 3) -> Path:
    secrets_csv(folder)
    text = textwrap.dedent(f"""\
        name: people
        seed: {seed}
        {f'retain: {retain}' if retain else ''}
        sources:
          people: {{path: people.csv}}
        steps:
          typed:
            uses: typing
            input: people
            with: {{identifier: [name], quasi: [age, income], sensitive: [diagnosis]}}
          grouped:
            uses: mdav
            input: typed
            with: {{k: 4}}
          scores:
            uses: evaluate
            input: [typed, grouped]
            with: {{metrics: [k-anonymity]}}
          release:
            uses: publish
            input: grouped
            with: {{publisher: release, path: release}}
        """)
    path = folder / name
    path.write_text(text)
    return path


def originals_in(path: Path) -> set[str]:
    """The identifiers and undeclared notes of the source found in a file's bytes."""
    data = path.read_bytes()
    wal = path.with_name(path.name + ".wal")
    if wal.exists():
        data += wal.read_bytes()
    found = {f"Qzname{i:04d}Vexley" for i in range(N) if f"Qzname{i:04d}Vexley".encode() in data}
    found |= {f"Notewyrm{i:04d}Pix" for i in range(N) if f"Notewyrm{i:04d}Pix".encode() in data}
    return found


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def run(cli, wf: Path, db: Path, *args: str) -> dict:
    res = cli("run", wf, "--db", db, "--json", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.fixture(scope="module")
def ran_once(tmp_path_factory):
    """``workflow()`` run once into a store (the same run many tests begin with): a folder
    that :func:`ran` copies for each test."""
    from tests.support.helpers import cli_invoker

    folder = tmp_path_factory.mktemp("ran-once")
    result = run(cli_invoker(), workflow(folder), folder / "s.duckdb")
    assert not list(folder.glob("s.duckdb.wal"))
    return folder, result


def ran(ran_once, folder: Path, db: str = "s.duckdb") -> tuple[Path, Path, dict]:
    """A copy in ``folder`` of the workflow, its source and the store ``workflow()`` left
    after one run (the store as ``db``): (workflow, store, the run's JSON)."""
    template, result = ran_once
    shutil.copytree(template, folder, dirs_exist_ok=True)
    (folder / db).parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder / "s.duckdb", folder / db)
    return folder / "wf.yaml", folder / db, result


# -- permissions --------------------------------------------------------------------------------

def test_store_its_log_and_spill_folder_are_owner_only_and_the_umask_comes_back(tmp_path, umask022):
    import pyarrow as pa

    store = Store(tmp_path / "s.duckdb")
    try:
        assert mode(tmp_path / "s.duckdb") == 0o600
        assert mode(store._spill) == 0o700
        store.put(pa.table({"_row": [0, 1], "x": ["a", "b"]}))
        wal = tmp_path / "s.duckdb.wal"
        assert wal.exists() and mode(wal) == 0o600  # DuckDB creates the log at a write, after each checkpoint
        store.con.execute("CHECKPOINT")
        store.put(pa.table({"_row": [0], "x": ["c"]}))
        assert mode(wal) == 0o600
    finally:
        store.close()
    assert filemodes.ordinary_umask() == 0o022
    current = os.umask(0o022)
    assert current == 0o022  # restored, not left at 077


def test_a_run_leaves_an_owner_only_store_and_published_files_with_ordinary_modes(cli, tmp_path, umask022):
    out = run(cli, workflow(tmp_path), tmp_path / "s.duckdb")
    assert mode(tmp_path / "s.duckdb") == 0o600
    assert not list(tmp_path.glob("s.duckdb.wal"))
    release = tmp_path / "out" / "release"
    assert mode(tmp_path / "out") == 0o755 and mode(release) == 0o755
    for f in release.iterdir():
        assert mode(f) == 0o644, f
    assert {Path(o["path"]).name for o in out["outputs"]} >= {"published.csv", "manifest.json"}


def test_published_modes_follow_the_users_umask(cli, tmp_path):
    old = os.umask(0o002)
    try:
        run(cli, workflow(tmp_path), tmp_path / "s.duckdb")
    finally:
        os.umask(old)
    assert mode(tmp_path / "s.duckdb") == 0o600
    assert mode(tmp_path / "out" / "release") == 0o775
    assert mode(tmp_path / "out" / "release" / "published.csv") == 0o664


def test_a_store_open_to_others_is_named_with_the_fix(cli, tmp_path, ran_once):
    _, db, _ = ran(ran_once, tmp_path)
    os.chmod(db, 0o644)
    res = cli("runs", "--db", db)
    assert res.exit_code == 0
    line = [ln for ln in res.output.splitlines() if ln.startswith("anonflow: warning:")]
    assert len(line) == 1 and str(db) in line[0] and "other users" in line[0] and f"chmod 600 '{db}'" in line[0]
    with pytest.warns(AnonflowWarning, match="chmod 600"):
        Store(db, read_only=True).close()
    os.chmod(db, 0o600)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AnonflowWarning)
        Store(db, read_only=True).close()


# -- purge --------------------------------------------------------------------------------------

def test_purge_all_removes_the_original_records_and_keeps_lineage_and_rerun(cli, tmp_path):
    wf, db = workflow(tmp_path), tmp_path / "s.duckdb"
    first = run(cli, wf, db)
    assert len(originals_in(db)) > N  # the store holds the names and notes (what purge is for)
    listed = cli("runs", "--db", db)
    assert "holds 2 table(s)" in listed.output and "confidential data in" in listed.output

    res = cli("purge", "--db", db, "--all")
    assert res.exit_code == 0, res.output
    assert "purged 2 table(s)" in res.output and "kept 1 published table(s)" in res.output
    assert originals_in(db) == set()
    assert mode(db) == 0o600
    assert not list(tmp_path.glob(".s.duckdb.purge-*"))

    # the lineage still traces the published file to the source file's sha256
    source_sha = hashlib.sha256((tmp_path / "people.csv").read_bytes()).hexdigest()
    trace = cli("lineage", "--db", db, tmp_path / "out" / "release" / "published.csv", "--json")
    assert trace.exit_code == 0, trace.output
    chain = json.loads(trace.output)
    assert [i["sha256"] for _, s in chain if s["kind"] == "source" for i in s["inputs"]] == [source_sha]
    # the release is reproduced from the source file
    again = cli("verify", tmp_path / "out" / "release", "--rerun")
    assert again.exit_code == 0, again.output

    listed = cli("runs", "--db", db, "--json")
    assert json.loads(listed.output)[0]["held_tables"] == 0 and json.loads(listed.output)[0]["purged_tables"] == 2
    # the next run computes the purged tables again and publishes the same bytes
    second = run(cli, wf, db)
    assert [o["sha256"] for o in second["outputs"]] == [o["sha256"] for o in first["outputs"]]
    assert len(originals_in(db)) > N
    with Store(db, read_only=True) as store:
        assert store.purges()[0]["rows"] == 2 * N and len(store.purges()[0]["tables"]) == 2


def test_the_rewritten_store_keeps_every_held_table_byte_for_byte(cli, tmp_path):
    """The fresh file holds the kept tables in their insertion order: their content hashes
    (taken by reading them in that order) are the ones recorded."""
    wf, db = workflow(tmp_path), tmp_path / "s.duckdb"
    run(cli, wf, db)
    run(cli, workflow(tmp_path, seed=9), db)
    with Store(db) as store:
        purge(store, plan_purge(store, everything=True))
        held = [r for r in store.table_records() if r["purged_at"] is None]
        assert held
        for r in held:
            assert store._hash_stored(r["name"]) == r["data_hash"]
        assert store.con.execute("SELECT count(*) FROM af_step_runs").fetchone()[0] == 10


def test_reading_a_purged_table_says_so_in_one_line(cli, tmp_path, ran_once):
    wf, db, _ = ran(ran_once, tmp_path)
    assert cli("purge", "--db", db, "--all").exit_code == 0
    res = cli("hierarchy", "show", "typed", "--db", db)
    assert res.exit_code == 1
    assert "were purged from the store" in res.output and "run the workflow again" in res.output
    assert "Traceback" not in res.output
    import anonflow

    result = anonflow.load(wf).run(db=tmp_path / "api.duckdb", out_dir=tmp_path / "api-out", retain="published")
    with pytest.raises(StoreError, match="were purged"):
        result.table("typed")
    assert result.table("grouped").num_rows == N


def test_the_report_of_a_purged_run_leaves_out_what_needs_the_original(cli, tmp_path, ran_once):
    wf, db, result = ran(ran_once, tmp_path)
    rid = result["run_id"]
    assert cli("purge", "--db", db, "--all").exit_code == 0
    res = cli("report", rid, "--db", db, "-o", tmp_path / "again.html")
    assert res.exit_code == 0, res.output
    page = (tmp_path / "again.html").read_text()
    assert "was purged from the store" in page and "Class-size distribution" in page


def test_purge_dry_run_changes_nothing(cli, tmp_path, ran_once):
    wf, db, _ = ran(ran_once, tmp_path)
    before = db.read_bytes()
    res = cli("purge", "--db", db, "--all", "--dry-run", "--json")
    assert res.exit_code == 0
    assert json.loads(res.output)["dry_run"] is True and len(json.loads(res.output)["tables"]) == 2
    assert db.read_bytes() == before


def test_purge_keep_none_removes_the_published_tables_too(cli, tmp_path, ran_once):
    wf, db, _ = ran(ran_once, tmp_path)
    res = cli("purge", "--db", db, "--all", "--keep", "none", "--json")
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.output)["tables"]) == 3
    with Store(db, read_only=True) as store:
        assert store.data_objects() == {}


@pytest.mark.parametrize("args, message", [
    ((), "say what to purge"),
    (("--older-than", "soon"), "expected a number and a unit"),
    (("--run", "nosuchrun"), "no run 'nosuchrun'"),
])
def test_purge_refuses_an_unclear_selection_in_one_line(cli, tmp_path, ran_once, args, message):
    wf, db, _ = ran(ran_once, tmp_path)
    res = cli("purge", "--db", db, *args)
    assert res.exit_code in (1, 2) and message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1


def test_purge_by_run_and_by_age(cli, tmp_path):
    db = tmp_path / "s.duckdb"
    a = run(cli, workflow(tmp_path, seed=1), db)["run_id"]
    b = run(cli, workflow(tmp_path, seed=2), db)["run_id"]  # same source and typing, another seed
    with Store(db) as store:
        started = {r["run_id"]: r["started_at"] for r in store.runs()}
        by_age = plan_purge(store, before=started[b])  # a only: what b used too stays
        assert by_age.runs == [a] and by_age.tables == [] and len(by_age.kept_later) >= 2
        by_run = plan_purge(store, runs=[a])  # a's source and typing go although b used them
        assert by_run.runs == [a] and len(by_run.tables) == 2
        purge(store, by_run)
    assert originals_in(db) == set()
    res = cli("runs", "--db", db, "--json")
    held = {r["run_id"]: r for r in json.loads(res.output)}
    assert held[a]["held_tables"] == 0 and held[b]["held_tables"] == 0 and held[b]["purged_tables"] == 2
    res = cli("purge", "--db", db, "--older-than", "1d", "--json")
    assert res.exit_code == 0 and json.loads(res.output)["runs"] == []


# -- retain: ------------------------------------------------------------------------------------

@pytest.mark.parametrize("retain, held", [("published", 1), ("none", 0)])
def test_retain_purges_after_each_run(cli, tmp_path, retain, held):
    wf, db = workflow(tmp_path, retain=retain), tmp_path / "s.duckdb"
    first = run(cli, wf, db)
    assert first["purged"]["retain"] == retain
    assert originals_in(db) == set()
    with Store(db, read_only=True) as store:
        assert len(store.data_objects()) == held
    again = run(cli, wf, db)
    assert [o["sha256"] for o in again["outputs"]] == [o["sha256"] for o in first["outputs"]]
    assert originals_in(db) == set()
    trace = cli("lineage", "--db", db, "release")
    assert trace.exit_code == 0 and "people.csv sha256" in trace.output
    assert cli("verify", tmp_path / "out" / "release", "--rerun").exit_code == 0


def test_retain_on_the_command_line_and_after_a_failed_run(cli, tmp_path):
    wf, db = workflow(tmp_path), tmp_path / "s.duckdb"
    res = cli("run", wf, "--db", db, "--retain", "published")
    assert res.exit_code == 0 and "retain: published: purged 2 table(s)" in res.output
    assert originals_in(db) == set()
    res = cli("run", wf, "--db", db, "--retain", "published", "--set", "grouped.k=1000")
    assert res.exit_code != 0
    assert originals_in(db) == set()


def test_a_run_that_keeps_everything_says_what_the_store_holds(cli, tmp_path):
    res = cli("run", workflow(tmp_path), "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 0
    assert "holds 2 table(s) of original or intermediate records" in res.output and "anonflow purge" in res.output


def test_retain_must_be_one_of_its_values(cli, tmp_path):
    wf = workflow(tmp_path, retain="forever")
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2
    assert "'retain' must be one of all, published, none" in res.output and str(wf) in res.output


def test_age_parsing():
    from anonflow.store import parse_age

    assert parse_age("30d") == timedelta(days=30) and parse_age("90m") == timedelta(minutes=90)
    with pytest.raises(InputError, match="older_than '3 days'"):
        parse_age("3 days", "older_than")


def test_retain_published_on_a_lattice_leaves_no_original_value_and_reruns_the_same(cli, tmp_path):
    """ARX's Adult under the lattice: after retain: published the store holds the published
    table alone, without the hierarchies (which list every original value of the
    quasi-identifiers); the next run computes them again and publishes the same bytes."""
    import pyarrow.csv as pacsv

    from tests.support.helpers import WORKFLOWS

    wf = WORKFLOWS / "arx-adult-k5.yaml"
    source = pacsv.read_csv(WORKFLOWS / "data" / "arx" / "adult.csv",
                            parse_options=pacsv.ParseOptions(delimiter=";"),
                            convert_options=pacsv.ConvertOptions(column_types={}, strings_can_be_null=False))
    keep_all, kept = tmp_path / "all.duckdb", tmp_path / "published.duckdb"
    first = run(cli, wf, keep_all, "--out-dir", tmp_path / "a")
    published = (tmp_path / "a" / "arx-adult-k5.csv").read_text()
    rare = {v for c in ("native-country", "occupation", "education", "marital-status")
            for v in set(source.column(c).to_pylist()) if len(v) >= 6 and v not in published}
    assert len(rare) > 10

    def found(db: Path) -> set[str]:
        data = db.read_bytes()
        return {v for v in rare if v.encode() in data}

    assert found(keep_all)  # the positive control: a store that keeps everything holds them
    second = run(cli, wf, kept, "--out-dir", tmp_path / "b", "--retain", "published")
    assert found(kept) == set()
    third = run(cli, wf, kept, "--out-dir", tmp_path / "b", "--retain", "published")
    assert found(kept) == set()
    shas = [sorted(o["sha256"] for o in r["outputs"]) for r in (first, second, third)]
    assert shas[0] == shas[1] == shas[2]
    statuses = {s["step"]: s["status"] for s in third["steps"]}
    # the hierarchy step computed the hierarchies again (the same tables): only then is the
    # kept lattice output served from the cache
    assert statuses["hier"] == "succeeded" and statuses["anon"] == "cached"


def test_a_copy_left_by_a_purge_that_died_is_removed_when_the_store_is_next_opened(tmp_path):
    db = tmp_path / "s.duckdb"
    Store(db).close()
    left = [tmp_path / ".s.duckdb.purge-0123456789ab", tmp_path / ".s.duckdb.purge-0123456789ab.wal"]
    other = tmp_path / ".s.duckdb.purge-notours"
    for p in (*left, other):
        p.write_bytes(b"records")
    Store(db, read_only=True).close()
    assert all(p.exists() for p in left)  # a reader holds no lock: it leaves them
    Store(db).close()
    assert not any(p.exists() for p in left) and other.exists()


def test_purge_through_a_linked_store_rewrites_the_file_it_names(cli, tmp_path, ran_once):
    _, target, _ = ran(ran_once, tmp_path, "real/s.duckdb")
    link = tmp_path / "link.duckdb"
    link.symlink_to(target)
    assert cli("purge", "--db", link, "--all").exit_code == 0
    assert link.is_symlink() and originals_in(target) == set()
    assert cli("runs", "--db", target).exit_code == 0
    assert not list((tmp_path / "real").glob(".s.duckdb.purge-*")) and not list(tmp_path.glob(".link*"))


def test_purge_from_the_python_api(cli, tmp_path, ran_once):
    import anonflow

    wf, db, result = ran(ran_once, tmp_path)
    rid = result["run_id"]
    assert anonflow.purge(db, older_than="1d")["runs"] == []
    aged = anonflow.purge(db, older_than=timedelta(0))  # every run started before now
    assert aged["runs"] == [rid] and len(aged["tables"]) == 2 and aged["bytes_after"] > 0
    preview = anonflow.purge(db, runs=[rid], dry_run=True)
    assert preview["dry_run"] and preview["tables"] == []  # the age purge above removed them
    with pytest.raises(StoreError, match="no anonflow store"):
        anonflow.purge(tmp_path / "none.duckdb", everything=True)
    with pytest.raises(InputError, match="say what to purge"):
        anonflow.purge(db)


def test_purge_never_rewrites_a_duckdb_file_that_is_not_a_store(cli, tmp_path):
    import duckdb

    theirs = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(theirs))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    os.chmod(theirs, 0o600)
    before = theirs.read_bytes()
    res = cli("purge", "--db", theirs, "--all")
    assert res.exit_code == 1 and "is not an anonflow store" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert theirs.read_bytes() == before
