"""The ``postgres`` source: a table or query of a PostgreSQL database (``{postgres: URL, table:
NAME}`` or ``{postgres: URL, query: SELECT ...}``), read through ADBC's PostgreSQL driver as
Arrow record batches and streamed into the store; no record passes through Python one by one.
The connection is made by :func:`anonflow.pgconnect.connect` (the egress policy decides).

A source is read in a read-only transaction (a ``query:`` cannot change the database), with
a ``statement_timeout`` (the source's ``timeout:``, default :data:`DEFAULT_TIMEOUT`) and
``synchronize_seqscans`` off, so an unchanged table is read in the same order each time.
PostgreSQL defines no order for ``SELECT * FROM table``: the records' order (their ``_row``
numbers) is the server's, in practice the table's physical order; give ``query: SELECT ...
ORDER BY ...`` for a defined one. The source's content hash is anonflow's hash of the records
as read, in that order: the source is :attr:`~anonflow.sourcekind.Source.remote`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import pyarrow as pa

from ..errors import InputError, WorkflowError
from ..pgconnect import connect
from ..pgurl import check_timeout, message, plain_types, table_name, url_problem
from ..sandbox import connect as duckdb_connect
from ..sourcekind import Source, SourceSpec
from ._base import checker, ingest, register_arrow, where

#: the ADBC option that makes the driver return this many bytes per record batch, roughly
BATCH_BYTES = str(16 * 1024 * 1024)
#: how long a source's query may run on the server (its ``timeout:``): PostgreSQL's
#: ``statement_timeout`` ends it there (a ``pg_sleep``, a runaway join)
DEFAULT_TIMEOUT = "15min"
#: how long a source's query waits for a lock before it fails
LOCK_TIMEOUT = "30s"


def source_query(src: Any) -> str:
    """The SELECT a source runs: its ``query``, or every column of its ``table``."""
    query = src.options.get("query")
    if query is not None:
        return str(query).strip().rstrip(";")
    return f"SELECT * FROM {table_name(src.table or '')}"


class SourceReader:
    """A postgres source's records as an Arrow stream (``with`` it: the connection closes)."""

    def __init__(self, src: Any, *, limit: int | None = None) -> None:
        self.src = src
        url = src.options["postgres"]
        self.con = connect(url, autocommit=True, what=f"source {src.name!r}")
        timeout = check_timeout(src.options.get("timeout", DEFAULT_TIMEOUT), f"source {src.name!r}: 'timeout'")
        # a subquery: the text must be one SELECT (or VALUES, TABLE...), no other statement
        query = f"SELECT * FROM ({source_query(src)}\n) AS anonflow_source"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        self.cur = self.con.cursor()
        try:
            self.cur.adbc_statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": BATCH_BYTES})
        except Exception:  # noqa: BLE001 - an older driver: its default batch size
            pass
        try:
            # read only (a query cannot write), one snapshot, a table scan from its first page, and
            # a statement that ends after the source's timeout (docs/workflows.md says what a
            # read-only transaction does not stop)
            self.cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self.cur.execute("SET LOCAL synchronize_seqscans = off")
            self.cur.execute(f"SET LOCAL statement_timeout = '{timeout}'")
            self.cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            self.cur.execute(query)
            self.raw = self.cur.fetch_record_batch()
        except InputError:
            self.close()
            raise
        except Exception as exc:  # noqa: BLE001
            self.close()
            raise InputError(f"cannot read {self.what}: {message(exc)}") from None
        self.schema = plain_types(self.raw.schema)

    @property
    def what(self) -> str:
        q = self.src.options.get("query")
        return f"query {' '.join(str(q).split())[:120]!r}" if q is not None else f"table {self.src.table!r}"

    def batches(self) -> Iterator[pa.RecordBatch]:
        try:
            for batch in self.raw:
                yield pa.RecordBatch.from_arrays([c.storage if isinstance(c, pa.ExtensionArray) else c
                                                  for c in batch.columns], schema=self.schema)
        except Exception as exc:  # noqa: BLE001
            raise InputError(f"cannot read {self.what}: {message(exc)}") from None

    def reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.batches())

    def close(self) -> None:
        for closing in (getattr(self, "cur", None), self.con):
            try:
                if closing is not None:
                    closing.close()
            except Exception:  # noqa: BLE001 - closing what failed
                pass

    def __enter__(self) -> "SourceReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PostgresSource(Source):
    name = "postgres"
    description = "a table or query of a PostgreSQL database"
    remote = True

    def claims(self, data: Mapping[str, Any]) -> bool:
        return data.get("postgres") is not None or data.get("format") == "postgres"

    def parse(self, name: str, data: Mapping[str, Any], base: Path, tables: Mapping[str, Any]) -> SourceSpec:
        problem = url_problem(data.get("postgres"))
        if problem is not None:  # never repeated: it may hold a password
            raise WorkflowError(f"'postgres' {problem}")
        table, query = data.get("table"), data.get("query")
        if (table is None) == (query is None):
            raise WorkflowError("a postgres source needs 'table' (NAME or SCHEMA.NAME) or 'query' (a SELECT), not both")
        for key, value in (("table", table), ("query", query)):
            if value is not None and not value.strip():
                raise WorkflowError(f"'{key}' must be a non-empty string, got {value!r}")
        options: dict[str, Any] = {"postgres": data["postgres"]}
        if query is not None:
            options["query"] = query
        if data.get("timeout") is not None:  # the query's statement_timeout on the server
            try:
                check_timeout(data["timeout"])
            except InputError as exc:
                raise WorkflowError(exc.message) from None
            options["timeout"] = data["timeout"]
        return SourceSpec(name=name, format=self.name, table=table, options=options, kind=self)

    def describe(self, src: SourceSpec) -> str:
        query = src.options.get("query")
        what = f"table {src.table}" if query is None else f"query {' '.join(str(query).split())!r}"
        return f"{what} of {src.options['postgres']}"

    def destinations(self, src: SourceSpec) -> list[str]:
        return [src.options["postgres"]]

    def origin(self, src: SourceSpec) -> str:
        return self.describe(src)

    def recorded(self, src: SourceSpec) -> tuple[dict[str, Any], str]:
        return {"path": str(src.path), "table": src.table, **src.options}, self.describe(src)

    def files(self, src: SourceSpec) -> list[Path]:
        return []

    def columns(self, src: SourceSpec) -> list[tuple[str, str]]:
        """One record, for the columns and their types."""
        try:
            with SourceReader(src, limit=1) as pg:
                first = pa.Table.from_batches(list(pg.batches()), pg.schema)
        except InputError as exc:
            raise InputError(exc.message, where=where(src)) from None
        checker(self, src)(first.column_names, first.num_rows)
        con = duckdb_connect()
        try:
            return [(r[0], r[1]) for r in con.execute("DESCRIBE SELECT * FROM first").fetchall()]
        finally:
            con.close()

    def load(self, store: Any, src: SourceSpec, *, run_id: str) -> Any:
        def fill(con: Any, table: str) -> dict[str, str]:
            try:
                with SourceReader(src) as pg:
                    register_arrow(con, pg.reader(), table, f"cannot read {self.describe(src)}", src)
            except InputError as exc:
                raise InputError(exc.message, where=where(src)) from None
            return {}

        return ingest(self, store, src, run_id, fill)


SOURCE = PostgresSource()
