"""The DuckDB store: source tables, every step's output table, and their lineage.

This is the only module of the engine that talks to DuckDB. Identifiers are quoted by
:func:`ident`; values are always passed as parameters. Internal tables are created by the
numbered, append-only migrations in :data:`MIGRATIONS`.

Data tables are content-addressed (``t_<hash prefix>``): a table is written once and never
overwritten, so a failed run cannot damage the results of an earlier one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import AnonflowWarning, InputError, PurgedError, StoreError, WorkflowError
from .filemodes import enter_private, leave_private, open_to_others
from .hierarchy import Hierarchy
from .schema import FRAGMENT, RESERVED, ROW, Typing
from .spec import Resources, SourceSpec
from .table import Stored, TableHasher, TypedTable, canonical, table_hash

#: Numbered migrations; append only, never edit one that has shipped.
MIGRATIONS: list[tuple[str, str]] = [
    ("create lineage tables", """
        CREATE TABLE af_tables (
            name        VARCHAR PRIMARY KEY,  -- DuckDB table holding the data
            hash        VARCHAR NOT NULL,     -- identity: data hash + typing + claims
            data_hash   VARCHAR NOT NULL,     -- canonical content hash (anonflow.table.table_hash)
            rows        BIGINT NOT NULL,
            typing      JSON,                 -- anonflow.schema.Typing, null for untyped sources
            claims      JSON,                 -- privacy models claimed by the producing algorithm
            created_run VARCHAR,
            created_step VARCHAR,
            created_at  TIMESTAMPTZ
        );
        CREATE TABLE af_runs (
            run_id        VARCHAR PRIMARY KEY,
            workflow      VARCHAR NOT NULL,   -- the workflow's name
            workflow_path VARCHAR,
            workflow_text VARCHAR NOT NULL,
            workflow_hash VARCHAR NOT NULL,
            seed          BIGINT NOT NULL,
            overrides     JSON,               -- --set STEP.PARAM=VALUE, in order
            versions      JSON,               -- anonflow, plugins, duckdb, pyarrow, numpy, python
            status        VARCHAR NOT NULL,   -- running | succeeded | failed
            error         VARCHAR,
            started_at    TIMESTAMPTZ NOT NULL,
            finished_at   TIMESTAMPTZ
        );
        CREATE TABLE af_step_runs (
            run_id       VARCHAR NOT NULL,
            step         VARCHAR NOT NULL,
            position     INTEGER NOT NULL,    -- execution order within the run
            kind         VARCHAR NOT NULL,    -- source | typing | algorithm | evaluate | publish
            uses         VARCHAR NOT NULL,
            plugin_version VARCHAR,
            params       JSON,                -- canonical JSON, defaults filled in
            seed         UBIGINT,             -- the step's own seed (workflow seed + step name)
            fingerprint  VARCHAR,
            inputs       JSON,                -- [{"name", "table", "hash"}]
            output_table VARCHAR,
            output_hash  VARCHAR,
            rows         BIGINT,
            seconds      DOUBLE,
            status       VARCHAR NOT NULL,    -- succeeded | cached | failed
            cached_from  VARCHAR,             -- run id whose result was reused
            summary      JSON,                -- notes and counts reported by the step
            error        VARCHAR,
            PRIMARY KEY (run_id, step)
        );
        CREATE TABLE af_lineage (
            run_id VARCHAR NOT NULL,
            parent VARCHAR NOT NULL,          -- table name or file path
            child  VARCHAR NOT NULL,
            step   VARCHAR NOT NULL
        );
        CREATE TABLE af_metrics (
            run_id VARCHAR NOT NULL,
            step   VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            value  DOUBLE,
            PRIMARY KEY (run_id, step, metric)
        );
        CREATE TABLE af_outputs (
            run_id VARCHAR NOT NULL,
            step   VARCHAR NOT NULL,
            path   VARCHAR NOT NULL,
            sha256 VARCHAR NOT NULL,
            rows   BIGINT NOT NULL
        );
    """),
    ("hierarchies of typed tables", """
        -- column -> {"table": name of the hierarchy's data table, "builder": ...}
        ALTER TABLE af_tables ADD COLUMN hierarchies JSON;
    """),
    ("published files that are not tables", """
        -- rows is NULL for a file that is not a table (a release's manifest.json, report.html)
        ALTER TABLE af_outputs ALTER COLUMN rows DROP NOT NULL;
    """),
    ("the plugins each step ran", """
        -- [{"kind", "name", "version", "distribution", "code"}]: every plugin whose code the
        -- step ran, with the sha256 of its package's files (anonflow.codehash)
        ALTER TABLE af_step_runs ADD COLUMN plugins JSON;
    """),
    ("purged data tables", """
        -- when 'anonflow purge' (or a workflow's retain:) removed the table's records; the row,
        -- its content hashes and the lineage that names it stay
        ALTER TABLE af_tables ADD COLUMN purged_at TIMESTAMPTZ;
        CREATE TABLE af_purges (
            purged_at    TIMESTAMPTZ NOT NULL,
            selection    JSON NOT NULL,       -- {"runs": [...]} | {"before": ...} | {"all": true}, with "keep"
            tables       JSON NOT NULL,       -- the data tables whose records were removed
            rows         BIGINT NOT NULL,     -- records removed (each distinct content once)
            bytes_before BIGINT,              -- the store file's size before and after it was rewritten
            bytes_after  BIGINT
        );
    """),
    ("run journals", """
        -- where each run's journal lies (anonflow.cleanup): what it created outside the store
        -- (work folders, Dask and spill folders, earlier outputs moved aside), written before
        -- each is made; cleaned is set when the run ended or its leftovers were cleaned up:
        -- [] when it had cleaned up itself, else one line per thing removed or put back
        CREATE TABLE af_journal (
            run_id   VARCHAR PRIMARY KEY,
            journal  VARCHAR NOT NULL,
            cleaned  JSON
        );
    """),
]

SCHEMA_VERSION = len(MIGRATIONS)
#: the migration that created ``af_journal``
_JOURNALS = next(v for v, (name, _) in enumerate(MIGRATIONS, start=1) if name == "run journals")
#: prefix of tables being written (renamed to their content address once hashed)
SCRATCH = "af_scratch_"
#: DuckDB's integer types (its CSV sniffer picks BIGINT)
_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "UHUGEINT")
#: records per batch when the store hashes a table
HASH_BATCH = 1 << 17
#: a table whose records were purged and are computed again: its record is kept (first run,
#: step and time), its records are held again
_HELD_AGAIN = "ON CONFLICT (name) DO UPDATE SET purged_at = NULL"
#: a data object's name where a view's SQL reads it
_DATA_NAME = re.compile(r'\b((?:t|af_raw)_[0-9a-f]{24})\b')  # DuckDB keeps a view's SQL unquoted


def ident(name: str) -> str:
    """Quote an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _arrow(rel: Any) -> pa.Table:
    fetch = getattr(rel, "to_arrow_table", None) or rel.fetch_arrow_table
    return fetch()


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Artifact:
    """A table in the store."""

    table: str
    hash: str
    rows: int


def duckdb_file(path: str | os.PathLike[str]) -> str:
    """``path`` as DuckDB's file readers (``read_parquet``, ``read_csv``) take it literally.
    They expand ``*``, ``?`` and ``[...]`` in a file name: ``out[1]/x.parquet`` reads
    ``out1/x.parquet`` if there is one. Each such character is written as a class of itself
    (``[[]``), which DuckDB's matcher, like a POSIX shell's, reads as that character alone,
    so the one file is read whatever its name (tests/test_names_not_patterns.py puts decoys
    that the unescaped name would match beside it)."""
    text = os.fspath(path)
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def _read_expr(src: SourceSpec, whole: bool = True, types: dict[str, str] | None = None) -> tuple[str, list[Any]]:
    """SQL (and its parameters) that reads a file source. CSV column types are sniffed on the
    whole file (``whole``: no late surprise, no value silently rounded to a type sniffed on a
    sample) or, for planning, which needs only the column names, on DuckDB's sample."""
    if src.format == "parquet":
        return "SELECT * FROM read_parquet(?)", [duckdb_file(src.path)]
    opts = src.options
    args = ["sample_size = -1"] if whole else []
    params: list[Any] = [duckdb_file(src.path)]
    if "delimiter" in opts:
        args.append("delim = ?")
        params.append(str(opts["delimiter"]))
    if "header" in opts:
        args.append("header = ?")
        params.append(bool(opts["header"]))
    if "quote" in opts:
        args.append("quote = ?")
        params.append(str(opts["quote"]))
    if "na_values" in opts:
        args.append("nullstr = ?")
        params.append([str(v) for v in opts["na_values"]])
    given = {str(k): str(v) for k, v in (opts.get("types") or {}).items()}
    if given or types:
        args.append("types = ?")
        params.append({**(types or {}), **given})
    return f"SELECT * FROM read_csv({', '.join(['?', *args])})", params


def _check_source_file(src: SourceSpec) -> None:
    where = f"source {src.name!r}"
    if src.path is None or not src.path.exists():
        raise InputError(f"file not found: {src.path}", where=where)
    if src.path.is_dir():
        raise InputError(f"{src.path} is a directory, expected a file", where=where)
    if not src.path.is_file():  # a device, FIFO or socket: /dev/zero never ends, a FIFO blocks
        raise InputError(f"{src.path} is not a regular file (a device, pipe or socket); give a data file",
                         where=where)
    if src.format == "duckdb":
        return
    if src.path.stat().st_size == 0:
        raise InputError(f"{src.path} is empty (0 bytes): no header and no records", where=where)
    if src.format == "csv" and _only_blank(src.path):
        raise InputError(f"{src.path} holds only blank lines: no header and no records", where=where)


def _only_blank(path: Path, block: int = 1 << 16) -> bool:
    """Whether a text file holds nothing but whitespace (and a UTF-8 byte order mark); reads
    until the first other byte, so a real file costs one block."""
    with open(path, "rb") as fh:
        first = True
        while True:
            chunk = fh.read(block)
            if not chunk:
                return True
            if first and chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
            first = False
            if chunk.strip():
                return False


def _check_header(con: Any, src: SourceSpec, names: list[str]) -> None:
    """A CSV header must name every column once: DuckDB would silently rename a repeated
    name (``age``, ``age_1``; names compare case-insensitively) and call an empty one
    ``column<i>``. ``names`` are the columns DuckDB read; the header is read raw to compare."""
    if src.format != "csv" or src.options.get("header") is False:
        return
    args, params = ["header = false", "all_varchar = true"], [duckdb_file(src.path)]
    for key, opt in (("delimiter", "delim"), ("quote", "quote")):
        if key in src.options:
            args.append(f"{opt} = ?")
            params.append(str(src.options[key]))
    try:
        row = con.execute(f"SELECT * FROM read_csv(?, {', '.join(args)}) LIMIT 1", params).fetchone()
    except duckdb.Error:
        return  # the real read reports the problem
    if row is None or len(row) != len(names):
        return
    raw = [None if v is None else str(v).lstrip("\ufeff") for v in row]
    seen: dict[str, int] = {}
    firsts = []
    for i, v in enumerate(raw):
        if v is not None and v.strip().casefold() not in seen:
            seen[v.strip().casefold()] = i
            firsts.append(i)
    if not all(names[i].strip() == str(raw[i]).strip() for i in firsts):
        return  # the first line is a record, not a header
    where = f"source {src.name!r}"
    for i, v in enumerate(raw):
        if v is None or not v.strip():
            raise InputError(f"the header of {src.path} has no name for column {i + 1}; name every column",
                             where=where)
        j = seen[v.strip().casefold()]
        if j != i:
            also = "" if raw[j].strip() == v.strip() else f" (as {v.strip()!r}: names ignore case)"
            raise InputError(f"the header of {src.path} names column {raw[j].strip()!r} twice{also}, columns "
                             f"{j + 1} and {i + 1}; rename one so that every column has its own name", where=where)


def _no_records(src: SourceSpec) -> str:
    if src.in_memory:
        return f"the in-memory table {src.name!r} has no records"
    if src.format == "postgres":
        return f"{src.describe()} has no records"
    if src.format == "duckdb":
        return f"table {src.table!r}" + (f" in {src.path}" if src.path else "") + " has no records"
    if src.format == "csv":
        return f"{src.path} has a header but no records"
    return f"{src.path} has no records"


def _duck_message(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:400]


def read_source(src: SourceSpec) -> pa.Table:
    """Read a source into Arrow (no ``_row`` column yet); errors name the source and file."""
    where = f"source {src.name!r}"
    if src.in_memory:
        _check_reserved(src.data.column_names, src)
        if src.data.num_rows == 0:
            raise InputError(_no_records(src), where=where)
        return src.data
    if src.format == "duckdb":
        con = _open_duckdb_source(src)
        try:
            data = _arrow(con.sql(f"SELECT * FROM {ident(src.table or '')}"))
        except duckdb.Error as exc:
            raise InputError(f"cannot read table {src.table!r}: {_duck_message(exc)}", where=where) from None
        finally:
            con.close()
        _check_reserved(data.column_names, src)
        if data.num_rows == 0:
            raise InputError(_no_records(src), where=where)
        return data
    _check_source_file(src)
    sql, params = _read_expr(src)
    con = _connect()
    try:
        data = _arrow(con.sql(sql, params=params))
        _check_header(con, src, data.column_names)
    except duckdb.Error as exc:
        raise InputError(f"cannot read {src.path}: {_duck_message(exc)}", where=where) from None
    finally:
        con.close()
    _check_reserved(data.column_names, src)
    if data.num_rows == 0:
        raise InputError(_no_records(src), where=where)
    return data


def _open_duckdb_source(src: SourceSpec) -> Any:
    """A read-only, sandboxed connection to a DuckDB source file: the file may come from
    someone else, and a view in it must not read other files."""
    if src.path is not None:
        _check_source_file(src)
    try:
        return _connect(str(src.path), read_only=True, sandbox=True) if src.path else _connect(sandbox=True)
    except duckdb.Error as exc:
        raise InputError(f"cannot open DuckDB file {src.path}: {_duck_message(exc)}",
                         where=f"source {src.name!r}") from None


def _check_reserved(names: Iterable[str], src: SourceSpec) -> None:
    """``_row`` and ``_class`` are anonflow's, in any case (DuckDB's names are case-insensitive:
    a source column ``_ROW`` would be renamed behind the user's back)."""
    reserved = {r.lower() for r in RESERVED}
    clash = [c for c in names if c.lower() in reserved]
    if clash:
        raise InputError(f"column name {clash[0]!r} is reserved by anonflow (as {clash[0].lower()!r}, in any case); "
                         f"rename it in {src.describe()}", where=f"source {src.name!r}")


def describe_source(src: SourceSpec) -> list[tuple[str, str]]:
    """Column names and DuckDB types of a source, without loading it all (for planning)."""
    where = f"source {src.name!r}"
    if src.in_memory:  # DuckDB's names of the Arrow types (registered: nothing is copied)
        data = read_source(src)
        con = _connect()
        try:
            con.register("_af_incoming", data)
            return [(r[0], r[1]) for r in con.execute("DESCRIBE SELECT * FROM _af_incoming").fetchall()]
        except duckdb.Error as exc:
            raise InputError(f"DuckDB cannot read the in-memory table: {_duck_message(exc)}", where=where) from None
        finally:
            con.close()
    if src.format == "duckdb":
        return [(f.name, str(f.type)) for f in read_source(src).schema]
    if src.format == "postgres":  # one record, for the columns and their types
        from .postgres import SourceReader

        try:
            with SourceReader(src, limit=1) as pg:
                first = pa.Table.from_batches(list(pg.batches()), pg.schema)
        except InputError as exc:
            raise InputError(exc.message, where=where) from None
        _check_reserved(first.column_names, src)
        if first.num_rows == 0:
            raise InputError(_no_records(src), where=where)
        con = _connect()
        try:
            return [(r[0], r[1]) for r in con.execute("DESCRIBE SELECT * FROM first").fetchall()]
        finally:
            con.close()
    _check_source_file(src)
    sql, params = _read_expr(src, whole=False)
    con = _connect()
    try:
        rel = con.execute(f"DESCRIBE {sql}", params)
        columns = [(r[0], r[1]) for r in rel.fetchall()]
        _check_header(con, src, [c for c, _ in columns])
        _check_reserved([c for c, _ in columns], src)
        if con.execute(f"SELECT 1 FROM ({sql}) LIMIT 1", params).fetchone() is None:
            raise InputError(_no_records(src), where=where)
        return columns
    except duckdb.Error as exc:
        raise InputError(f"cannot read {src.path}: {_duck_message(exc)}", where=where) from None
    finally:
        con.close()


def _sql_text(text: str) -> str:
    """A string's body for an SQL literal ('' for ')."""
    if "\0" in text:
        raise ValueError("a NUL character cannot be written to SQL")
    return text.replace("'", "''")


def _copy_option(value: Any) -> str:
    """A COPY option's value as an SQL literal: booleans and numbers as they are, a mapping as
    a struct of text literals (``KV_METADATA``), anything else as a text literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"'{_sql_text(str(k))}': '{_sql_text(str(v))}'" for k, v in value.items()) + "}"
    return f"'{_sql_text(str(value))}'"


#: what DuckDB raises (the CLI turns it into one line about a damaged store)
DatabaseError = duckdb.Error
#: what DuckDB raises when a query needs more memory than its limit and cannot spill
OutOfMemory = duckdb.OutOfMemoryException

#: runs this process has begun and not finished (never marked interrupted while it lives)
ACTIVE_RUNS: set[str] = set()

_DAMAGE_HINT = ("the file is damaged or truncated: move it aside and restore a backup, or start a new store with "
                "--db (published releases are checked by 'anonflow verify', which needs no store)")


def _check_store_file(path: Path) -> None:
    """An existing ``--db`` must be a DuckDB file: DuckDB "opens" other files (a CSV, say) as
    an empty database in memory, so a mistyped --db would record a run nowhere, and it would
    write its header over an empty file of the user's."""
    if "?" in str(path):  # DuckDB reads what follows as options: its write-ahead log would go elsewhere
        raise StoreError(f"cannot use {path} as a store: DuckDB cannot keep a database whose path holds '?' "
                         "(it would write its log under another name); choose another --db")
    if not (path.exists() or path.is_symlink()):
        return
    if path.is_dir():
        raise StoreError(f"cannot open store {path}: it is a directory (--db names a DuckDB file)")
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError as exc:
        raise StoreError(f"cannot open store {path}: {exc.strerror}") from None
    if not head:
        raise StoreError(f"cannot open store {path}: it is an empty file, not a store; anonflow does not write over "
                         "a file it did not create: remove it or choose another --db")
    if head[8:12] != b"DUCK":
        raise StoreError(f"cannot open store {path}: it is not a DuckDB file (no DuckDB header); --db names "
                         "anonflow's store, not a data file")


def open_failure(path: Path, exc: Exception) -> str:
    """One line saying why a store file cannot be opened."""
    msg = _duck_message(exc)
    if not path.parent.is_dir():
        return (f"cannot open store {path}: its folder {path.parent} does not exist; create it, or give --db a "
                "path in an existing folder")
    if "Could not set lock" in msg or "Conflicting lock" in msg:
        m = re.search(r"PID (\d+)", msg)
        who = f"process {m.group(1)}" if m else "another process"
        return (f"cannot open store {path}: {who} holds it (a run in progress, most likely; DuckDB lets one process "
                "write a store and no other read it meanwhile): wait for it to finish, or use another --db")
    return damaged(path, exc)


def damaged(path: Path, exc: Exception) -> str:
    """One line for a DuckDB error on the store: damage (I/O, corruption, internal errors)
    says what to do; anything else (a value DuckDB cannot hold, say) is reported as it is."""
    msg = _duck_message(exc)
    if isinstance(exc, (duckdb.IOException, duckdb.InternalException, duckdb.SerializationException,
                        duckdb.FatalException)) or "Corrupt" in msg or "not a valid DuckDB" in msg:
        return f"cannot read store {path}: {msg}; {_DAMAGE_HINT}"
    return f"the store {path} refused a value: {msg}"


#: what a purge leaves of a purged run's free text (error messages, plugin notes), which can
#: quote original values
REDACTED = "[removed by purge: this text could quote original values]"

#: the run id that names the newest run (``anonflow report latest``, ``runs latest``, ``--run latest``)
LATEST = "latest"


_OPENING: dict[str, threading.Lock] = {}
_OPENING_LOCK = threading.Lock()


@contextlib.contextmanager
def _opening(path: Path) -> Iterator[None]:
    """One thread of this process at a time creates, migrates and tidies a store file: DuckDB
    shares one database between the connections a process opens to it, and two threads
    creating the same new store's tables at once failed with "Catalog write-write conflict"."""
    key = os.path.realpath(path)
    with _OPENING_LOCK:
        lock = _OPENING.setdefault(key, threading.Lock())
    with lock:
        yield


_RUNNING: dict[str, threading.RLock] = {}


class Store:
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
        with _OPENING_LOCK:
            lock = _RUNNING.setdefault(key, threading.RLock())
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
            _check_store_file(self.path)
            loose = open_to_others(self.path)
        # the store holds the original records: while it is open for writing, every file
        # created (the store, its write-ahead log, spill files) is owner-only (anonflow.filemodes)
        self._private = not read_only and not self.in_memory
        if self._private:
            enter_private()
        # DuckDB spills to a work folder of anonflow's own: created fresh, owner-only, removed on close
        self._spill = tempfile.mkdtemp(prefix="anonflow-spill-")
        try:
            self.con = _connect(str(self.path), read_only=read_only)
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
                with _opening(self.path):  # two threads opening one new store: one creates it
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
                spill = tempfile.mkdtemp(prefix="anonflow-spill-", dir=parent)
            except OSError as exc:
                raise StoreError(f"cannot use {parent} as the temp directory: {exc.strerror or exc}") from None
            self.con.execute(f"SET temp_directory = '{_sql_text(spill)}'")
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = spill
        if resources.memory is not None:
            try:
                self.con.execute(f"SET memory_limit = '{_sql_text(resources.memory)}'")
            except duckdb.Error as exc:
                raise StoreError(f"resources.memory {resources.memory!r}: {_duck_message(exc)}") from None
        if resources.threads is not None:
            self.con.execute(f"SET threads = {int(resources.threads)}")
            self.threads = int(resources.threads)
        self.memory_limit = str(self._one("SELECT current_setting('memory_limit')")[0])

    def spill_journaled(self, journal: Any) -> None:
        """Move DuckDB's spill folder to a new one recorded in a run's ``journal`` before it is
        made (spilled records are original records: a killed run's are removed later)."""
        from .cleanup import private_folder

        spill = str(private_folder(Path(self._spill).parent, "anonflow-spill-", journal, "spill"))
        try:
            self.con.execute(f"SET temp_directory = '{_sql_text(spill)}'")
        except duckdb.Error:  # DuckDB holds spilled data there still: keep it
            shutil.rmtree(spill, ignore_errors=True)
            if journal is not None:
                journal.removed(spill)
            return
        old, self._spill = self._spill, spill
        shutil.rmtree(old, ignore_errors=True)
        self._spill_journal = journal

    def _clean_journals(self) -> None:
        """Clean up after runs that were killed (:func:`anonflow.cleanup.recover`), from the
        journals this store recorded; what was cleaned is kept in ``af_journal.cleaned``
        (``anonflow runs`` shows it)."""
        from .cleanup import recover

        active = sorted(ACTIVE_RUNS) or [""]
        rows = self.con.execute("SELECT run_id, journal FROM af_journal WHERE cleaned IS NULL AND run_id NOT IN "
                                f"({', '.join('?' * len(active))})", active).fetchall()
        for run_id, journal in rows:
            if not os.path.lexists(journal):
                done = [f"its journal {journal} was gone: a later run publishing into that folder cleaned up after it "
                        "(or it was removed by hand)"]
            else:
                got = recover(journal)
                if got is None:
                    continue  # its run is alive (another thread of this process, or its lock is held)
                done = got
            self.journal_cleaned(run_id, done)

    def record_journal(self, run_id: str, journal: str) -> None:
        """Where the run's journal lies (:mod:`anonflow.cleanup`)."""
        self.con.execute("INSERT INTO af_journal VALUES (?, ?, NULL)", [run_id, journal])

    def journal_cleaned(self, run_id: str, done: list[str]) -> None:
        """The run's leftovers were cleaned (``done``: one line each; empty if there were none)."""
        self.con.execute("UPDATE af_journal SET cleaned = ? WHERE run_id = ?", [_json(done), run_id])

    def _mark_interrupted(self) -> None:
        """Runs left ``running`` by a process that died (killed, power cut) become
        ``interrupted``: this connection holds DuckDB's write lock, so no other process is
        running them, and runs of this process are in :data:`ACTIVE_RUNS`."""
        active = sorted(ACTIVE_RUNS) or [""]
        self.con.execute("UPDATE af_runs SET status = 'interrupted', error = coalesce(error, ?) "
                         f"WHERE status = 'running' AND run_id NOT IN ({', '.join('?' * len(active))})",
                         ["its process ended before the run finished (killed or crashed); "
                          "its steps up to then are recorded", *active])

    # -- schema -------------------------------------------------------------------------

    def _applied(self) -> int:
        exists = self._one(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'af_migrations'")[0]
        if not exists:
            return 0
        return int(self._one("SELECT coalesce(max(version), 0) FROM af_migrations")[0])

    def _check_schema(self) -> None:
        applied = self._applied()
        if applied == 0:
            raise StoreError(f"{self.path} is not an anonflow store")
        if applied > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer anonflow (schema {applied} > {SCHEMA_VERSION})")

    def _migrate(self) -> None:
        self.con.execute("CREATE TABLE IF NOT EXISTS af_migrations (version INTEGER PRIMARY KEY, "
                         "name VARCHAR, applied_at TIMESTAMPTZ)")
        applied = self._applied()
        if applied > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer anonflow (schema {applied} > {SCHEMA_VERSION})")
        for version, (name, sql) in enumerate(MIGRATIONS, start=1):
            if version <= applied:
                continue
            self.con.execute("BEGIN TRANSACTION")
            try:
                self.con.execute(sql)
                self.con.execute("INSERT INTO af_migrations VALUES (?, ?, ?)", [version, name, _now()])
                self.con.execute("COMMIT")
            except Exception:
                self.con.execute("ROLLBACK")
                raise

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

    # -- SQL for plugins -----------------------------------------------------------------

    def sql(self, query: str, params: list[Any] | None = None, **tables: Any) -> pa.Table:
        """Run ``query`` with each keyword's table visible under that name: an Arrow table is
        registered, a stored :class:`TypedTable` is read where it lies (a temporary view).

        Plugin queries run on one thread: DuckDB's parallel aggregation adds floating-point
        values in an order that varies from run to run, so a ``sum`` or ``avg`` of doubles could
        differ in its last bit and break the promise of identical results (and ``anonflow
        verify --rerun``)."""
        self.con.execute("SET threads = 1")
        try:
            with self._visible(tables):
                return _arrow(self.con.sql(query, params=params) if params else self.con.sql(query))
        finally:
            self.con.execute(f"SET threads = {self.threads}")

    @contextlib.contextmanager
    def _visible(self, tables: Mapping[str, Any]) -> Iterator[None]:
        """Make each table visible to queries under its key: an Arrow table (or a loaded
        :class:`TypedTable`) registered, a stored one as a temporary view of it."""
        registered, views = [], []
        try:
            for name, table in tables.items():
                if isinstance(table, TypedTable) and not table.loaded:
                    self.con.execute(f"CREATE OR REPLACE TEMP VIEW {ident(name)} AS "
                                     f"SELECT * FROM {ident(table.stored.name)}")
                    views.append(name)
                    continue
                self.con.register(name, table.data if isinstance(table, TypedTable) else table)
                registered.append(name)
            yield
        finally:
            for name in registered:
                self.con.unregister(name)
            for name in views:
                self.con.execute(f"DROP VIEW IF EXISTS temp.{ident(name)}")

    @staticmethod
    def _with(tables: Mapping[str, TypedTable]) -> str:
        """A ``WITH`` clause naming stored tables by their keys (for a view, which may not
        read temporary objects)."""
        if not tables:
            return ""
        return "WITH " + ", ".join(f"{ident(k)} AS (SELECT * FROM {ident(t.stored.name)})" for k, t in tables.items())

    # -- data tables ---------------------------------------------------------------------
    #
    # Every data table is written in ``_row`` order and read back in insertion order (DuckDB
    # keeps it: ``preserve_insertion_order``), so reading never sorts. A step's output is
    # first written to a scratch table, hashed while read once in batches, then renamed to
    # its content address (or dropped, if that table exists already).

    def _scratch_name(self) -> str:
        return f"{SCRATCH}{secrets.token_hex(8)}"

    def _drop_scratch(self) -> None:
        """Scratch tables left by a process that died (this connection holds the write lock)."""
        leftovers = self.con.execute(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_catalog = current_database() AND starts_with(table_name, ?)", [SCRATCH]).fetchall()
        for name, kind in sorted(leftovers, key=lambda r: r[1] != "VIEW"):  # views first: they read the tables
            self.con.execute(f"DROP {'VIEW' if kind == 'VIEW' else 'TABLE'} IF EXISTS {ident(name)}")

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

    def _column_names(self, name: str) -> list[str]:
        return [r[0] for r in self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND table_schema = 'main' "
            "ORDER BY ordinal_position", [name]).fetchall()]

    def _fetch(self, name: str, columns: Any = None) -> pa.Table:
        sel = "*" if columns is None else ", ".join(ident(c) for c in columns)
        return _arrow(self.con.sql(f"SELECT {sel} FROM {ident(name)}"))

    def stored(self, name: str, *, rows: int | None = None, data_hash: str | None = None) -> Stored:
        """A handle on a data table (read lazily by :class:`TypedTable`)."""
        if rows is None:
            rows = int(self._one(f"SELECT count(*) FROM {ident(name)}")[0])
        schema = self.con.sql(f"SELECT * FROM {ident(name)} LIMIT 0").to_arrow_table().schema
        return Stored(name, tuple(schema.names), rows, fetch=lambda columns=None: self._fetch(name, columns),
                      data_hash=data_hash, schema=schema)

    def derive(self, query: str, params: list[Any] | None = None, *, ordered: bool = True, view: bool = False,
               **tables: Any) -> Stored:
        """Write the records of ``query`` to a scratch table and return a handle on it.

        The query must yield ``_row`` (if the records have one) and, with ``ordered``, yield
        the records in ``_row`` order (a projection, filter or ``POSITIONAL JOIN`` of stored
        tables keeps it); otherwise they are sorted. Keyword tables are visible as in
        :meth:`sql` (Arrow tables registered, stored tables as views). The scratch table
        becomes an artifact through :meth:`put`.

        With ``view`` nothing is written: the scratch is a view over the (stored) keyword tables,
        for a query that only selects, renames or computes columns of stored records."""
        name = self._scratch_name()
        if view:
            if params or any(not isinstance(t, TypedTable) or t.loaded for t in tables.values()):
                raise ValueError("derive(view=True) takes stored tables and no parameters")
            self.con.execute(f"CREATE VIEW {ident(name)} AS {self._with(tables)} {query}")
            return self.stored(name)  # counted: the query may filter
        body = query if ordered else f"SELECT * FROM ({query}) ORDER BY {ident(ROW)}"
        try:
            with self._visible(tables):
                self.con.execute(f"CREATE TABLE {ident(name)} AS {body}", params or [])
        except BaseException:
            self.con.execute(f"DROP TABLE IF EXISTS {ident(name)}")
            raise
        return self.stored(name)

    def derive_table(self, query: str, params: list[Any] | None = None, *, ordered: bool = True,
                     view: bool = False, **tables: Any) -> TypedTable:
        """:meth:`derive` as an untyped, stored :class:`TypedTable` (``StepContext.derive``)."""
        return TypedTable(None, stored=self.derive(query, params, ordered=ordered, view=view, **tables))

    def relation(self, query: str, *, rows: int | None = None, **tables: TypedTable) -> TypedTable:
        """``query`` over stored tables as a stored (untyped) table that is not written: a
        temporary view, read when asked (each read runs the query), gone when the store
        closes. Keyword tables must be stored; the query sees them under those names.
        ``rows``: the number of records, when the caller knows it (else counted)."""
        for key, table in tables.items():
            if table.loaded or table.stored is None:
                raise ValueError(f"relation: table {key!r} is not in the store")
        name = f"af_view_{secrets.token_hex(8)}"
        self.con.execute(f"CREATE TEMP VIEW {ident(name)} AS {self._with(tables)} {query}")
        if rows is None:
            rows = int(self._one(f"SELECT count(*) FROM {ident(name)}")[0])
        return TypedTable(None, stored=self.stored(name, rows=rows))

    def copy_to(self, table: TypedTable, path: Path, *, format: str, options: dict[str, Any] | None = None,
                columns: dict[str, str] | None = None) -> None:
        """Write a stored table (in its order) to ``path`` with DuckDB's ``COPY``: ``format``
        ``csv`` or ``parquet``, ``options`` COPY options (values passed as literals by
        :func:`_copy_option`), ``columns`` output name -> SQL expression over the table's
        columns (default: every column as it is)."""
        if table.loaded or table.stored is None:
            raise ValueError("copy_to: the table is not in the store")
        exprs = columns or {c: ident(c) for c in table.columns}
        select = ", ".join(f"{e} AS {ident(n)}" for n, e in exprs.items())
        opts = [f"FORMAT {format}"] + [f"{k} {_copy_option(v)}" for k, v in (options or {}).items()]
        self.con.execute(f"COPY (SELECT {select} FROM {ident(table.stored.name)}) TO '{_sql_text(str(path))}' "
                         f"({', '.join(opts)})")

    def copy_fragments(self, table: TypedTable, folder: Path, *, by: TypedTable | None = None) -> None:
        """Write a table's records as Parquet files under ``folder``, one sub-folder
        ``_af_part=F`` per fragment F: the fragment of each record is the table's own
        ``_fragment`` column (left out of the files), or that of the record with the same
        ``_row`` in ``by``. One pass over the table (DuckDB's partitioned ``COPY``)."""
        frag = ident(FRAGMENT)
        cols = ", ".join(f"x.{ident(c)}" for c in table.columns if c != FRAGMENT)
        if by is None:
            query = f"SELECT {cols}, x.{frag} AS _af_part FROM x"
            tables: dict[str, Any] = {"x": table}
        else:
            query = (f"SELECT {cols}, f.{frag} AS _af_part FROM x JOIN (SELECT {ident(ROW)}, {frag} FROM b) f "
                     f"ON x.{ident(ROW)} = f.{ident(ROW)}")
            tables = {"x": table, "b": by}
        with self._visible(tables):
            self.con.execute(f"COPY ({query}) TO '{_sql_text(str(folder))}' (FORMAT parquet, "
                             "PARTITION_BY (_af_part), COMPRESSION zstd)")

    def read_results(self, query: str, files: list[str], **tables: Any) -> TypedTable:
        """:meth:`derive_table` of ``query``, which reads the Parquet ``files`` (results of
        workers) as ``r`` (with their path as ``r.filename``); records sorted by ``_row``."""
        listed = ", ".join(f"'{_sql_text(duckdb_file(f))}'" for f in files)
        body = f"WITH r AS (SELECT * FROM read_parquet([{listed}], union_by_name = true, filename = true)) {query}"
        return self.derive_table(body, ordered=False, **tables)

    def same_rows(self, a: TypedTable, b: TypedTable) -> bool:
        """Whether two tables hold the same ``_row`` ids (as multisets)."""
        if a.num_rows != b.num_rows:
            return False
        if a.loaded and b.loaded:
            return bool(np.array_equal(np.sort(a.rows()), np.sort(b.rows())))
        r = ident(ROW)
        # stored tables are in _row order: the same ids position by position is one linear scan
        # (a table in another order falls through to the multiset comparison)
        odd = self.sql(f"SELECT count(*) FROM a POSITIONAL JOIN b WHERE a.{r} IS DISTINCT FROM b.{r}", a=a, b=b)
        if odd.column(0)[0].as_py() == 0:
            return True
        extra = self.sql(f"SELECT count(*) AS n FROM (SELECT {r} FROM a EXCEPT ALL SELECT {r} FROM b)", a=a, b=b)
        return extra.column(0)[0].as_py() == 0

    def discard(self, table: TypedTable) -> None:
        """Drop a scratch table that will not become an artifact."""
        if table.stored is not None and table.stored.name.startswith(SCRATCH):
            self._drop(table.stored.name)

    def _is_view(self, name: str) -> bool:
        return self._one("SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND NOT temporary", [name])[0] > 0

    def _drop(self, name: str) -> None:
        kind = "VIEW" if self._is_view(name) else "TABLE"
        self.con.execute(f"DROP {kind} IF EXISTS {ident(name)}")

    def _hash_stored(self, name: str, query: str | None = None) -> str:
        hasher = TableHasher()
        rel = self.con.sql(query or f"SELECT * FROM {ident(name)}")
        schema = None
        for batch in rel.to_arrow_reader(HASH_BATCH):
            schema = batch.schema
            hasher.update(batch)
        return hasher.hexdigest(schema or rel.to_arrow_table().schema)

    def put(self, table: TypedTable | pa.Table | Stored, *, run_id: str | None = None,
            step: str | None = None) -> Artifact:
        """Store a table (content-addressed by its data, typing and claims) and return its record.

        A table already in the store is not copied: the same records with another typing,
        claims or hierarchies become a view of them; a scratch table (:meth:`derive`) is hashed
        and renamed into place."""
        typed = table if isinstance(table, TypedTable) else None
        scratch = None
        if isinstance(table, Stored) or (typed is not None and not typed.loaded):
            st = table if isinstance(table, Stored) else typed.stored
            data_name, rows = st.name, st.rows
            if st.data_hash is not None:
                data_hash = st.data_hash
            else:
                data_hash, scratch = self._hash_stored(st.name), st.name
        else:
            data = canonical(typed.data if typed else table)
            data_hash, rows = table_hash(data), data.num_rows
            data_name = scratch = self._scratch_name()
            self.con.register("_af_incoming", data)
            try:
                self.con.execute(f"CREATE TABLE {ident(scratch)} AS SELECT * FROM _af_incoming")
            finally:
                self.con.unregister("_af_incoming")
        typing_json = typed.typing.dumps() if typed else None
        claims_json = _json(typed.claims) if typed else None
        hierarchies = {c: self.put(h.table, run_id=run_id, step=step) for c, h in
                       sorted(typed.hierarchies.items())} if typed else {}
        hier_json = _json({c: {"table": a.table, "builder": typed.hierarchies[c].builder}
                           for c, a in hierarchies.items()}) if hierarchies else None
        digest = data_hash if typed is None else hashlib.sha256(
            f"{data_hash}\0{typing_json}\0{claims_json}\0{hier_json}".encode()).hexdigest()
        name = f"t_{digest[:24]}"
        if self._held(name):  # (its hierarchies, if purged, were just stored again above)
            if scratch:
                self._drop(scratch)
            return Artifact(name, digest, rows)
        scratch_is_view = bool(scratch) and self._is_view(scratch)
        self.con.execute("BEGIN TRANSACTION")
        try:
            if scratch:
                kind = "VIEW" if scratch_is_view else "TABLE"
                self.con.execute(f"ALTER {kind} {ident(scratch)} RENAME TO {ident(name)}")
            else:  # the records are another artifact's: share them
                self.con.execute(f"CREATE VIEW {ident(name)} AS SELECT * FROM {ident(data_name)}")
            self.con.execute("INSERT INTO af_tables (name, hash, data_hash, rows, typing, claims, created_run, "
                             "created_step, created_at, hierarchies) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                             + _HELD_AGAIN, [name, digest, data_hash, rows, typing_json, claims_json, run_id, step,
                                             _now(), hier_json])
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            if scratch:
                self._drop(scratch)
            raise
        return Artifact(name, digest, rows)

    def get(self, name: str) -> TypedTable:
        """A stored table, not loaded: its columns are read when asked for."""
        row = self._one("SELECT typing, claims, hierarchies, data_hash, rows FROM af_tables WHERE name = ?", [name])
        if row is None:
            raise StoreError(f"table {name} is not in the store {self.path}")
        self._check_held(name)
        typing = Typing.from_json(json.loads(row[0])) if row[0] else Typing()
        claims = json.loads(row[1]) if row[1] else {}
        hierarchies = {}
        for column, ref in (json.loads(row[2]) if row[2] else {}).items():
            hierarchies[column] = Hierarchy(column, self.data(ref["table"]), ref.get("builder", ""))
        return TypedTable(None, typing, claims, hierarchies,
                          stored=self.stored(name, rows=int(row[4]), data_hash=row[3]))

    def data(self, name: str) -> pa.Table:
        """A stored table's data in canonical order (the order it was written in)."""
        self._check_held(name)
        return self._fetch(name)

    def artifact(self, name: str) -> Artifact | None:
        """A data table's record, None if there is none, or if its records or those of one of
        its hierarchies were purged (a purge keeps a published table's records, not its
        hierarchies: such a table is computed again, hierarchies and all, when a run needs it)."""
        row = self._one("SELECT name, hash, rows, hierarchies FROM af_tables WHERE name = ? AND purged_at IS NULL",
                        [name])
        if row is None:
            return None
        refs = [r["table"] for r in json.loads(row[3]).values()] if row[3] else []
        if refs and self._one("SELECT count(*) FROM af_tables WHERE name IN (SELECT unnest(?::VARCHAR[])) "
                              "AND purged_at IS NULL", [refs])[0] < len(set(refs)):
            return None
        return Artifact(*row[:3])

    def _held(self, name: str) -> bool:
        """Whether the store holds this table's records (whatever its hierarchies)."""
        return self._one("SELECT count(*) FROM af_tables WHERE name = ? AND purged_at IS NULL", [name])[0] > 0

    def _check_held(self, name: str) -> None:
        row = self._one("SELECT purged_at FROM af_tables WHERE name = ? AND purged_at IS NOT NULL", [name])
        if row is not None:
            raise PurgedError(f"the records of table {name} were purged from the store {self.path} on "
                             f"{row[0]:%Y-%m-%d %H:%M:%S %Z} (anonflow purge, or the workflow's retain:); its lineage "
                             "and hashes are kept: run the workflow again to compute it anew")

    def load_source(self, src: SourceSpec, *, run_id: str, file_hash: str) -> Artifact:
        """Read a source straight into the store (DuckDB reads the file; no record passes
        through Python) and store it, its records numbered ``_row`` in file order.

        The records are written once, as DuckDB read them (``af_raw_<hash>``); the source's
        artifact is a view adding ``_row`` as each record's ``rowid`` (its position in
        insertion order, which DuckDB keeps from the file; stored tables are never changed)."""
        where = f"source {src.name!r}"
        raw = self._scratch_name()
        try:
            casts = self._read_into(src, raw)
            columns = self._column_names(raw)
            _check_reserved(columns, src)
            n = int(self._one(f"SELECT count(*) FROM {ident(raw)}")[0])
            if n == 0:
                raise InputError(_no_records(src), where=where)
            replace = ", ".join(f"CAST({ident(c)} AS {t}) AS {ident(c)}" for c, t in casts.items())
            numbered = f"SELECT rowid::BIGINT AS {ident(ROW)}, *{f' REPLACE ({replace})' if casts else ''} FROM "
            data_hash = self._hash_stored(raw, numbered + ident(raw))
            name = f"t_{data_hash[:24]}"
            if self.artifact(name) is not None:
                return Artifact(name, data_hash, n)
            kept = f"af_raw_{data_hash[:24]}"
            self.con.execute("BEGIN TRANSACTION")
            try:
                self.con.execute(f"DROP TABLE IF EXISTS {ident(kept)}")
                self.con.execute(f"ALTER TABLE {ident(raw)} RENAME TO {ident(kept)}")
                self.con.execute(f"CREATE VIEW {ident(name)} AS {numbered}{ident(kept)}")
                self.con.execute("INSERT INTO af_tables (name, hash, data_hash, rows, typing, claims, created_run, "
                                 "created_step, created_at, hierarchies) VALUES (?, ?, ?, ?, NULL, NULL, ?, ?, ?, NULL) "
                                 + _HELD_AGAIN, [name, data_hash, data_hash, n, run_id, src.name, _now()])
                self.con.execute("COMMIT")
            except Exception:
                self.con.execute("ROLLBACK")
                raise
            return Artifact(name, data_hash, n)
        finally:
            self.con.execute(f"DROP TABLE IF EXISTS {ident(raw)}")

    def _read_into(self, src: SourceSpec, name: str) -> dict[str, str]:
        """``CREATE TABLE name`` from a source file, errors naming the source; returns the
        columns the source's view must cast (name -> SQL type).

        CSV column types are sniffed by DuckDB on a sample, which alone would be unsafe: a
        later value that does not fit can be changed silently (DuckDB reads ``12.5`` in a column
        sniffed as integers as 13). So a column sniffed as integers is read as DOUBLE (exact for
        integers below 2^53, and any decimal is read as written) and cast back to BIGINT in the
        view only if every value is a whole number below 2^53; a later value that fits no sniffed
        type fails the read, which is then redone with types sniffed on the whole file."""
        where = f"source {src.name!r}"
        if src.in_memory:
            # an Arrow table in this process: registered (DuckDB reads its buffers in place) and
            # written into the store once, in its order
            self.con.register("_af_incoming", src.data)
            try:
                self.con.execute(f"CREATE TABLE {ident(name)} AS SELECT * FROM _af_incoming")
            except duckdb.Error as exc:
                if isinstance(exc, duckdb.OutOfMemoryException):
                    raise
                raise InputError(f"DuckDB cannot read the in-memory table: {_duck_message(exc)}", where=where) from None
            finally:
                self.con.unregister("_af_incoming")
            return {}
        if src.format == "duckdb":
            # another DuckDB file: read through a sandboxed connection (a view in it must not read
            # other files), streamed into the store batch by batch (bounded memory, file order)
            con = _open_duckdb_source(src)
            try:
                try:
                    reader = con.sql(f"SELECT * FROM {ident(src.table or '')}").to_arrow_reader(HASH_BATCH)
                except duckdb.Error as exc:
                    raise InputError(f"cannot read table {src.table!r}: {_duck_message(exc)}", where=where) from None
                self.con.register("_af_incoming", reader)
                try:
                    self.con.execute(f"CREATE TABLE {ident(name)} AS SELECT * FROM _af_incoming")
                except duckdb.Error as exc:
                    if isinstance(exc, duckdb.OutOfMemoryException):
                        raise
                    raise InputError(f"cannot read table {src.table!r}: {_duck_message(exc)}",
                                     where=where) from None
                finally:
                    self.con.unregister("_af_incoming")
            finally:
                con.close()
            return {}
        if src.format == "postgres":  # a server's table or query, streamed as Arrow batches (anonflow.postgres)
            from .postgres import SourceReader

            try:
                with SourceReader(src) as pg:
                    self.con.register("_af_incoming", pg.reader())
                    try:
                        self.con.execute(f"CREATE TABLE {ident(name)} AS SELECT * FROM _af_incoming")
                    finally:
                        self.con.unregister("_af_incoming")
            except InputError as exc:
                raise InputError(exc.message, where=where) from None
            except duckdb.Error as exc:
                if isinstance(exc, duckdb.OutOfMemoryException):
                    raise
                raise InputError(f"cannot read {src.describe()}: {_duck_message(exc)}", where=where) from None
            return {}
        _check_source_file(src)
        casts: dict[str, str] = {}
        try:
            if src.format == "csv":
                casts = self._read_csv_sampled(src, name)
            if not casts and not self._exists(name):
                sql, params = _read_expr(src, whole=True)
                self.con.execute(f"CREATE TABLE {ident(name)} AS {sql}", params)
            _check_header(self.con, src, self._column_names(name))
        except duckdb.Error as exc:
            if isinstance(exc, (duckdb.OutOfMemoryException,)):
                raise
            raise InputError(f"cannot read {src.path}: {_duck_message(exc)}", where=where) from None
        return casts

    def _exists(self, name: str) -> bool:
        return self._one("SELECT count(*) FROM information_schema.tables WHERE table_name = ? "
                         "AND table_catalog = current_database()", [name])[0] > 0

    def _read_csv_sampled(self, src: SourceSpec, name: str) -> dict[str, str]:
        """The fast CSV read of :meth:`_read_into` (types sniffed on DuckDB's sample, integer
        columns read as DOUBLE): the casts the view needs. Leaves no table where the whole file
        must be sniffed instead: a value past the sample fits no sniffed type, or an integer
        column holds whole numbers of 2^53 or more (a column holding a fraction stays DOUBLE, as the
        whole-file sniff would type it)."""
        sql, params = _read_expr(src, whole=False)
        sniffed = self.con.execute(f"DESCRIBE {sql}", params).fetchall()
        given = set(map(str, (src.options.get("types") or {})))
        wide = {c: "DOUBLE" for c, t, *_ in sniffed if t in _INTEGER_TYPES and c not in given}
        sql, params = _read_expr(src, whole=False, types=wide)
        try:
            self.con.execute(f"CREATE TABLE {ident(name)} AS {sql}", params)
        except (duckdb.ConversionException, duckdb.InvalidInputException):
            self.con.execute(f"DROP TABLE IF EXISTS {ident(name)}")
            return {}
        if not wide:
            return {}
        checks = ", ".join(f"bool_and({ident(c)} IS NULL OR {ident(c)} = trunc({ident(c)})), "
                           f"coalesce(max(abs({ident(c)})), 0) < 9007199254740992" for c in wide)
        got = self._one(f"SELECT {checks} FROM {ident(name)}")
        casts = {}
        for i, c in enumerate(wide):
            whole_numbers, exact = got[2 * i] is not False, bool(got[2 * i + 1])
            if whole_numbers and not exact:   # integers a DOUBLE cannot hold: sniff the whole file
                self.con.execute(f"DROP TABLE IF EXISTS {ident(name)}")
                return {}
            if whole_numbers:
                casts[c] = "BIGINT"
        return casts


    def view(self, name: str, table: str) -> None:
        """Point the convenience view ``steps."<workflow>.<step>"`` at a step's latest output."""
        self.con.execute("CREATE SCHEMA IF NOT EXISTS steps")
        self.con.execute(f"CREATE OR REPLACE VIEW steps.{ident(name)} AS SELECT * FROM {ident(table)}")

    # -- runs ----------------------------------------------------------------------------

    def begin_run(self, *, workflow: str, path: str, text: str, text_hash: str, seed: int,
                  overrides: list, versions: dict) -> str:
        run_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)
        ACTIVE_RUNS.add(run_id)
        self.con.execute("INSERT INTO af_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', NULL, ?, NULL)",
                         [run_id, workflow, path, text, text_hash, seed, _json(overrides), _json(versions), _now()])
        return run_id

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> None:
        ACTIVE_RUNS.discard(run_id)
        self.con.execute("UPDATE af_runs SET status = ?, error = ?, finished_at = ? WHERE run_id = ?",
                         [status, error, _now(), run_id])

    def record_step(self, run_id: str, rec: dict[str, Any], *, metrics: dict[str, float] | None = None,
                    outputs: Iterable[dict[str, Any]] = (), lineage: Iterable[tuple[str, str]] = ()) -> None:
        """Record one step run with its metric values, output files and lineage edges, atomically."""
        cols = ["position", "kind", "uses", "plugin_version", "params", "seed", "fingerprint", "inputs",
                "output_table", "output_hash", "rows", "seconds", "status", "cached_from", "summary", "error", "plugins"]
        values = [rec.get(c) for c in cols]
        for i, c in enumerate(cols):
            if c in ("params", "inputs", "summary", "plugins") and values[i] is not None:
                values[i] = _json(values[i])
        self.con.execute("BEGIN TRANSACTION")
        try:
            self.con.execute(f"INSERT INTO af_step_runs (run_id, step, {', '.join(cols)}) "
                             f"VALUES (?, ?, {', '.join('?' * len(cols))})", [run_id, rec["step"], *values])
            for name, value in (metrics or {}).items():
                self.con.execute("INSERT INTO af_metrics VALUES (?, ?, ?, ?)", [run_id, rec["step"], name, value])
            for out in outputs:
                self.con.execute("INSERT INTO af_outputs VALUES (?, ?, ?, ?, ?)",
                                 [run_id, rec["step"], out["path"], out["sha256"], out["rows"]])
            for parent, child in lineage:
                self.con.execute("INSERT INTO af_lineage VALUES (?, ?, ?, ?)", [run_id, parent, child, rec["step"]])
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    def cached_step(self, fingerprint: str) -> dict[str, Any] | None:
        """The latest successful step run with this fingerprint whose output still exists."""
        rows = self._dicts(
            "SELECT s.* FROM af_step_runs s JOIN af_runs r USING (run_id) "
            "WHERE s.fingerprint = ? AND s.status IN ('succeeded', 'cached') "
            "ORDER BY r.started_at DESC LIMIT 1", [fingerprint])
        if not rows:
            return None
        rec = rows[0]
        if rec["output_table"] and self.artifact(rec["output_table"]) is None:
            return None
        rec["metrics"] = dict(self.con.execute(
            "SELECT metric, value FROM af_metrics WHERE run_id = ? AND step = ? ORDER BY metric",
            [rec["run_id"], rec["step"]]).fetchall())
        return rec

    # -- queries for the CLI -------------------------------------------------------------

    def _dicts(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            rec = dict(zip(names, row))
            for key in ("params", "inputs", "summary", "overrides", "versions", "typing", "claims", "plugins", "cleaned"):
                if isinstance(rec.get(key), str):
                    rec[key] = json.loads(rec[key])
            out.append(rec)
        return out

    def _status(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # read-only: no process holds the write lock, so a run still marked running has died
        if self.read_only:
            for r in rows:
                if r.get("status") == "running" and r.get("run_id") not in ACTIVE_RUNS:
                    r["status"] = "interrupted"
                    r["error"] = r.get("error") or "its process ended before the run finished"
        return rows

    def _cleaned(self) -> str:
        """A column ``cleaned``: what was cleaned up after the run (a list of lines; empty when
        nothing was left, NULL when not known yet), for :meth:`runs` and :meth:`run`."""
        if self._applied() < _JOURNALS:  # a store of an older anonflow, opened read-only
            return "NULL::JSON AS cleaned"
        return "(SELECT j.cleaned FROM af_journal j WHERE j.run_id = af_runs.run_id) AS cleaned"

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        return self._status(self._dicts(
            "SELECT run_id, workflow, workflow_path, seed, overrides, status, error, started_at, finished_at, "
            f"{self._cleaned()} FROM af_runs ORDER BY started_at DESC, run_id DESC LIMIT ?", [limit]))

    def run(self, run_id: str) -> dict[str, Any]:
        """The run ``run_id``: its full id, an unambiguous prefix of one, or ``latest`` (the
        newest run: every command that takes a run id reads it so)."""
        if run_id == LATEST:
            newest = self._one("SELECT run_id FROM af_runs ORDER BY started_at DESC, run_id DESC LIMIT 1")
            if newest is None:
                raise StoreError(f"no run recorded in {self.path}, so no latest one")
            run_id = newest[0]
        rows = self._status(self._dicts(f"SELECT *, {self._cleaned()} FROM af_runs WHERE run_id = ? OR "
                                        "(? <> '' AND starts_with(run_id, ?)) "
                                        "ORDER BY started_at DESC", [run_id, run_id, run_id]))
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        if len(rows) > 1 and rows[0]["run_id"] != run_id:
            raise StoreError(f"run id prefix {run_id!r} is ambiguous: {', '.join(r['run_id'] for r in rows[:5])}")
        return rows[0]

    def steps(self, run_id: str) -> list[dict[str, Any]]:
        return self._dicts("SELECT * FROM af_step_runs WHERE run_id = ? ORDER BY position", [run_id])

    def metrics(self, run_id: str) -> dict[str, float]:
        rows = self.con.execute("SELECT m.step, m.metric, m.value FROM af_metrics m JOIN af_step_runs s "
                                "USING (run_id, step) WHERE run_id = ? ORDER BY s.position, m.metric",
                                [run_id]).fetchall()
        return {f"{step}.{metric}": value for step, metric, value in rows}

    def outputs(self, run_id: str) -> list[dict[str, Any]]:
        return self._dicts("SELECT o.step, o.path, o.sha256, o.rows FROM af_outputs o JOIN af_step_runs s "
                           "USING (run_id, step) WHERE run_id = ? ORDER BY s.position, o.path", [run_id])

    def find_producer(self, target: str) -> dict[str, Any] | None:
        """The latest step run that produced ``target``: a table name, a file path or a step name."""
        for sql in (
            "SELECT s.* FROM af_step_runs s JOIN af_runs r USING (run_id) WHERE s.output_table = ? "
            "ORDER BY r.started_at DESC LIMIT 1",
            "SELECT s.* FROM af_outputs o JOIN af_step_runs s USING (run_id, step) JOIN af_runs r USING (run_id) "
            "WHERE o.path = ? ORDER BY r.started_at DESC LIMIT 1",
        ):
            rows = self._dicts(sql, [target])
            if rows:
                return rows[0]
        return None

    def step_in_run(self, run_id: str, step: str) -> dict[str, Any] | None:
        rows = self._dicts("SELECT * FROM af_step_runs WHERE run_id = ? AND step = ?", [run_id, step])
        return rows[0] if rows else None

    def columns(self, name: str) -> list[tuple[str, str]]:
        """Column names and DuckDB types of a stored table, in order."""
        return [(r[0], r[1]) for r in self.con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
            "ORDER BY ordinal_position", [name]).fetchall()]

    def earlier_runs(self, run_id: str) -> list[dict[str, Any]]:
        """Successful runs of the same workflow (same name and file content) that started
        before ``run_id``, oldest first."""
        return self._dicts(
            "SELECT o.run_id, o.seed, o.overrides FROM af_runs o JOIN af_runs r "
            "ON o.workflow = r.workflow AND o.workflow_hash = r.workflow_hash "
            "WHERE r.run_id = ? AND o.run_id <> r.run_id AND o.status = 'succeeded' AND o.started_at < r.started_at "
            "ORDER BY o.started_at, o.run_id", [run_id])

    def published_digests(self, path: str) -> set[str]:
        """The sha256 digests of the files this store recorded publishing at ``path``."""
        rows = self.con.execute("SELECT DISTINCT sha256 FROM af_outputs WHERE path = ?", [path]).fetchall()
        return {r[0] for r in rows}

    # -- retention (anonflow.retention decides what goes; this is how) -------------------

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
        return {name: ("VIEW", set(_DATA_NAME.findall(views.get(name) or "")) - {name}) if kind == "VIEW"
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
        when = _now()
        self.con.execute("BEGIN TRANSACTION")
        try:
            for name, sql in steps_views:
                if set(_DATA_NAME.findall(sql or "")) & objects:
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
                         [_now(), _json(selection), _json(sorted(tables)), rows, before, after])

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
            self.con.execute(f"ATTACH '{_sql_text(str(fresh))}' AS af_fresh")
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
            self.con = _connect(str(self.path))
            self.con.execute(f"SET temp_directory = '{_sql_text(settings[1])}'")
            self.con.execute(f"SET memory_limit = '{_sql_text(settings[0])}'")
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
            fh.write(json.dumps({**plan, "started_at": _now().isoformat(), "pid": os.getpid()}, sort_keys=True))
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
                                     [_json(data), run_id, step])
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
                           "finished_at": _now().isoformat()}, tables, int(pending.get("rows") or 0), before,
                          self.file_size())
        self.end_purge()

    def latest_run_with_step(self, step: str) -> str | None:
        row = self._one("SELECT r.run_id FROM af_step_runs s JOIN af_runs r USING (run_id) WHERE s.step = ? "
                               "ORDER BY r.started_at DESC LIMIT 1", [step])
        return row[0] if row else None


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


def schema_markdown() -> str:
    """The store's schema as Markdown, rendered from the migrations (docs/store.md embeds it)."""
    parts = []
    for version, (name, sql) in enumerate(MIGRATIONS, start=1):
        body = "\n".join(line[8:] if line.startswith(" " * 8) else line.strip() for line in sql.strip("\n").splitlines())
        parts.append(f"### Migration {version}: {name}\n\n```sql\n{body.strip()}\n```\n")
    return "\n".join(parts)


# -- user SQL ---------------------------------------------------------------------------
#
# SQL that a workflow file carries (``filter where:``), run where it can do no harm.
#
# A workflow may come from someone else (``anonflow verify --rerun`` runs the one a release
# records), and DuckDB SQL can read any file or URL (``read_csv('/etc/passwd')``), write files
# (``COPY``) and attach databases. The store's own connection needs those powers to read
# sources and write files, and DuckDB's ``enable_external_access`` cannot be switched back on
# once off, so user SQL never runs there. It runs on a connection of its own:
#
# * in memory, with external access disabled and the configuration locked (no file, URL,
#   extension or ``ATTACH``; ``SET`` cannot lift it), one thread (results do not depend on
#   scheduling) and a memory cap;
# * seeing one table only, ``input``: the step's input records;
# * as exactly one ``SELECT`` statement; the condition is evaluated to one boolean per input
#   record (the engine checks it got exactly the input's records back, so SQL cannot add,
#   repeat or reorder records) and the engine filters the records itself.

#: DuckDB's memory cap for user SQL
USER_SQL_MEMORY_LIMIT = "4GB"


#: how long one user SQL condition may run (seconds) before it is interrupted
USER_SQL_TIMEOUT = 300.0

#: every DuckDB connection anonflow opens: no extension is ever installed or loaded beyond those
#: built into DuckDB (core_functions, icu, json, parquet). DuckDB's default installs one from its
#: extension repository over the network, and loads it, as soon as a name needs it: a source's
#: ``types: {x: INET}`` in a workflow file, or a file's type, reached a host nobody named and
#: ran code it downloaded (docs/egress.md)
_NO_EXTENSIONS = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
}

#: a DuckDB connection that reads no file, URL or extension beyond the one it opens
_SANDBOX_CONFIG = {"enable_external_access": False, **_NO_EXTENSIONS}


def _connect(path: str = ":memory:", *, read_only: bool = False, sandbox: bool = False, **config: Any) -> Any:
    """A DuckDB connection with no progress bar (DuckDB draws one on stdout for a query longer
    than two seconds, terminal or not: it broke ``--json`` and printed into pipes; anonflow
    shows its own progress). ``sandbox``: no file, network or extension access, and the
    configuration locked once set."""
    con = duckdb.connect(path, read_only=read_only, config={**(_SANDBOX_CONFIG if sandbox else {}), **config})
    con.execute("SET enable_progress_bar = false")
    # set, not passed as configuration: DuckDB refuses a second connection to the same file in one
    # process with another configuration (the caller's own duckdb.connect(store) next to the API)
    for name, value in _NO_EXTENSIONS.items():
        con.execute(f"SET GLOBAL {name} = {'true' if value else 'false'}")
    if sandbox:
        con.execute("SET lock_configuration = true")
    return con


def _sandbox() -> Any:
    return _connect(sandbox=True, threads=1, memory_limit=USER_SQL_MEMORY_LIMIT)


def sandboxed_connection() -> Any:
    """An in-memory DuckDB connection for a plugin's own SQL over Arrow tables it registers:
    one thread (a scan in registration order), no file, URL or extension access, configuration
    locked (:data:`_SANDBOX_CONFIG`)."""
    return _connect(sandbox=True, threads=1)


def _user_query(condition: str) -> str:
    return f'SELECT "{ROW}" AS r, CAST(({condition}) AS BOOLEAN) AS keep FROM input ORDER BY "{ROW}"'


def check_condition(condition: str, *, where: str) -> None:
    """Parse a ``where:`` condition (no data needed): it must be one SQL expression."""
    if not isinstance(condition, str) or not condition.strip():
        raise WorkflowError("'where' must be an SQL condition", where=where)
    if "\0" in condition:
        raise WorkflowError("'where' contains a NUL character", where=where)
    con = _sandbox()
    try:
        statements = con.extract_statements(_user_query(condition))
    except duckdb.Error as exc:
        raise WorkflowError(f"'where' is not a valid SQL condition: {condition!r}: {_duck_message(exc)}",
                            where=where) from None
    finally:
        con.close()
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise WorkflowError(f"'where' must be one SQL condition over the columns, got {condition!r} (it ends the "
                            "expression and adds statements of its own)", where=where)


def condition_mask(condition: str, data: pa.Table, *, where: str) -> pa.Array:
    """One boolean per record of ``data`` (in ``_row`` order; null counts as false)."""
    check_condition(condition, where=where)
    con = _sandbox()
    try:
        con.register("input", data)
        timer = threading.Timer(USER_SQL_TIMEOUT, con.interrupt)
        timer.start()
        try:
            rel = con.sql(_user_query(condition))
            result = (getattr(rel, "to_arrow_table", None) or rel.fetch_arrow_table)()
        except duckdb.Error as exc:
            if not timer.is_alive():
                raise InputError(f"'where' {condition!r} ran longer than {USER_SQL_TIMEOUT:g} s and was "
                                 "interrupted", where=where) from None
            raise InputError(f"cannot apply where: {condition!r}: {_duck_message(exc)}", where=where) from None
        finally:
            timer.cancel()
    finally:
        con.close()
    rows = np.sort(data.column(ROW).to_numpy(zero_copy_only=False))
    got = result.column("r").to_numpy(zero_copy_only=False)
    if len(got) != len(rows) or not np.array_equal(got, rows):
        raise InputError(f"'where' {condition!r} is not a condition on each record: its query returned "
                         f"{len(got)} rows for {len(rows)} records", where=where)
    return pc.fill_null(result.column("keep"), False)
