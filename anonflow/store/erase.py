"""How the store removes records (:mod:`anonflow.store.purge` decides which): dropping data
tables, redacting free text, rewriting the file so no trace of the records stays, the journal
that lets an interrupted purge be finished at the next open."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import duckdb

from ..errors import AnonflowWarning, StoreError
from ..sandbox import connect, ident
from .connection import now, open_failure, sql_text, to_json

#: what a purge leaves of a purged run's free text (error messages, plugin notes), which can
#: quote original values
REDACTED = "[removed by purge: this text could quote original values]"

#: a data object's name where a view's SQL reads it
DATA_NAME = re.compile(r'\b((?:t|af_raw)_[0-9a-f]{24})\b')  # DuckDB keeps a view's SQL unquoted


class Erase:
    """The part of :class:`anonflow.store.Store` that removes records."""

    con: Any
    path: Any
    in_memory: bool

    def _drop_purge_copies(self) -> None:
        """Copies a purge was writing when its process died (:meth:`rewrite`): they hold the
        records it kept; this connection holds the write lock, so no purge is writing one."""
        if self.in_memory:
            return
        real = Path(os.path.realpath(self.path))
        pattern = re.compile(re.escape(f".{real.name}.purge-") + r"[0-9a-f]{12}(\.wal)?")
        with os.scandir(real.parent) as it:  # listed exactly: the store's name is never a pattern
            leftovers = [e.path for e in it if pattern.fullmatch(e.name) and e.is_file(follow_symlinks=False)]
        for leftover in leftovers:
            Path(leftover).unlink(missing_ok=True)


    # -- purge (anonflow.store.purge decides what goes; this is how) --------------------

    def data_objects(self) -> dict[str, tuple[str, set[str]]]:
        """Every data table and view of the store (``t_*``, ``af_raw_*``): name -> (``TABLE``
        or ``VIEW``, the data objects a view reads)."""
        kinds = self.con.execute(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_catalog = current_database() AND (starts_with(table_name, 't_') "
            "OR starts_with(table_name, 'af_raw_'))").fetchall()
        views = dict(self.con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = 'main' AND NOT temporary "
            "AND database_name = current_database()").fetchall())
        return {name: ("VIEW", set(DATA_NAME.findall(views.get(name) or "")) - {name}) if kind == "VIEW"
                else ("TABLE", set()) for name, kind in kinds}

    def table_records(self) -> list[dict[str, Any]]:
        """Every data table's record (held or purged): name, data_hash, rows, hierarchies,
        created_run, purged_at."""
        rows = self._dicts("SELECT name, data_hash, rows, hierarchies, created_run, purged_at FROM af_tables "
                           "ORDER BY name")
        for r in rows:
            r["hierarchies"] = [h["table"] for h in json.loads(r["hierarchies"]).values()] if r["hierarchies"] else []
        return rows

    def step_tables(self) -> list[dict[str, Any]]:
        """Every step run with the tables it read and wrote, and its run's start and status."""
        return self._dicts(
            "SELECT s.run_id, r.started_at, r.status AS run_status, s.step, s.kind, s.status, s.output_table, "
            "s.inputs, s.summary FROM af_step_runs s JOIN af_runs r USING (run_id) ORDER BY r.started_at, s.position")

    def drop_data(self, objects: Iterable[str], purged: Iterable[str]) -> None:
        """Drop data tables and views (views first), and the ``steps.*`` views that read them;
        mark the records ``purged`` (table names) as purged. One transaction."""
        objects = set(objects)
        kinds = self.data_objects()
        steps_views = self.con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = 'steps' AND NOT temporary "
            "AND database_name = current_database()").fetchall()
        when = now()
        self.con.execute("BEGIN TRANSACTION")
        try:
            for name, sql in steps_views:
                if set(DATA_NAME.findall(sql or "")) & objects:
                    self.con.execute(f"DROP VIEW IF EXISTS steps.{ident(name)}")
            for name in sorted(objects, key=lambda n: (kinds.get(n, ("TABLE",))[0] != "VIEW", n)):
                if name in kinds:
                    self.con.execute(f"DROP {kinds[name][0]} {ident(name)}")
            for name in sorted(set(purged)):
                self.con.execute("UPDATE af_tables SET purged_at = ? WHERE name = ?", [when, name])
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    def record_purge(self, selection: dict[str, Any], tables: list[str], rows: int, before: int | None,
                     after: int | None) -> None:
        self.con.execute("INSERT INTO af_purges VALUES (?, ?, ?, ?, ?, ?)",
                         [now(), to_json(selection), to_json(sorted(tables)), rows, before, after])

    def purges(self) -> list[dict[str, Any]]:
        rows = self._dicts("SELECT * FROM af_purges ORDER BY purged_at")
        for r in rows:
            r["selection"], r["tables"] = json.loads(r["selection"]), json.loads(r["tables"])
        return rows

    def file_size(self) -> int | None:
        """The store file's size in bytes (with its write-ahead log), None in memory."""
        if self.in_memory:
            return None
        wal = self.path.with_name(self.path.name + ".wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    def rewrite(self) -> None:
        """Copy the store into a fresh file and put it in place of the old one.

        Dropping a table frees its blocks for reuse but leaves their bytes in the file, even
        after CHECKPOINT and VACUUM: only a new file holds no trace of purged records. The copy
        (``COPY FROM DATABASE``: every schema, table, view and constraint, tables in insertion
        order) is written beside the store, owner-only, then renamed over it; the old file's
        bytes are overwritten with zeros through a handle kept open on it (on a copy-on-write
        file system or an SSD the old blocks may still survive on the device: see
        docs/store.md). The connection is opened again on the new file."""
        if self.in_memory:
            return
        self.con.execute("CHECKPOINT")
        real = Path(os.path.realpath(self.path))  # a --db that is a link: the file it names is rewritten
        fresh = real.with_name(f".{real.name}.purge-{secrets.token_hex(6)}")
        db = self._one("SELECT current_database()")[0]
        try:
            self.con.execute(f"ATTACH '{sql_text(str(fresh))}' AS af_fresh")
            try:
                self.con.execute(f"COPY FROM DATABASE {ident(db)} TO af_fresh")
            finally:
                self.con.execute("DETACH af_fresh")
        except BaseException:
            for p in (fresh, fresh.with_name(fresh.name + ".wal")):
                p.unlink(missing_ok=True)
            raise
        old = os.open(real, os.O_RDWR)
        try:
            settings = self._one("SELECT current_setting('memory_limit'), current_setting('temp_directory')")
            self.con.close()
            os.replace(fresh, real)
            _zero_fill(old)
        finally:
            os.close(old)
        with contextlib.suppress(OSError):  # the rename is durable once the folder is synced
            folder = os.open(real.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        try:
            self.con = connect(str(self.path))
            self.con.execute(f"SET temp_directory = '{sql_text(settings[1])}'")
            self.con.execute(f"SET memory_limit = '{sql_text(settings[0])}'")
            self.con.execute(f"SET threads = {int(self.threads)}")
        except duckdb.Error as exc:
            raise StoreError(open_failure(self.path, exc)) from None

    # -- purge safety: other names, the journal of a purge, free text ------------------------

    def other_names(self) -> int:
        """How many other names (hard links) the store file has: a purge overwrites the old
        file's bytes with zeros (:meth:`rewrite`), which every other name shares."""
        if self.in_memory:
            return 0
        return max(os.stat(os.path.realpath(self.path)).st_nlink - 1, 0)

    def refuse_other_names(self) -> None:
        """StoreError (one line) when the store has other names: purging would zero them."""
        n = self.other_names()
        if n:
            real = os.path.realpath(self.path)
            raise StoreError(
                f"the store {self.path} has {n} other name(s) (hard links, such as a backup made with ln, cp -al "
                f"or rsnapshot): a purge writes a fresh file and overwrites the old file's bytes with zeros, so "
                f"every other name would be left holding only zeros (that copy, lineage included, destroyed); "
                f"nothing was purged: remove the other names (find {os.path.dirname(real) or '.'} -samefile "
                f"{real} lists them) or keep the backup as a real copy (cp --reflink=never), then purge")

    def purge_journal(self) -> Path | None:
        """The file a purge writes before it changes anything and removes once done: while it
        exists, a purge was interrupted (None in memory)."""
        if self.in_memory:
            return None
        real = Path(os.path.realpath(self.path))
        return real.with_name(f".{real.name}.purge-journal")

    def pending_purge(self) -> dict[str, Any] | None:
        """The journal of an interrupted purge (``started_at``, ``selection``, ``tables``...),
        or None when no purge was interrupted."""
        journal = self.purge_journal()
        if journal is None or not journal.is_file() or journal.is_symlink():
            return None
        st = journal.stat()
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:  # not one a purge of ours wrote: never acted on
            warnings.warn(f"{journal} looks like a purge journal but is not an owner-only file of yours; it is "
                          "ignored (remove it)", AnonflowWarning, stacklevel=3)
            return None
        try:
            data = json.loads(journal.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        return data if isinstance(data, dict) else {"selection": {}, "objects": [], "tables": [], "runs": []}

    def begin_purge(self, plan: Mapping[str, Any]) -> None:
        """Write the purge journal (owner-only, whole or not at all) before anything changes."""
        journal = self.purge_journal()
        if journal is None:
            return
        tmp = journal.with_name(journal.name + f".{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({**plan, "started_at": now().isoformat(), "pid": os.getpid()}, sort_keys=True))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, journal)

    def end_purge(self) -> None:
        journal = self.purge_journal()
        if journal is not None:
            journal.unlink(missing_ok=True)

    def redact_free_text(self, runs: Iterable[str]) -> int:
        """Replace the free text recorded for ``runs`` that can quote an original value (a
        failed run's and step's error message: "record 7 has the value 'x'"; the notes plugins
        write into a step's summary) with :data:`REDACTED`. Returns how many texts were replaced."""
        runs = sorted(set(runs))
        if not runs:
            return 0
        marks = ", ".join("?" * len(runs))
        done = 0
        self.con.execute("BEGIN TRANSACTION")
        try:
            for table in ("af_runs", "af_step_runs"):
                done += int(self._one(f"SELECT count(*) FROM {table} WHERE error IS NOT NULL AND error <> ? "
                                      f"AND run_id IN ({marks})", [REDACTED, *runs])[0])
                self.con.execute(f"UPDATE {table} SET error = ? WHERE error IS NOT NULL AND run_id IN ({marks})",
                                 [REDACTED, *runs])
            rows = self.con.execute(f"SELECT run_id, step, summary FROM af_step_runs WHERE summary IS NOT NULL "
                                    f"AND run_id IN ({marks})", runs).fetchall()
            for run_id, step, summary in rows:
                data = json.loads(summary)
                if isinstance(data, dict) and data.get("notes") and data["notes"] != [REDACTED]:
                    data["notes"] = [REDACTED]
                    done += 1
                    self.con.execute("UPDATE af_step_runs SET summary = ? WHERE run_id = ? AND step = ?",
                                     [to_json(data), run_id, step])
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise
        return done

    def _finish_interrupted_purge(self) -> None:
        """A purge whose process died (its journal is still there) is finished: what it was
        dropping is dropped, its runs' free text redacted, the store rewritten into a fresh
        file, the purge recorded (``interrupted: true``), the journal removed. This connection
        holds the write lock, so the purge is not running any more."""
        pending = self.pending_purge()
        if pending is None:
            return
        pid = pending.get("pid")
        if isinstance(pid, int) and pid != os.getpid() and _process_alive(pid):
            return  # its purge is still running (between its rename and its reconnect): it finishes itself
        if self.other_names():  # rewriting would zero the other names: left pending, said
            warnings.warn(f"an interrupted purge of {self.path} is pending, but the store now has other names (hard "
                          "links); it is finished once they are removed", AnonflowWarning, stacklevel=3)
            return
        objects = [str(n) for n in pending.get("objects") or [] if isinstance(n, str)]
        tables = [str(n) for n in pending.get("tables") or [] if isinstance(n, str)]
        runs = [str(r) for r in pending.get("runs") or [] if isinstance(r, str)]
        if isinstance(pending.get("selection"), dict) and pending["selection"].get("all"):
            runs = [r[0] for r in self.con.execute("SELECT run_id FROM af_runs").fetchall()]
        before = self.file_size()
        self.drop_data([n for n in objects if n in self.data_objects()], tables)
        self.redact_free_text(runs)
        try:
            self.rewrite()
        except (OSError, duckdb.Error) as exc:  # a full disk, say: the store still opens; the purge stays pending
            warnings.warn(f"an interrupted purge of {self.path} could not be finished ({exc}); it stays pending and "
                          "is tried again at the next open", AnonflowWarning, stacklevel=3)
            return
        selection = pending.get("selection") if isinstance(pending.get("selection"), dict) else {}
        self.record_purge({**selection, "interrupted": True, "started_at": pending.get("started_at"),
                           "finished_at": now().isoformat()}, tables, int(pending.get("rows") or 0), before,
                          self.file_size())
        self.end_purge()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _zero_fill(fd: int, block: int = 1 << 20) -> None:
    """Overwrite an open file's bytes with zeros and sync them (best effort: a file system
    that writes elsewhere, copy-on-write or an SSD's wear levelling, may keep the old blocks)."""
    size = os.fstat(fd).st_size
    zeros = bytes(block)
    os.lseek(fd, 0, os.SEEK_SET)
    done = 0
    while done < size:
        done += os.write(fd, zeros[:min(block, size - done)])
    os.fsync(fd)


