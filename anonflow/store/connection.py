"""The store's DuckDB connection: opening a store file (and saying in one line why it cannot
be opened), the settings it runs with (:class:`Resources`), and the small helpers every part of
the store shares. DuckDB's errors are turned into anonflow's here (:func:`open_failure`,
:func:`damaged`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import duckdb

from ..errors import StoreError
from ..sandbox import duck_message


@dataclass(frozen=True)
class Resources:
    """What the store's DuckDB may use: ``memory`` (its memory limit, e.g. ``2GB``; beyond it
    DuckDB spills to disk), ``threads``, and ``temp_directory`` (where it spills: anonflow
    makes an owner-only folder of its own inside, removed when the run ends). None: DuckDB's
    defaults (80 % of the machine's memory, one thread per core, the system's temp folder)."""

    memory: str | None = None
    threads: int | None = None
    temp_directory: Path | None = None

    def merged(self, other: "Resources") -> "Resources":
        """These settings with ``other``'s given ones in their place (CLI flags over the file)."""
        return Resources(other.memory or self.memory, other.threads or self.threads,
                         other.temp_directory or self.temp_directory)

    def to_json(self) -> dict[str, Any]:
        return {"memory": self.memory, "threads": self.threads,
                "temp_directory": None if self.temp_directory is None else str(self.temp_directory)}


def now() -> datetime:
    return datetime.now(timezone.utc)


def to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def sql_text(text: str) -> str:
    """A string's body for an SQL literal ('' for ')."""
    if "\0" in text:
        raise ValueError("a NUL character cannot be written to SQL")
    return text.replace("'", "''")


def copy_option(value: Any) -> str:
    """A COPY option's value as an SQL literal: booleans and numbers as they are, a mapping as
    a struct of text literals (``KV_METADATA``), anything else as a text literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"'{sql_text(str(k))}': '{sql_text(str(v))}'" for k, v in value.items()) + "}"
    return f"'{sql_text(str(value))}'"


#: what DuckDB raises (the CLI turns it into one line about a damaged store)
DatabaseError = duckdb.Error
#: what DuckDB raises when a query needs more memory than its limit and cannot spill
OutOfMemory = duckdb.OutOfMemoryException

#: runs this process has begun and not finished (never marked interrupted while it lives)

_DAMAGE_HINT = ("the file is damaged or truncated: move it aside and restore a backup, or start a new store with "
                "--db (published releases are checked by 'anonflow verify', which needs no store)")


def check_store_file(path: Path) -> None:
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
    msg = duck_message(exc)
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
    msg = duck_message(exc)
    if isinstance(exc, (duckdb.IOException, duckdb.InternalException, duckdb.SerializationException,
                        duckdb.FatalException)) or "Corrupt" in msg or "not a valid DuckDB" in msg:
        return f"cannot read store {path}: {msg}; {_DAMAGE_HINT}"
    return f"the store {path} refused a value: {msg}"


#: what a purge leaves of a purged run's free text (error messages, plugin notes), which can

OPENING: dict[str, threading.Lock] = {}
OPENING_LOCK = threading.Lock()


@contextlib.contextmanager
def opening(path: Path) -> Iterator[None]:
    """One thread of this process at a time creates, migrates and tidies a store file: DuckDB
    shares one database between the connections a process opens to it, and two threads
    creating the same new store's tables at once failed with "Catalog write-write conflict"."""
    key = os.path.realpath(path)
    with OPENING_LOCK:
        lock = OPENING.setdefault(key, threading.Lock())
    with lock:
        yield


RUNNING: dict[str, threading.RLock] = {}

