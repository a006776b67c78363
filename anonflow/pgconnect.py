"""PostgreSQL connections: every one anonflow makes (a ``postgres`` source, the ``postgres``
publisher) passes through :func:`connect`, where the egress policy in force decides which
hosts may be reached and which are offered credentials (:mod:`anonflow.egress`). The driver
is ADBC's PostgreSQL driver (``adbc-driver-postgresql``, the ``postgres`` extra)."""

from __future__ import annotations

import os
from typing import Any

from . import egress
from .errors import InputError
from .pgurl import display, message, parse

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
    params = parse(url, f"{what}: the URL")
    policy = egress.current()
    reached = egress.postgres_hosts(params)
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

