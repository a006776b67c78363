"""What every command of the ``anonflow`` command line shares: the one-line errors (exit code 2
for invalid input or workflows, 1 for failed runs; ``--debug`` or ``ANONFLOW_DEBUG=1``
re-raises with the traceback), ``--json`` output, and the text helpers of the printed lines."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import click
import yaml

from ..errors import AnonflowError, AnonflowWarning, InputError
from ..registry import get_registry
from ..store import DatabaseError, damaged

DEFAULT_DB = "anonflow.duckdb"


class CLIError(click.ClickException):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn anonflow errors into one-line messages with the right exit code."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        debug = bool(ctx.find_root().params.get("debug")) or bool(os.environ.get("ANONFLOW_DEBUG"))
        as_json = bool(ctx.params.get("as_json"))
        try:
            with warnings_as_lines():
                return fn(*args, **kwargs)
        except AnonflowError as exc:
            if debug:
                raise
            message = str(exc)
            run_id = getattr(exc, "run_id", None)
            if run_id:
                message += f" (run {run_id} recorded as failed)"
            if as_json:
                json_failure(exc.message, exc.where, exc.exit_code, type(exc).__name__, run_id,
                              getattr(exc, "steps", None))
            raise CLIError(message, exc.exit_code) from None
        except KeyboardInterrupt:
            if as_json:
                json_failure("interrupted", None, 130, "KeyboardInterrupt", None, None)
            raise CLIError("interrupted", 130) from None
        except DatabaseError as exc:  # the store failed under us: damaged, truncated, disk full
            if debug:
                raise
            db = ctx.params.get("db") or DEFAULT_DB
            message = damaged(Path(str(db)), exc)
            if as_json:
                json_failure(message, None, 1, "StoreError", None, None)
            raise CLIError(message, 1) from None
    return wrapper


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """anonflow's warnings (:class:`AnonflowWarning`: a store open to other users, say) as
    one line each on stderr, every time they are raised."""
    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if issubclass(category, AnonflowWarning):
            click.echo(f"anonflow: warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", AnonflowWarning)
        shown = warnings.showwarning
        warnings.showwarning = show
        yield


def json_failure(error: str, where: str | None, exit_code: int, kind: str, run_id: str | None,
                  steps: list | None) -> None:
    """With ``--json``, a failure still prints one JSON object on stdout (the one-line message
    goes to stderr as always): ``{"status": "failed", "error", "where", "kind", "exit_code",
    "run_id", "steps"}`` -- ``run_id`` when the run was recorded, ``steps`` those that ran."""
    out: dict[str, Any] = {"status": "failed", "error": error, "where": where or None, "kind": kind,
                           "exit_code": exit_code, "run_id": run_id}
    if steps is not None:
        out["steps"] = steps
    echo_json(out)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def printable(value: Any) -> str:
    """``value`` as text a terminal shows and does not obey: control characters (ESC, CR, BEL
    from a hostile data or hierarchy file) are written as escapes."""
    text = str(value)
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def overrides_text(overrides: list, sep: str = " ") -> str:
    """A run's ``--set`` overrides as the options that repeat it (values as YAML flow text,
    shell-quoted where needed): ``grouped.k=10 --set 'anon.model_params={l: 3}'``."""
    out = []
    for step, param, value in overrides:
        text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 30).strip()
        if text.endswith("\n..."):  # a plain scalar: drop YAML's end-of-document marker
            text = text[:-4].rstrip()
        out.append(printable(shlex.quote(f"{step}.{param}={text}")))
    return sep.join(out)


def rows_text(rows: int | None) -> str:
    """``"1080 rows, "`` for a published table; nothing for a file that is not one (rows None)."""
    return "" if rows is None else f"{rows} rows, "


def step_uses(s: dict[str, Any]) -> str:
    """What ran a recorded step, for ``runs`` and ``lineage``: ``typing: anonflow 0.1.0``,
    ``publish: csv 0.1.0 (anonflow-std, code 1a2b3c4d5e6f)``, ``evaluate: k-anonymity 0.1.0,
    sse-il 0.1.0 (...)``. The plugins the step itself names come first; the metrics an
    algorithm's claims were checked with are listed after a ``checked with``."""
    plugins = s.get("plugins") or []
    own = {"algorithm": "algorithm", "publish": "publisher", "evaluate": "metric", "hierarchy": "hierarchy"}
    main = [p for p in plugins if p.get("kind") == own.get(s["kind"])]
    if s["kind"] == "algorithm":
        main = [p for p in main if p.get("name") == s["uses"]] or main
    rest = [p for p in plugins if p not in main]

    def show(ps: list[dict[str, Any]]) -> str:
        by: dict[tuple[str, str], list[str]] = {}
        for p in ps:
            by.setdefault((str(p.get("distribution")), str(p.get("code") or "")[:12]), []).append(
                f"{p.get('name')} {p.get('version')}")
        return "; ".join(f"{', '.join(names)} ({dist}, code {code or '-'})" for (dist, code), names in by.items())

    if not main:
        text = f"{s['kind']}: {s['uses']} {s['plugin_version']}" if s["kind"] == "source" else \
            (f"{s['kind']}: anonflow {s['plugin_version']}" if s["uses"] == s["kind"] else
             f"{s['kind']}: {s['uses']} (anonflow {s['plugin_version']})") if s["kind"] != "algorithm" else \
            f"{s['kind']}: {s['uses']} {s['plugin_version']}"
    else:
        text = f"{s['kind']}: {show(main)}"
    if rest:
        text += f"; checked with {show(rest)}" if s["kind"] == "algorithm" else f"; also {show(rest)}"
    return text


def display_path(path: str) -> str:
    if "://" in path:  # a database's table (postgresql://user@host:port/db#schema.table), not a file
        return path
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def size_text(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"  # pragma: no cover


def release_publisher(name: str = "release") -> Any:
    reg = get_registry().get("publisher", name)
    if not hasattr(reg.obj, "verify") or not hasattr(reg.obj, "report"):
        raise InputError(f"publisher {name!r} ({reg.distribution} {reg.version}) does not write releases")
    return reg.obj
