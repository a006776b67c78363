"""PostgreSQL connections: the ``postgres`` source kind, and what the ``postgres`` publisher
(``anonflow_std.publishing.postgres``) shares with it.

A source ``{postgres: URL, table: NAME}`` or ``{postgres: URL, query: SELECT ...}`` is read
through ADBC's PostgreSQL driver (``adbc-driver-postgresql``, the ``postgres`` extra) as Arrow
record batches, streamed into the store; no record passes through Python one by one.

A URL is read by libpq's own rules (:func:`parse`, through psycopg's ``conninfo_to_dict``).
Passwords never come from a workflow file: a URL holding one anywhere (``postgresql://u:pw@host/db``,
``?password=``, ``postgresql://u#:pw@host/db``, which libpq reads as user ``u#`` with a
password) is refused, and the message does not repeat it. The driver is libpq, so the
password comes from ``PGPASSWORD`` or a ``.pgpass`` file (``PGPASSFILE``) as for ``psql``;
what the run records (the step's parameters, lineage, a release's manifest) is the URL as
the workflow gives it, which holds none. Which hosts may be reached, and which are offered
credentials, is the egress policy's call (:mod:`anonflow.egress`, in :func:`connect`).

A source is read in a read-only transaction (a ``query:`` cannot change the database), with
a ``statement_timeout`` (the source's ``timeout:``, default :data:`DEFAULT_TIMEOUT`) and
``synchronize_seqscans`` off, so an unchanged table is read in the same order each time.
PostgreSQL defines no order for ``SELECT * FROM table``: the records' order (their ``_row``
numbers) is the server's, in practice the table's physical order; give ``query: SELECT ...
ORDER BY ...`` for a defined one. The source's content hash is anonflow's hash of the records
as read, in that order.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterator

import pyarrow as pa

from .errors import InputError

SCHEMES = ("postgresql", "postgres")
#: the ADBC option that makes the driver return this many bytes per record batch, roughly
BATCH_BYTES = str(16 * 1024 * 1024)
#: how long a source's query may run on the server (its ``timeout:``): PostgreSQL's
#: ``statement_timeout`` ends it there (a ``pg_sleep``, a runaway join)
DEFAULT_TIMEOUT = "15min"
#: how long a source's query waits for a lock before it fails
LOCK_TIMEOUT = "30s"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|h|d)?\s*$")


def check_timeout(value: Any, what: str = "'timeout'") -> str:
    """A source's ``timeout:`` as PostgreSQL reads a duration: a number of seconds, or a
    number with a unit (``ms``, ``s``, ``min``, ``h``, ``d``); from 1 ms to 1 day."""
    text = str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise InputError(f"{what} must be a duration such as 30s, 10min or 2h (a number alone is seconds), "
                         f"got {value!r}")
    number, unit = float(match.group(1)), match.group(2) or "s"
    ms = number * {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}[unit]
    if not 1 <= ms <= 86_400_000:
        raise InputError(f"{what} must lie between 1ms and 1d, got {value!r}")
    return f"{int(ms)}ms"


#: connection parameters a workflow or a manifest may not give: a secret (``password``,
#: ``sslpassword``), or where credentials or hosts are looked up instead of named
#: (``passfile``, ``service``: the user's own files and environment decide those)
REFUSED_KEYS = {"password": "holds a password", "sslpassword": "holds a password (sslpassword)",
                "passfile": "names a password file (passfile)", "service": "names a service (its host is not in the URL)"}
PASSWORD_HELP = ("a workflow file never holds one: give it in the environment (PGPASSWORD) or in a .pgpass file "
                 "(libpq's usual lookup)")


def parse(url: Any, what: str = "'postgres'") -> dict[str, str]:
    """The connection parameters of a PostgreSQL URL, as libpq reads them (psycopg's
    ``conninfo_to_dict`` calls libpq's own parser: ``postgresql://u#:pw@h/db`` is user
    ``u#`` with a password, as the driver would see it). Raises InputError for anything but
    a ``postgresql://`` URL, and for a password (or a password file, or a service) anywhere
    in it; the message never repeats the URL."""
    if not isinstance(url, str) or not url.strip():
        raise InputError(f"{what} must be a URL such as postgresql://user@host:5432/database")
    if not url.isprintable():
        raise InputError(f"{what} holds a control character")
    if url.split("://", 1)[0].lower() not in SCHEMES or "://" not in url:
        raise InputError(f"{what} must begin with postgresql:// (a libpq connection URL; key=value strings are "
                         "not taken)")
    try:
        from psycopg import pq
    except ImportError:
        raise InputError("PostgreSQL URLs are read by libpq's rules through psycopg: pip install "
                         "'anonflow[postgres]'") from None
    try:  # libpq's PQconninfoParse (what conninfo_to_dict calls), keeping keys given empty
        params = {o.keyword.decode(): o.val.decode() for o in pq.Conninfo.parse(url.encode()) if o.val is not None}
    except Exception:  # noqa: BLE001 - psycopg's errors; their text may quote the URL
        raise InputError(f"{what} is not a valid libpq connection URL (postgresql://user@host:port/database"
                         "?param=value)") from None
    for key, problem in REFUSED_KEYS.items():
        if key in params:
            raise InputError(f"{what} {problem}; {PASSWORD_HELP}" if "password" in problem
                             else f"{what} {problem}; a workflow file names the host, user and database itself")
    return params


def hosts(params: dict[str, str]) -> list[str]:
    """Every host a connection may reach: each of ``host`` (names, addresses, Unix socket
    folders; libpq takes a comma-separated list) and each of ``hostaddr`` (the address
    connected to, when given: ``host`` is then only the name credentials are looked up by).
    Empty when the URL names neither: the user's environment (``PGHOST``) decides."""
    from .egress import normal_host

    found: list[str] = []
    for key in ("host", "hostaddr"):
        for part in params.get(key, "").split(","):
            part = part.strip()
            if part and (part.startswith(("/", "@")) or normal_host(part) not in found):
                found.append(part if part.startswith(("/", "@")) else normal_host(part))
    return found


def url_problem(url: Any) -> str | None:
    """Why ``url`` cannot name a PostgreSQL database in a workflow (None: it can). The text
    never repeats the URL: it may hold a password."""
    try:
        parse(url, "")
    except InputError as exc:
        return exc.message.strip()
    return None


def check_url(url: Any, what: str) -> str:
    """``url`` if a workflow may name it, else an InputError ``"<what> <problem>"``."""
    parse(url, what)
    return url


def display(url: str) -> str:
    """``user@host:port/database`` of a URL (for messages and the lineage's names), as libpq
    reads it; a password, were there one, is left out."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = {k: str(v) for k, v in conninfo_to_dict(url).items()}
    except Exception:  # noqa: BLE001 - not a URL libpq reads: nothing of it is shown
        return "(an invalid URL)"
    user, host, port, db = (params.get(k, "") for k in ("user", "host", "port", "dbname"))
    if params.get("hostaddr") and not host:
        host = params["hostaddr"]
    return f"{user + '@' if user else ''}{host}{':' + port if port else ''}/{db}"


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


#: libpq parameters that offer no credentials: no password (an explicit empty one keeps
#: PGPASSWORD out), no password file, no client certificate, no GSSAPI, and a server that asks
#: for any authentication is refused before anything is sent
NO_CREDENTIALS = {"password": "", "passfile": os.path.join(os.sep, "nonexistent", "anonflow-no-passfile"),
                  "sslcertmode": "disable", "gssencmode": "disable", "require_auth": "none"}


def connect(url: str, *, autocommit: bool = False, what: str = "PostgreSQL") -> Any:
    """An ADBC DB-API connection (raises InputError when the driver is missing or the server
    refuses; the message is libpq's, which never holds the password).

    Every PostgreSQL connection anonflow makes passes here, and here the egress policy in
    force (:func:`anonflow.egress.current`) decides: a host that is not this machine and
    that the user did not name is refused before any connection; a host the policy offers no
    credentials to (a re-run's host the verifier did not name) is connected to with none."""
    from . import egress

    params = parse(url, f"{what}: the URL")
    policy = egress.current()
    reached = hosts(params)
    policy.check(reached, f"{what} ({display(url)})")
    conninfo = url
    if not policy.offers_credentials(reached):
        from psycopg.conninfo import make_conninfo

        conninfo = make_conninfo(url, **NO_CREDENTIALS)
    try:
        from adbc_driver_postgresql import dbapi
    except ImportError:
        raise InputError("PostgreSQL needs the ADBC driver: pip install 'anonflow[postgres]' "
                         "(adbc-driver-postgresql)") from None
    try:
        return dbapi.connect(conninfo, autocommit=autocommit)
    except Exception as exc:  # noqa: BLE001 - the driver's errors have no common base to import
        text = message(exc)
        if conninfo is not url and "authentication method requirement" in text:
            text = (f"the server asks for credentials, and anonflow offers none to a host you did not name "
                    f"({text}); name it with --allow-host {reached[0] if reached else 'HOST'} to offer yours")
        raise InputError(f"cannot connect to {display(url)}: {text}") from None


def message(exc: BaseException) -> str:
    """A driver error in one line (a server's text included, so no control character: a
    terminal would obey it)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in str(exc)).split())
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
