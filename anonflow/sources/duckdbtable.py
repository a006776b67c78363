"""The ``duckdb`` source: a table of a DuckDB database file (``{table: NAME, db: FILE}``),
read through a read-only, sandboxed connection (the file may come from someone else, and a
view in it must not read other files), streamed into the store batch by batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import duckdb
import pyarrow as pa

from ..errors import InputError, WorkflowError
from ..sandbox import arrow, connect, duck_message, ident
from ..sourcekind import Source, SourceSpec
from ._base import check_file, checker, ingest, path_of, register_arrow, sha256_of, where

#: records per batch streamed from the file into the store
BATCH = 1 << 17


class DuckdbSource(Source):
    name = "duckdb"
    description = "a table in a DuckDB database file"
    extensions = (".duckdb", ".db")
    implied_by = ("table",)

    def parse(self, name: str, data: Mapping[str, Any], base: Path, tables: Mapping[str, Any]) -> SourceSpec:
        if not data.get("table"):
            raise WorkflowError("a DuckDB source needs 'table'")
        return SourceSpec(name=name, format=self.name, path=path_of(data, base), table=data.get("table"), kind=self)

    def describe(self, src: SourceSpec) -> str:
        return f"table {src.table}" + (f" in {src.path}" if src.path else "")

    def no_records(self, src: SourceSpec) -> str:
        return f"table {src.table!r}" + (f" in {src.path}" if src.path else "") + " has no records"

    def content_hash(self, src: SourceSpec) -> str:
        return sha256_of(src, src.path) if src.path else ""

    def _open(self, src: SourceSpec) -> Any:
        if src.path is not None:
            check_file(src, may_be_empty=True)
        try:
            return connect(str(src.path), read_only=True, sandbox=True) if src.path else connect(sandbox=True)
        except duckdb.Error as exc:
            raise InputError(f"cannot open DuckDB file {src.path}: {duck_message(exc)}", where=where(src)) from None

    def read(self, src: SourceSpec) -> pa.Table:
        con = self._open(src)
        try:
            data = arrow(con.sql(f"SELECT * FROM {ident(src.table or '')}"))
        except duckdb.Error as exc:
            raise InputError(f"cannot read table {src.table!r}: {duck_message(exc)}", where=where(src)) from None
        finally:
            con.close()
        checker(self, src)(data.column_names, data.num_rows)
        return data

    def columns(self, src: SourceSpec) -> list[tuple[str, str]]:
        return [(f.name, str(f.type)) for f in self.read(src).schema]

    def load(self, store: Any, src: SourceSpec, *, run_id: str) -> Any:
        def fill(con: Any, table: str) -> dict[str, str]:
            source = self._open(src)
            try:
                try:
                    reader = source.sql(f"SELECT * FROM {ident(src.table or '')}").to_arrow_reader(BATCH)
                except duckdb.Error as exc:
                    raise InputError(f"cannot read table {src.table!r}: {duck_message(exc)}", where=where(src)) from None
                register_arrow(con, reader, table, f"cannot read table {src.table!r}", src)
            finally:
                source.close()
            return {}

        return ingest(self, store, src, run_id, fill)


SOURCE = DuckdbSource()
