"""PostgreSQL URLs as anonflow reads them (libpq's own rules), and the small text helpers of
the ``postgres`` source (:mod:`anonflow.sources.pgtable`) and publisher: quoting, a URL shown
without its password, a driver error in one line. Connections are made by
:func:`anonflow.pgconnect.connect` only, under the egress policy.

A URL is read by libpq's own rules (:func:`parse`, through psycopg's ``conninfo_to_dict``).
Passwords never come from a workflow file: a URL holding one anywhere (``postgresql://u:pw@host/db``,
``?password=``, ``postgresql://u#:pw@host/db``, which libpq reads as user ``u#`` with a
password) is refused, and the message does not repeat it. The driver is libpq, so the
password comes from ``PGPASSWORD`` or a ``.pgpass`` file (``PGPASSFILE``) as for ``psql``;
what the run records (the step's parameters, lineage, a release's manifest) is the URL as
the workflow gives it, which holds none.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from .errors import InputError

SCHEMES = ("postgresql", "postgres")
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


