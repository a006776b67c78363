"""PostgreSQL connections: the ``postgres`` source kind, and what the ``postgres`` publisher
(``anonflow_std.publishing.postgres``) shares with it.

A source ``{postgres: URL, table: NAME}`` or ``{postgres: URL, query: SELECT ...}`` is read
through ADBC's PostgreSQL driver (``adbc-driver-postgresql``, the ``postgres`` extra) as Arrow
record batches, streamed into the store; no record passes through Python one by one.

Passwords never come from a workflow file: a URL holding one (``postgresql://u:pw@host/db``
or ``?password=``) is refused, and the message does not repeat it. The driver is libpq, so
the password comes from ``PGPASSWORD`` or a ``.pgpass`` file (``PGPASSFILE``) as for
``psql``; what the run records (the step's parameters, lineage, a release's manifest) is the
URL as the workflow gives it, which holds none.

A source is read in a read-only transaction (a ``query:`` cannot change the database) with
``synchronize_seqscans`` off, so an unchanged table is read in the same order each time.
PostgreSQL defines no order for ``SELECT * FROM table``: the records' order (their ``_row``
numbers) is the server's, in practice the table's physical order; give ``query: SELECT ...
ORDER BY ...`` for a defined one. The source's content hash is anonflow's hash of the records
as read, in that order.
"""

from __future__ import annotations

import re
from typing import Any, Iterator
from urllib.parse import parse_qsl, unquote, urlsplit

import pyarrow as pa

from .errors import InputError

SCHEMES = ("postgresql", "postgres")
#: the ADBC option that makes the driver return this many bytes per record batch, roughly
BATCH_BYTES = str(16 * 1024 * 1024)


def url_problem(url: Any) -> str | None:
    """Why ``url`` cannot name a PostgreSQL database in a workflow (None: it can). The text
    never repeats the URL: it may hold a password."""
    if not isinstance(url, str) or not url.strip():
        return "must be a URL such as postgresql://user@host:5432/database"
    if not url.isprintable():
        return "holds a control character"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return "is not a valid URL (postgresql://user@host:port/database)"
    if parts.scheme.lower() not in SCHEMES:
        return "must begin with postgresql:// (a libpq connection URL; key=value strings are not taken)"
    if parts.password is not None or any(k.lower() == "password" for k, _ in parse_qsl(parts.query,
                                                                                         keep_blank_values=True)):
        return ("holds a password; a workflow file never does: give it in the environment (PGPASSWORD) or in a "
                ".pgpass file (libpq's usual lookup)")
    return None


def check_url(url: Any, what: str) -> str:
    """``url`` if a workflow may name it, else an InputError ``"<what> <problem>"``."""
    problem = url_problem(url)
    if problem is not None:
        raise InputError(f"{what} {problem}")
    return url


def display(url: str) -> str:
    """``user@host:port/database`` of a URL (for messages and the lineage's names); the
    password, were there one, is left out."""
    parts = urlsplit(url)
    params = dict(parse_qsl(parts.query))
    host = unquote(parts.hostname or "") or params.get("host", "")
    port = parts.port or params.get("port", "")
    user = unquote(parts.username or "") or params.get("user", "")
    db = unquote(parts.path.lstrip("/")) or params.get("dbname", "")
    return f"{user + '@' if user else ''}{host}{':' + str(port) if port else ''}/{db}"


def quote_ident(name: str) -> str:
    """A PostgreSQL identifier, quoted (``"`` doubled)."""
    if "\0" in name:
        raise InputError(f"identifier {name!r} holds a NUL character")
    return '"' + name.replace('"', '""') + '"'


def table_name(text: str) -> str:
    """``NAME`` or ``SCHEMA.NAME`` as a quoted PostgreSQL name (each part as written)."""
    parts = text.split(".")
    if len(parts) > 2 or not all(parts):
        raise InputError(f"table {text!r}: give NAME or SCHEMA.NAME")
    return ".".join(quote_ident(p) for p in parts)


def connect(url: str, *, autocommit: bool = False) -> Any:
    """An ADBC DB-API connection (raises InputError when the driver is missing or the server
    refuses; the message is libpq's, which never holds the password)."""
    try:
        from adbc_driver_postgresql import dbapi
    except ImportError:
        raise InputError("PostgreSQL needs the ADBC driver: pip install 'anonflow[postgres]' "
                         "(adbc-driver-postgresql)") from None
    try:
        return dbapi.connect(url, autocommit=autocommit)
    except Exception as exc:  # noqa: BLE001 - the driver's errors have no common base to import
        raise InputError(f"cannot connect to {display(url)}: {message(exc)}") from None


def message(exc: BaseException) -> str:
    """A driver error in one line."""
    text = " ".join(str(exc).split())
    text = re.sub(r"^[A-Z_]+: (\[libpq\] )?", "", text)
    text = re.sub(r"^Failed to (prepare|execute) query: ", "", text)
    return text.split(" Query was:")[0].strip()[:400]


def plain_types(schema: pa.Schema) -> pa.Schema:
    """The schema with PostgreSQL-specific extension types (``numeric``, ``json``... arrive as
    ``arrow.opaque`` text) as their storage type, and without the driver's field metadata."""
    return pa.schema([pa.field(f.name, f.type.storage_type if isinstance(f.type, pa.ExtensionType) else f.type,
                               f.nullable) for f in schema])


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
        self.con = connect(url, autocommit=True)
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
            # read only (a query cannot write), one snapshot, and a table scan from its first page
            self.cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self.cur.execute("SET LOCAL synchronize_seqscans = off")
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
