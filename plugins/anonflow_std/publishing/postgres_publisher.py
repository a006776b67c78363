"""The ``postgres`` publisher: the published table, or a lossy-join pair (a QI table and an SA
table, as the ``lossy-join`` publisher makes them), written into a PostgreSQL schema.

Everything a step writes goes in one transaction (through ADBC's PostgreSQL driver, which
ingests Arrow with ``COPY``): the schema if missing, each table (``if_exists: replace`` drops
the table of that name first), a comment on each table, then the commit. A failure at any
point rolls it all back: no table is left half-written, and a table being replaced keeps its
old content. In a run the commit waits for the run to succeed (``OutputGuard.defer``), like
the files other publishers write, which are removed again if a later step fails; until then
the new tables are invisible to others, and a replaced table is locked.

A table of the store (the published view) is never loaded whole: it is streamed to the
server in batches, sorted by every column, and hashed as it passes (:class:`Streamed`). The
lossy-join pair, and a table with nested columns, are written from memory.

The URL names no password (it is refused: PGPASSWORD or ``.pgpass``, see
:mod:`anonflow.pgconnect`). Each table written is one :class:`Output`: ``path``
``postgresql://user@host:port/database#schema.table``, ``sha256`` anonflow's content hash of
the records written (:func:`anonflow.api.table_hash`, independent of their order) and rows.
The publisher touches no table but those it is told to write.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import (InputError, Output, Param, Publisher, StepContext, TableHasher, TypedTable, check_postgres_url,
                          postgres_connect, postgres_display, postgres_ident, postgres_message, sql_ident, table_hash)

from .. import __version__
from ..common.columns import sensitive_column
from .lossy_join import k_figures, k_sentence, split_tables

#: how long the publisher waits for a lock on a table (another session using it) before failing
LOCK_TIMEOUT = "30s"
#: records per batch streamed from the store to the server (a table in the store is never
#: loaded whole: see :func:`stream`)
BATCH_ROWS = 65_536


def _name(value: Any, param: str) -> str:
    if not isinstance(value, str) or not value or len(value.encode()) > 63 or not value.isprintable():
        raise InputError(f"postgres: {param} must be a PostgreSQL name (1 to 63 bytes, printable), got {value!r}")
    return value


class PostgresPublisher(Publisher):
    name = "postgres"
    version = __version__
    outputs = ()  # it writes no file
    description = ("Write the published table (or a lossy-join QI/SA pair) into a PostgreSQL schema, in one "
                   "transaction committed with the run; the password from PGPASSWORD or .pgpass, never the workflow.")
    params = (
        Param("url", "str", help="postgresql://user@host:port/database, without a password (PGPASSWORD or .pgpass)"),
        Param("schema", "str", default="public", help="the schema the tables are written into (created if missing)"),
        Param("table", "str", default=None, nullable=True, help="the table to write the published records into"),
        Param("qi_table", "str", default=None, nullable=True,
              help="or, lossy-join style: the QI table (exact QI values + class id), with sa_table"),
        Param("sa_table", "str", default=None, nullable=True,
              help="and the SA table (class id, sensitive value, count), with qi_table"),
        Param("if_exists", "str", default="fail", choices=("fail", "replace"),
              help="a table of that name already there: fail, or drop it and write the new one (same transaction)"),
        Param("class_column", "str", default="class_id", help="lossy-join: name of the class id column in both tables"),
        Param("count_column", "str", default="count", help="lossy-join: name of the count column of the SA table"),
        Param("sensitive", "str", default=None, nullable=True,
              help="lossy-join: the sensitive attribute (default: the only one typed)"),
    )

    def destinations(self, params: Mapping[str, Any]) -> list[str]:
        """The server it writes to: the engine checks its host (docs/egress.md), and a re-run
        (``verify --rerun``) does not replay the step."""
        return [params["url"]]

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, **_: Any) -> None:
        check_postgres_url(params["url"], "postgres: 'url'")
        _name(params["schema"], "schema")
        pair = params["qi_table"] is not None or params["sa_table"] is not None
        if pair == (params["table"] is not None):
            raise InputError("postgres: give 'table', or 'qi_table' and 'sa_table' (a lossy-join pair), not both")
        names = [params["table"]] if not pair else [params["qi_table"], params["sa_table"]]
        if pair and None in names:
            raise InputError("postgres: a lossy-join pair needs both 'qi_table' and 'sa_table'")
        for param, value in zip(("table",) if not pair else ("qi_table", "sa_table"), names):
            _name(value, param)
        if pair and params["qi_table"] == params["sa_table"]:
            raise InputError("postgres: qi_table and sa_table must differ")
        if pair and params["class_column"] == params["count_column"]:
            raise InputError("postgres: class_column and count_column must differ")

    def tables(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[tuple[str, Any, str]]:
        """(table name, records, comment) of each table to write; the records an Arrow table, or
        a :class:`Streamed` table of the store."""
        if params["table"] is not None:
            comment = json.dumps({"anonflow.typing": json.loads(table.typing.dumps())}, sort_keys=True)
            streamed = Streamed.of(table, ctx)
            data = streamed if streamed is not None else table.data.replace_schema_metadata(None)
            return [(params["table"], data, comment)]
        s = sensitive_column(table, params["sensitive"], self.name)
        qi, sa = split_tables(table, s, ctx.sql, params["class_column"], params["count_column"])
        ks = k_figures(qi, table.typing.quasi, params["class_column"], ctx.sql)
        ctx.note(f"postgres (lossy-join): {qi.num_rows} QI rows, {sa.num_rows} (class, {s}) counts in "
                 f"{pc.count_distinct(qi.column(params['class_column'])).as_py()} classes; " + k_sentence(ks))
        meta = {"class_column": params["class_column"], "sensitive": s, "count_column": params["count_column"]}
        return [(params["qi_table"], qi, json.dumps({"anonflow.lossy-join": {**meta, "role": "qi",
                                                                             "partner": params["sa_table"]}})),
                (params["sa_table"], sa, json.dumps({"anonflow.lossy-join": {**meta, "role": "sa",
                                                                             "partner": params["qi_table"]}}))]

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        self.check(params)
        url, schema = params["url"], params["schema"]
        todo = self.tables(table, params, ctx)
        where = f"postgresql://{postgres_display(url)}"
        guard = ctx.output_guard
        keys = [f"{where}#{schema}.{name}" for name, _, _ in todo]
        for key in keys:
            if guard is not None and key in getattr(guard, "claimed", ()):
                raise InputError(f"postgres: {key} is written by an earlier publish step of this run; give each "
                                 "step its own table")
        con = postgres_connect(url, autocommit=False, what=f"step {ctx.step!r} (publisher postgres)")
        outputs: list[Output] = []
        try:
            cur = con.cursor()
            try:
                cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                cur.execute("SELECT to_regnamespace($1) IS NULL", parameters=(postgres_ident(schema),))
                if cur.fetchone()[0]:
                    cur.execute(f"CREATE SCHEMA {postgres_ident(schema)}")
                for (name, data, comment), key in zip(todo, keys):
                    full = f"{postgres_ident(schema)}.{postgres_ident(name)}"
                    cur.execute("SELECT to_regclass($1) IS NOT NULL", parameters=(full,))
                    if cur.fetchone()[0]:
                        if params["if_exists"] != "replace":
                            raise InputError(f"postgres: table {schema}.{name} exists in {postgres_display(url)}; anonflow "
                                             "does not write over it unless told to (if_exists: replace)")
                        cur.execute(f"DROP TABLE {full}")  # no CASCADE: a view on it fails the step
                    if isinstance(data, Streamed):  # batch by batch from the store, hashed as they pass
                        cur.adbc_ingest(name, data.reader(), mode="create", db_schema_name=schema)
                        digest = data.hexdigest()
                    else:
                        cur.adbc_ingest(name, data, mode="create", db_schema_name=schema)
                        digest = table_hash(data)
                    cur.execute(f"COMMENT ON TABLE {full} IS 'anonflow: {comment.replace(chr(39), chr(39) * 2)}'")
                    outputs.append(Output(key, digest, data.num_rows))
            finally:
                cur.close()
        except BaseException as exc:
            _rollback(con)
            if isinstance(exc, InputError) or not isinstance(exc, Exception):
                raise
            raise InputError(f"postgres: writing into {postgres_display(url)} failed, nothing was written: "
                             f"{postgres_message(exc)}") from None
        finally:
            for _, data, _ in todo:
                if isinstance(data, Streamed):
                    data.close()
        if guard is not None and hasattr(guard, "defer"):  # committed with the run, or rolled back with it
            guard.defer(keys, lambda: _commit(con), lambda: _rollback(con))
        else:
            _commit(con)
        ctx.note(f"postgres: {', '.join(f'{schema}.{n} ({d.num_rows} rows)' for n, d, _ in todo)} written into "
                 f"{postgres_display(url)}" + (", committed when the run succeeds" if guard is not None else ""))
        return outputs


class Streamed:
    """A stored table (the published view) read in batches of :data:`BATCH_ROWS` records and
    never whole: the records are first written, sorted in canonical order (by every column,
    as :func:`anonflow.table.canonical` sorts them), to a scratch table of the store; the
    batches are read from it in that order and hashed as they pass (:class:`TableHasher`), so
    :meth:`hexdigest` is :func:`anonflow.api.table_hash` of the whole table without holding
    it. The server receives the records in that order."""

    def __init__(self, table: TypedTable, ctx: StepContext) -> None:
        order = ", ".join(f"{sql_ident(c)} ASC NULLS LAST" for c in table.columns)
        self.ctx = ctx
        self.sorted = ctx.derive(f"SELECT * FROM t ORDER BY {order}", t=table)
        self.num_rows = table.num_rows
        self.schema = ctx.sql("SELECT * FROM s LIMIT 0", s=self.sorted).schema.remove_metadata()
        self.hasher = TableHasher()

    @classmethod
    def of(cls, table: TypedTable, ctx: StepContext) -> "Streamed | None":
        """The table streamed, when it is in the store and holds no nested column (else None:
        it is loaded)."""
        if table.loaded or ctx.derive is None or any(pa.types.is_nested(f.type) for f in table.schema):
            return None
        return cls(table, ctx)

    def batches(self):
        for start in range(0, self.num_rows, BATCH_ROWS):
            chunk = self.ctx.sql(f"SELECT * FROM s LIMIT {BATCH_ROWS} OFFSET {start}", s=self.sorted)
            for batch in chunk.replace_schema_metadata(None).to_batches():
                self.hasher.update(batch)
                yield batch

    def reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.batches())

    def hexdigest(self) -> str:
        return self.hasher.hexdigest(self.schema)

    def close(self) -> None:
        self.ctx.discard(self.sorted)


def _commit(con: Any) -> None:
    try:
        con.commit()
    finally:
        con.close()


def _rollback(con: Any) -> None:
    try:
        con.rollback()
    finally:
        con.close()


PLUGINS = [PostgresPublisher()]
