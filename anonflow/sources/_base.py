"""What the built-in source kinds share: the checks every source passes (reserved column
names, no records), the checks of a source file, and :class:`FileSource`, the base of the
kinds that DuckDB reads from files (csv, parquet, parquet-dataset)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import duckdb

from ..api import file_sha256
from ..errors import InputError
from ..sandbox import connect, duck_message, ident
from ..schema import RESERVED
from ..sourcekind import Source, SourceSpec


#: (process id, connection): the in-memory DuckDB database that reads what source files hold while
#: a workflow is planned (opening a database takes DuckDB ~20 ms; a cursor of one takes
#: microseconds). Per process: a forked child opens its own.
_DESCRIBER: list[tuple[int, Any]] = []
_DESCRIBER_LOCK = threading.Lock()


def describing_cursor() -> Any:
    """A cursor of this process's describing database (:func:`anonflow.sandbox.connect`'s
    settings: no extension is loaded or installed), for reading a file's columns; close it."""
    with _DESCRIBER_LOCK:
        if not _DESCRIBER or _DESCRIBER[0][0] != os.getpid():
            _DESCRIBER[:] = [(os.getpid(), connect())]
        cursor = _DESCRIBER[0][1].cursor()
    cursor.execute("SET enable_progress_bar = false")
    return cursor


def where(src: SourceSpec) -> str:
    return f"source {src.name!r}"


def check_reserved(names: Iterable[str], src: SourceSpec) -> None:
    """``_row`` and ``_class`` are anonflow's, in any case (DuckDB's names are case-insensitive:
    a source column ``_ROW`` would be renamed behind the user's back)."""
    reserved = {r.lower() for r in RESERVED}
    clash = [c for c in names if c.lower() in reserved]
    if clash:
        raise InputError(f"column name {clash[0]!r} is reserved by anonflow (as {clash[0].lower()!r}, in any case); "
                         f"rename it in {src.describe()}", where=where(src))


def checker(kind: Source, src: SourceSpec) -> Callable[[list[str], int], None]:
    """What the store checks of a source's records before it keeps them (:meth:`Store.ingest`)."""

    def check(columns: list[str], rows: int) -> None:
        check_reserved(columns, src)
        if rows == 0:
            raise InputError(kind.no_records(src), where=where(src))

    return check


def ingest(kind: Source, store: Any, src: SourceSpec, run_id: str, fill: Callable[[Any, str], dict[str, str]]) -> Any:
    """``store.ingest`` of what ``fill(con, table)`` reads, with the source's checks."""
    return store.ingest(fill, step=src.name, run_id=run_id, check=checker(kind, src))


def check_file(src: SourceSpec, path: Path | None = None, *, may_be_empty: bool = False) -> None:
    """A source file must exist and be a regular file, and (unless ``may_be_empty``) not be empty."""
    path = src.path if path is None else path
    if path is None or not path.exists():
        raise InputError(f"file not found: {path}", where=where(src))
    if path.is_dir():
        raise InputError(f"{path} is a directory, expected a file", where=where(src))
    if not path.is_file():  # a device, FIFO or socket: /dev/zero never ends, a FIFO blocks
        raise InputError(f"{path} is not a regular file (a device, pipe or socket); give a data file",
                         where=where(src))
    if not may_be_empty and path.stat().st_size == 0:
        raise InputError(f"{path} is empty (0 bytes): no header and no records", where=where(src))


def sha256_of(src: SourceSpec, path: Path) -> str:
    try:
        return file_sha256(path)
    except FileNotFoundError:
        raise InputError(f"file not found: {path}", where=where(src)) from None


def path_of(data: Mapping[str, Any], base: Path) -> Path | None:
    file = data.get("path") if data.get("path") is not None else data.get("db")
    return (base / str(file)).resolve() if file is not None else None


class FileSource(Source):
    """A kind DuckDB reads from files with one SQL expression (:meth:`read_expr`)."""

    #: the declaration keys kept in ``options`` (a file source's reading options: DuckDB's CSV
    #: reader reads them, and they are recorded, whatever the file's format)
    option_keys: tuple[str, ...] = ("delimiter", "header", "quote", "na_values", "types")

    def parse(self, name: str, data: Mapping[str, Any], base: Path, tables: Mapping[str, Any]) -> SourceSpec:
        options = {k: data[k] for k in self.option_keys if data.get(k) is not None}
        if "na_values" in options:
            na = options["na_values"]
            options["na_values"] = [na] if isinstance(na, str) else list(na)
        return SourceSpec(name=name, format=self.name, path=path_of(data, base), table=data.get("table"),
                          options=options, kind=self)

    def no_records(self, src: SourceSpec) -> str:
        return f"{src.path} has no records"

    def read_expr(self, src: SourceSpec, whole: bool = True, types: dict[str, str] | None = None
                  ) -> tuple[str, list[Any]]:
        """SQL (and its parameters) that reads the source's records."""
        raise NotImplementedError

    def check_files(self, src: SourceSpec) -> None:
        check_file(src)

    def check_read(self, con: Any, src: SourceSpec, names: list[str]) -> None:
        """Checks of what DuckDB read (a CSV's header); default none."""

    def what(self, src: SourceSpec) -> str:
        """The source in a read error: ``cannot read WHAT: ...``."""
        return str(src.path)

    def content_hash(self, src: SourceSpec) -> str:
        return sha256_of(src, src.path)

    def columns(self, src: SourceSpec) -> list[tuple[str, str]]:
        self.check_files(src)
        sql, params = self.read_expr(src, whole=False)
        con = describing_cursor()
        try:
            # one read gives the columns with their types (as DESCRIBE names them) and whether
            # a record follows the header: a CSV is sniffed once, not twice
            first = con.execute(f"SELECT * FROM ({sql}) LIMIT 1", params).fetchall()
            columns = [(d[0], str(d[1])) for d in con.description]
            self.check_read(con, src, [c for c, _ in columns])
            check_reserved([c for c, _ in columns], src)
            if not first:
                raise InputError(self.no_records(src), where=where(src))
            return columns
        except duckdb.Error as exc:
            raise InputError(f"cannot read {self.what(src)}: {duck_message(exc)}", where=where(src)) from None
        finally:
            con.close()

    def fill(self, src: SourceSpec, con: Any, table: str) -> dict[str, str]:
        """``CREATE TABLE table`` on the store's connection: the casts its view needs."""
        sql, params = self.read_expr(src, whole=True)
        con.execute(f"CREATE TABLE {ident(table)} AS {sql}", params)
        return {}

    def load(self, store: Any, src: SourceSpec, *, run_id: str) -> Any:
        def fill(con: Any, table: str) -> dict[str, str]:
            self.check_files(src)
            try:
                casts = self.fill(src, con, table)
                self.check_read(con, src, column_names(con, table))
            except duckdb.Error as exc:
                if isinstance(exc, duckdb.OutOfMemoryException):
                    raise
                raise InputError(f"cannot read {self.what(src)}: {duck_message(exc)}", where=where(src)) from None
            return casts

        return ingest(self, store, src, run_id, fill)


def column_names(con: Any, table: str) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND table_schema = 'main' "
        "ORDER BY ordinal_position", [table]).fetchall()]


def register_arrow(con: Any, data: Any, table: str, what: str, src: SourceSpec) -> None:
    """``CREATE TABLE table`` from Arrow data (a table or a record batch reader) on ``con``; a
    DuckDB error (not running out of memory) as ``what: message``."""
    con.register("_af_incoming", data)
    try:
        con.execute(f"CREATE TABLE {ident(table)} AS SELECT * FROM _af_incoming")
    except duckdb.Error as exc:
        if isinstance(exc, duckdb.OutOfMemoryException):
            raise
        raise InputError(f"{what}: {duck_message(exc)}", where=where(src)) from None
    finally:
        con.unregister("_af_incoming")
