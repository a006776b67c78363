"""DuckDB connections as anonflow opens them, and the sandbox for SQL that is not anonflow's.

Every DuckDB connection of anonflow is made by :func:`connect`: no progress bar, and no
extension installed or loaded beyond those built into DuckDB. A sandboxed connection
(:func:`sandboxed_connection`) reads no file, URL or extension: plugins get it through
``anonflow.api``, and the user SQL of a workflow file (``filter where:``) runs on one
(:func:`check_condition`, :func:`condition_mask`). This module imports no other engine module
but :mod:`anonflow.errors` and :mod:`anonflow.schema`: the plugin API uses it without the store.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InputError, WorkflowError
from .schema import ROW


def arrow(rel: Any) -> pa.Table:
    """A DuckDB relation's records as an Arrow table (whatever DuckDB's version calls it)."""
    fetch = getattr(rel, "to_arrow_table", None) or rel.fetch_arrow_table
    return fetch()


def duck_message(exc: Exception) -> str:
    """A DuckDB error in one line (its first, at most 400 characters)."""
    return str(exc).strip().splitlines()[0][:400]


def duckdb_file(path: str | os.PathLike[str]) -> str:
    """``path`` as DuckDB's file readers (``read_parquet``, ``read_csv``) take it literally.
    They expand ``*``, ``?`` and ``[...]`` in a file name: ``out[1]/x.parquet`` reads
    ``out1/x.parquet`` if there is one. Each such character is written as a class of itself
    (``[[]``), which DuckDB's matcher, like a POSIX shell's, reads as that character alone,
    so the one file is read whatever its name (tests/hostile/test_names_not_patterns.py puts decoys
    that the unescaped name would match beside it)."""
    text = os.fspath(path)
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def ident(name: str) -> str:
    """Quote an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


# -- user SQL ---------------------------------------------------------------------------
#
# SQL that a workflow file carries (``filter where:``), run where it can do no harm.
#
# A workflow may come from someone else (``anonflow verify --rerun`` runs the one a release
# records), and DuckDB SQL can read any file or URL (``read_csv('/etc/passwd')``), write files
# (``COPY``) and attach databases. The store's own connection needs those powers to read
# sources and write files, and DuckDB's ``enable_external_access`` cannot be switched back on
# once off, so user SQL never runs there. It runs on a connection of its own:
#
# * in memory, with external access disabled and the configuration locked (no file, URL,
#   extension or ``ATTACH``; ``SET`` cannot lift it), one thread (results do not depend on
#   scheduling) and a memory cap;
# * seeing one table only, ``input``: the step's input records;
# * as exactly one ``SELECT`` statement; the condition is evaluated to one boolean per input
#   record (the engine checks it got exactly the input's records back, so SQL cannot add,
#   repeat or reorder records) and the engine filters the records itself.

#: DuckDB's memory cap for user SQL
USER_SQL_MEMORY_LIMIT = "4GB"


#: how long one user SQL condition may run (seconds) before it is interrupted
USER_SQL_TIMEOUT = 300.0

#: every DuckDB connection anonflow opens: no extension is ever installed or loaded beyond those
#: built into DuckDB (core_functions, icu, json, parquet). DuckDB's default installs one from its
#: extension repository over the network, and loads it, as soon as a name needs it: a source's
#: ``types: {x: INET}`` in a workflow file, or a file's type, reached a host nobody named and
#: ran code it downloaded (docs/egress.md)
_NO_EXTENSIONS = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
}

#: a DuckDB connection that reads no file, URL or extension beyond the one it opens
_SANDBOX_CONFIG = {"enable_external_access": False, **_NO_EXTENSIONS}


def connect(path: str = ":memory:", *, read_only: bool = False, sandbox: bool = False, **config: Any) -> Any:
    """A DuckDB connection with no progress bar (DuckDB draws one on stdout for a query longer
    than two seconds, terminal or not: it broke ``--json`` and printed into pipes; anonflow
    shows its own progress). ``sandbox``: no file, network or extension access, and the
    configuration locked once set."""
    con = duckdb.connect(path, read_only=read_only, config={**(_SANDBOX_CONFIG if sandbox else {}), **config})
    con.execute("SET enable_progress_bar = false")
    # set, not passed as configuration: DuckDB refuses a second connection to the same file in one
    # process with another configuration (the caller's own duckdb.connect(store) next to the API)
    for name, value in _NO_EXTENSIONS.items():
        con.execute(f"SET GLOBAL {name} = {'true' if value else 'false'}")
    if sandbox:
        con.execute("SET lock_configuration = true")
    return con


def _sandbox() -> Any:
    return connect(sandbox=True, threads=1, memory_limit=USER_SQL_MEMORY_LIMIT)


def sandboxed_connection() -> Any:
    """An in-memory DuckDB connection for a plugin's own SQL over Arrow tables it registers:
    one thread (a scan in registration order), no file, URL or extension access, configuration
    locked (:data:`_SANDBOX_CONFIG`)."""
    return connect(sandbox=True, threads=1)


def _user_query(condition: str) -> str:
    return f'SELECT "{ROW}" AS r, CAST(({condition}) AS BOOLEAN) AS keep FROM input ORDER BY "{ROW}"'


def check_condition(condition: str, *, where: str) -> None:
    """Parse a ``where:`` condition (no data needed): it must be one SQL expression."""
    if not isinstance(condition, str) or not condition.strip():
        raise WorkflowError("'where' must be an SQL condition", where=where)
    if "\0" in condition:
        raise WorkflowError("'where' contains a NUL character", where=where)
    con = _sandbox()
    try:
        statements = con.extract_statements(_user_query(condition))
    except duckdb.Error as exc:
        raise WorkflowError(f"'where' is not a valid SQL condition: {condition!r}: {duck_message(exc)}",
                            where=where) from None
    finally:
        con.close()
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise WorkflowError(f"'where' must be one SQL condition over the columns, got {condition!r} (it ends the "
                            "expression and adds statements of its own)", where=where)


def condition_mask(condition: str, data: pa.Table, *, where: str) -> pa.Array:
    """One boolean per record of ``data`` (in ``_row`` order; null counts as false)."""
    check_condition(condition, where=where)
    con = _sandbox()
    try:
        con.register("input", data)
        timer = threading.Timer(USER_SQL_TIMEOUT, con.interrupt)
        timer.start()
        try:
            rel = con.sql(_user_query(condition))
            result = arrow(rel)
        except duckdb.Error as exc:
            if not timer.is_alive():
                raise InputError(f"'where' {condition!r} ran longer than {USER_SQL_TIMEOUT:g} s and was "
                                 "interrupted", where=where) from None
            raise InputError(f"cannot apply where: {condition!r}: {duck_message(exc)}", where=where) from None
        finally:
            timer.cancel()
    finally:
        con.close()
    rows = np.sort(data.column(ROW).to_numpy(zero_copy_only=False))
    got = result.column("r").to_numpy(zero_copy_only=False)
    if len(got) != len(rows) or not np.array_equal(got, rows):
        raise InputError(f"'where' {condition!r} is not a condition on each record: its query returned "
                         f"{len(got)} rows for {len(rows)} records", where=where)
    return pc.fill_null(result.column("keep"), False)
