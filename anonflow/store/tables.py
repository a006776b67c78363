"""Data tables: content-addressed (``t_<hash prefix>``), written once and never overwritten, so
a failed run cannot damage the results of an earlier one; the SQL plugins run over them, and
how a source's records come in (:meth:`Tables.ingest`: the source fills a scratch table,
the store numbers, hashes and names it)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from ..errors import PurgedError, StoreError
from ..hierarchy import Hierarchy
from ..sandbox import arrow, duckdb_file, ident
from ..schema import FRAGMENT, ROW, Typing
from ..table import Stored, TableHasher, TypedTable, canonical, table_hash
from .connection import copy_option, now, sql_text, to_json

#: prefix of tables being written (renamed to their content address once hashed)
SCRATCH = "af_scratch_"
#: records per batch when the store hashes a table
HASH_BATCH = 1 << 17
#: a table whose records were purged and are computed again: its record is kept (first run,
#: step and time), its records are held again
_HELD_AGAIN = "ON CONFLICT (name) DO UPDATE SET purged_at = NULL"


@dataclass(frozen=True)
class Artifact:
    """A table in the store."""

    table: str
    hash: str
    rows: int



class Tables:
    """The part of :class:`anonflow.store.Store` that keeps data tables."""

    con: Any
    path: Any

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
                return arrow(self.con.sql(query, params=params) if params else self.con.sql(query))
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


    def _column_names(self, name: str) -> list[str]:
        return [r[0] for r in self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND table_schema = 'main' "
            "ORDER BY ordinal_position", [name]).fetchall()]

    def _fetch(self, name: str, columns: Any = None) -> pa.Table:
        sel = "*" if columns is None else ", ".join(ident(c) for c in columns)
        return arrow(self.con.sql(f"SELECT {sel} FROM {ident(name)}"))

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
        :func:`copy_option`), ``columns`` output name -> SQL expression over the table's
        columns (default: every column as it is)."""
        if table.loaded or table.stored is None:
            raise ValueError("copy_to: the table is not in the store")
        exprs = columns or {c: ident(c) for c in table.columns}
        select = ", ".join(f"{e} AS {ident(n)}" for n, e in exprs.items())
        opts = [f"FORMAT {format}"] + [f"{k} {copy_option(v)}" for k, v in (options or {}).items()]
        self.con.execute(f"COPY (SELECT {select} FROM {ident(table.stored.name)}) TO '{sql_text(str(path))}' "
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
            self.con.execute(f"COPY ({query}) TO '{sql_text(str(folder))}' (FORMAT parquet, "
                             "PARTITION_BY (_af_part), COMPRESSION zstd)")

    def read_results(self, query: str, files: list[str], **tables: Any) -> TypedTable:
        """:meth:`derive_table` of ``query``, which reads the Parquet ``files`` (results of
        workers) as ``r`` (with their path as ``r.filename``); records sorted by ``_row``."""
        listed = ", ".join(f"'{sql_text(duckdb_file(f))}'" for f in files)
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
        claims_json = to_json(typed.claims) if typed else None
        hierarchies = {c: self.put(h.table, run_id=run_id, step=step) for c, h in
                       sorted(typed.hierarchies.items())} if typed else {}
        hier_json = to_json({c: {"table": a.table, "builder": typed.hierarchies[c].builder}
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
                                             now(), hier_json])
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

    def ingest(self, fill: Callable[[Any, str], dict[str, str]], *, step: str, run_id: str,
               check: Callable[[list[str], int], None]) -> Artifact:
        """Store a source's records, read straight into the store (no record passes through
        Python), numbered ``_row`` in the order they were read (:mod:`anonflow.sources`).

        ``fill(con, table)`` creates ``table`` on the store's connection from the source and
        returns the columns the source's view must cast (name -> SQL type); ``check(columns,
        rows)`` raises for what may not be stored (a reserved column name, no records).

        The records are written once, as read (``af_raw_<hash>``); the source's artifact is a
        view adding ``_row`` as each record's ``rowid`` (its position in insertion order, which
        DuckDB keeps from the file; stored tables are never changed)."""
        raw = self._scratch_name()
        try:
            casts = fill(self.con, raw)
            columns = self._column_names(raw)
            n = int(self._one(f"SELECT count(*) FROM {ident(raw)}")[0])
            check(columns, n)
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
                                 + _HELD_AGAIN, [name, data_hash, data_hash, n, run_id, step, now()])
                self.con.execute("COMMIT")
            except Exception:
                self.con.execute("ROLLBACK")
                raise
            return Artifact(name, data_hash, n)
        finally:
            self.con.execute(f"DROP TABLE IF EXISTS {ident(raw)}")

    def _exists(self, name: str) -> bool:
        return self._one("SELECT count(*) FROM information_schema.tables WHERE table_name = ? "
                         "AND table_catalog = current_database()", [name])[0] > 0


    def view(self, name: str, table: str) -> None:
        """Point the convenience view ``steps."<workflow>.<step>"`` at a step's latest output."""
        self.con.execute("CREATE SCHEMA IF NOT EXISTS steps")
        self.con.execute(f"CREATE OR REPLACE VIEW steps.{ident(name)} AS SELECT * FROM {ident(table)}")

