"""``anonflow purge`` never destroys what it was not asked to, and leaves nothing it was (issue 28,
section 5): a store with other names (hard links) is refused in one line, a purge killed at a
known point is visible to ``anonflow runs`` and finished by the next writable open, and after
``retain: published`` and ``purge --all`` no original value is left anywhere in the store file,
error messages of failed runs included. Values are looked for in the store's bytes, as
tests/support/leakscan.py does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anonflow.store import REDACTED, Store

from tests.store.test_confidentiality import originals_in, workflow

#: a value only the source holds, which a typing error quotes
SECRET = "Qzsecret7Wyvernhold"


def _run(cli, wf: Path, db: Path, *args: str, code: int = 0):
    res = cli("run", wf, "--db", db, *args)
    assert res.exit_code == code, res.output
    return res


def _store_bytes(db: Path) -> bytes:
    wal = db.with_name(db.name + ".wal")
    return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


# -- other names ---------------------------------------------------------------------------------


def test_a_store_with_other_names_is_refused_in_one_line_and_both_names_stay_intact(cli, tmp_path):
    db = tmp_path / "s.duckdb"
    _run(cli, workflow(tmp_path), db)
    backup = tmp_path / "backup.duckdb"
    os.link(db, backup)
    before = db.read_bytes()
    res = cli("purge", "--all", "--db", db)
    assert res.exit_code == 1, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert f"the store {db} has 1 other name(s) (hard links" in res.output
    assert "every other name would be left holding only zeros" in res.output and "nothing was purged" in res.output
    assert f"-samefile {db}" in res.output
    assert db.read_bytes() == before == backup.read_bytes()
    (tmp_path / "via-link.duckdb").symlink_to(db)        # a symbolic link is not another name; the file's are
    res = cli("purge", "--all", "--db", tmp_path / "via-link.duckdb")
    assert res.exit_code == 1 and "has 1 other name(s)" in res.output and db.read_bytes() == before
    res = cli("runs", "--db", backup)
    assert res.exit_code == 0 and "succeeded" in res.output
    # retain: published on a linked store: the run's purge is refused the same way, the backup intact
    res = _run(cli, workflow(tmp_path, retain="published", name="wf2.yaml"), db, "--out-dir", tmp_path / "o2",
               code=1)
    assert "ended (succeeded), but retain: published did not purge the store: the store" in res.output
    assert "has 1 other name(s)" in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert db.stat().st_ino == backup.stat().st_ino and Store(backup, read_only=True).runs()
    # once the other name is gone, the purge runs and the originals are gone
    backup.unlink()
    assert cli("purge", "--all", "--db", db).exit_code == 0
    assert originals_in(db) == set()


# -- an interrupted purge ------------------------------------------------------------------------

#: the subprocess: 'anonflow purge --all' with a pause at one point of Store.rewrite, where the
#: test kills it (SIGKILL: no handler, no cleanup)
_PAUSED = """
import sys, time, pathlib
import anonflow.store.erase as store
ready, point = pathlib.Path(sys.argv[1]), sys.argv[2]

def pause(*args, **kwargs):
    ready.write_text("here")
    time.sleep(120)

if point == "before-rewrite":
    store.Erase.rewrite = pause
else:  # after the fresh file replaced the old one, before the old bytes are zeroed
    store._zero_fill = pause
from anonflow.cli import main
main(["purge", "--all", "--db", sys.argv[3]])
"""


@pytest.mark.parametrize("point", ["before-rewrite", "before-zero-fill"])
def test_a_purge_killed_midway_is_said_by_runs_and_finished_by_the_next_writable_open(cli, tmp_path, point):
    db = tmp_path / "s.duckdb"
    _run(cli, workflow(tmp_path), db)
    assert originals_in(db)
    ready = tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", _PAUSED, str(ready), point, str(db)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the purge never reached its pause"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    journal = tmp_path / ".s.duckdb.purge-journal"
    assert journal.is_file() and oct(journal.stat().st_mode & 0o777) == oct(0o600)
    if point == "before-rewrite":  # the tables were dropped, but their bytes are still in the file
        assert originals_in(db)
    res = cli("runs", "--db", db)
    assert res.exit_code == 0, res.output
    assert f"an interrupted purge of {db} (started " in res.output and "is pending" in res.output, res.output
    assert "the next run or 'anonflow purge' on this store finishes it" in res.output
    res = cli("purge", "--all", "--dry-run", "--db", db)  # a dry run changes nothing, not even this
    assert res.exit_code == 0 and journal.exists(), res.output
    Store(db).close()                                  # the next writable open finishes it
    assert not journal.exists() and originals_in(db) == set()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".s.duckdb.purge-")]
    with Store(db, read_only=True) as store:
        last = store.purges()[-1]
        assert last["selection"]["interrupted"] is True and last["selection"]["all"] is True
        assert last["tables"] and store.runs()[0]["status"] == "succeeded"   # lineage kept
    res = cli("runs", "--db", db)
    assert "interrupted purge" not in res.output
    assert "holds no source or intermediate table" in res.output


# -- free text -----------------------------------------------------------------------------------


def _failing(tmp_path: Path, retain: str) -> Path:
    """A workflow whose typing fails on a non-number in a continuous column, quoting it."""
    wf = workflow(tmp_path, retain=retain, name=f"fail-{retain}.yaml")
    text = wf.read_text()
    assert "quasi: [age, income]" in text
    wf.write_text(text.replace("quasi: [age, income]", "quasi: {age: continuous, income: continuous}"))
    people = tmp_path / "people.csv"
    lines = people.read_text().splitlines()
    cells = lines[5].split(",")
    cells[3] = SECRET  # income
    lines[5] = ",".join(cells)
    people.write_text("\n".join(lines) + "\n")
    return wf


def test_a_failed_runs_error_quoting_an_original_value_is_removed_by_the_purge(cli, tmp_path):
    db = tmp_path / "s.duckdb"
    res = _run(cli, _failing(tmp_path, "all"), db, code=2)
    assert f"has the value '{SECRET}'" in res.output     # the user is told, once
    with Store(db, read_only=True) as store:          # ... and the store records it, with the record
        assert SECRET in store.runs()[0]["error"]
    assert SECRET.encode() in _store_bytes(db)
    res = cli("purge", "--all", "--db", db)
    assert res.exit_code == 0, res.output
    assert "removed 2 recorded error message(s) and note(s) of those runs" in res.output, res.output
    assert SECRET.encode() not in _store_bytes(db)
    with Store(db, read_only=True) as store:
        run = store.runs()[0]
        assert run["status"] == "failed" and run["error"] == REDACTED
        assert {s["error"] for s in store.steps(run["run_id"]) if s["status"] == "failed"} == {REDACTED}
    res = cli("runs", "--db", db)
    assert f"error: {REDACTED}" in res.output and SECRET not in res.output


def test_retain_published_and_purge_all_leave_no_original_value_in_the_store(cli, tmp_path):
    db = tmp_path / "s.duckdb"
    _run(cli, _failing(tmp_path, "published"), db, code=2)     # retain: published after a failed run
    (tmp_path / "people.csv").unlink()
    _run(cli, workflow(tmp_path, retain="published", name="ok.yaml"), db, "--out-dir", tmp_path / "o")
    res = cli("purge", "--all", "--db", db)
    assert res.exit_code == 0, res.output
    data = _store_bytes(db)
    assert SECRET.encode() not in data and originals_in(db) == set()
    with Store(db, read_only=True) as store:
        notes = [n for r in store.runs() for s in store.steps(r["run_id"]) for n in (s["summary"] or {}).get("notes", [])]
        assert set(notes) <= {REDACTED}
        assert json.dumps([r["error"] for r in store.runs()]).count(SECRET) == 0


def test_a_journal_open_to_others_is_never_acted_on(cli, tmp_path):
    """A purge journal is honoured only as a purge of the store's owner writes it (owner-only): one
    planted in a shared folder cannot make the next run purge the store."""
    db = tmp_path / "s.duckdb"
    _run(cli, workflow(tmp_path), db)
    journal = tmp_path / ".s.duckdb.purge-journal"
    journal.write_text(json.dumps({"selection": {"all": True, "keep": "none"}, "objects": [], "tables": [],
                                   "runs": []}))
    journal.chmod(0o644)
    before = db.read_bytes()
    with pytest.warns(Warning, match="looks like a purge journal but is not an owner-only file of yours"):
        Store(db).close()
    assert journal.exists() and originals_in(db) and db.read_bytes() == before
    journal.chmod(0o600)   # as a purge writes it: finished (it names no table, so none goes)
    Store(db).close()
    assert not journal.exists()
    with Store(db, read_only=True) as store:
        assert store.purges()[-1]["selection"]["interrupted"] is True and store.purges()[-1]["tables"] == []


def test_a_pending_purge_that_cannot_be_finished_leaves_the_store_usable(cli, tmp_path, monkeypatch):
    """A full disk when the pending purge is retried: the store still opens (with a warning), the purge stays
    pending and is finished at a later open."""
    import errno

    db = tmp_path / "s.duckdb"
    _run(cli, workflow(tmp_path), db)
    with Store(db) as store:   # the journal a purge writes first (its selection named nothing)
        store.begin_purge({"selection": {"all": True, "keep": "published"}, "runs": [], "objects": [],
                           "tables": [], "rows": 0})

    def full(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(Store, "rewrite", full)
        with pytest.warns(Warning, match="could not be finished .*No space left on device.*stays pending"):
            store = Store(db)
        store.runs()
        store.close()
    assert (tmp_path / ".s.duckdb.purge-journal").exists()
    Store(db).close()
    assert not (tmp_path / ".s.duckdb.purge-journal").exists()
