"""The DuckDB store: source tables, every step's output table, and their lineage.

:class:`Store` is the one object the engine holds: a DuckDB file opened (and migrated, and
tidied after a process that died) here, its data tables (:mod:`.tables`), its ledger of runs
(:mod:`.ledger`), its purge operations (:mod:`.erase`) and its schema (:mod:`.migrations`).
Identifiers are quoted by :func:`anonflow.sandbox.ident`; values are always passed as
parameters.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator

import duckdb

from ..cleanup import private_folder, spill_folder
from ..errors import AnonflowWarning, StoreError
from ..filemodes import enter_private, leave_private, open_to_others
from ..sandbox import connect, duck_message
from .connection import OPENING_LOCK, RUNNING, Resources, check_store_file, damaged, open_failure, opening, sql_text
from .erase import Erase
from .ledger import Ledger
from .migrations import Migrations
from .privacy_ledger import PrivacyLedger
from .tables import Tables


class Store(Tables, Ledger, PrivacyLedger, Erase, Migrations):
    """One DuckDB file holding data tables and the lineage of every run."""

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """One run at a time on this store file in this process: its threads share one DuckDB
        database, and two runs creating the same content-addressed table or step view at once
        failed with "Catalog write-write conflict". A second thread's run waits for the first."""
        if self.in_memory:
            yield
            return
        key = os.path.realpath(self.path)
        with OPENING_LOCK:
            lock = RUNNING.setdefault(key, threading.RLock())
        with lock:
            yield

    def __init__(self, path: str | Path = "anonflow.duckdb", *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if read_only and not self.path.exists():
            raise StoreError(f"no anonflow store at {self.path} (run a workflow first, or pass --db)")
        self.in_memory = str(path) == ":memory:"
        loose = None
        if not self.in_memory:
            check_store_file(self.path)
            loose = open_to_others(self.path)
        # the store holds the original records: while it is open for writing, every file
        # created (the store, its write-ahead log, spill files) is owner-only (anonflow.filemodes)
        self._private = not read_only and not self.in_memory
        if self._private:
            enter_private()
        # DuckDB spills to a work folder of anonflow's own: created fresh, owner-only, removed on close
        self._spill = spill_folder()
        try:
            self.con = connect(str(self.path), read_only=read_only)
            self.con.execute(f"SET temp_directory = '{self._spill}'")  # mkdtemp's name: no quote in it
        except duckdb.Error as exc:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._leave_private()
            raise StoreError(open_failure(self.path, exc)) from None
        try:
            self.threads = int(self.con.execute("SELECT current_setting('threads')").fetchone()[0])
            self.memory_limit = str(self.con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
            if read_only:
                self._check_schema()
            else:
                with opening(self.path):  # two threads opening one new store: one creates it
                    self._migrate()
                    self._mark_interrupted()
                    self._drop_scratch()
                    self._drop_purge_copies()
                    self._finish_interrupted_purge()
                    self._clean_journals()
        except duckdb.Error as exc:
            self.close()
            raise StoreError(damaged(self.path, exc)) from None
        except BaseException:  # not an anonflow store, a newer one: nothing stays open
            self.close()
            raise
        if loose:  # an anonflow store (checked above) that others can open
            warnings.warn(loose, AnonflowWarning, stacklevel=2)

    def configure(self, resources: Resources) -> None:
        """Apply a workflow's (or the CLI's) ``resources``: DuckDB's memory limit (beyond it,
        DuckDB spills to disk), its threads, and the folder it spills to (an owner-only folder
        of anonflow's own is made inside it and removed on close)."""
        if resources.temp_directory is not None:
            parent = Path(resources.temp_directory)
            try:
                parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                spill = spill_folder(parent)
            except OSError as exc:
                raise StoreError(f"cannot use {parent} as the temp directory: {exc.strerror or exc}") from None
            self.con.execute(f"SET temp_directory = '{sql_text(spill)}'")
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = spill
        if resources.memory is not None:
            try:
                self.con.execute(f"SET memory_limit = '{sql_text(resources.memory)}'")
            except duckdb.Error as exc:
                raise StoreError(f"resources.memory {resources.memory!r}: {duck_message(exc)}") from None
        if resources.threads is not None:
            self.con.execute(f"SET threads = {int(resources.threads)}")
            self.threads = int(resources.threads)
        self.memory_limit = str(self._one("SELECT current_setting('memory_limit')")[0])

    def spill_journaled(self, journal: Any) -> None:
        """Move DuckDB's spill folder to a new one recorded in a run's ``journal`` before it is
        made (spilled records are original records: a killed run's are removed later)."""
        spill = str(private_folder(Path(self._spill).parent, "anonflow-spill-", journal, "spill"))
        try:
            self.con.execute(f"SET temp_directory = '{sql_text(spill)}'")
        except duckdb.Error:  # DuckDB holds spilled data there still: keep it
            shutil.rmtree(spill, ignore_errors=True)
            if journal is not None:
                journal.removed(spill)
            return
        old, self._spill = self._spill, spill
        shutil.rmtree(old, ignore_errors=True)
        self._spill_journal = journal


    def _one(self, sql: str, params: list[Any] | None = None) -> tuple | None:
        """First row of a query (the result is read to the end, as DuckDB requires)."""
        rows = self.con.execute(sql, params or []).fetchall()
        return rows[0] if rows else None

    def close(self) -> None:
        try:
            con = getattr(self, "con", None)
            if con is not None:
                con.close()
        finally:
            shutil.rmtree(self._spill, ignore_errors=True)
            journal = getattr(self, "_spill_journal", None)
            if journal is not None and not os.path.lexists(self._spill):
                journal.removed(self._spill)
            self._leave_private()

    def _leave_private(self) -> None:
        if self._private:
            self._private = False
            leave_private()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

