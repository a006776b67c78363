"""Checking a parsed workflow file against its declaration (:mod:`anonflow.workflow.model`),
with a one-line error naming the file, the line and the key."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import WorkflowError
from ..safeyaml import Marks
from ..shapes import expected_text, shown
from .model import workflow_model


# -- validation and its one-line error --------------------------------------------------

def _data_path(data: Any, loc: tuple) -> tuple:
    """``loc`` less the elements pydantic adds that are no keys of ``data`` (union tags, ``[key]``)."""
    out: list[Any] = []
    node = data
    for item in loc:
        if isinstance(node, dict) and item in node:
            out.append(item)
            node = node[item]
        elif isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node):
            out.append(item)
            node = node[item]
    return tuple(out)


def _follow(data: Any, path: tuple) -> tuple:
    """The part of ``path`` (keys relative to an error's place) that exists in ``data``."""
    return _data_path(data, path)


def key_text(path: tuple) -> str:
    """A key path as messages show it: ``with.quasi.age``, ``metrics[2]``."""
    out = ""
    for k in path:
        if isinstance(k, int):
            out += f"[{k}]"
        elif isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", k):
            out += ("." if out else "") + k
        else:
            out += f"[{shown(k)}]"
    return out


def where_parts(path: tuple) -> tuple[list[str], tuple]:
    """The named part of a location (``step 'a'``, ``source 's'``) and the key path after it."""
    if len(path) >= 2 and path[0] in ("steps", "sources") and isinstance(path[1], str):
        return [f"{path[0][:-1]} {path[1]!r}"], tuple(path[2:])
    return [], tuple(path)


def describe_error(exc: ValidationError, data: Any) -> tuple[tuple, str, tuple]:
    """The one error to report of ``exc`` (the deepest in ``data``; alternatives at one place
    merged into one "expected A or B") as (key path in ``data``, message without the key, the
    path whose line to show)."""
    found: list[tuple[tuple, dict]] = []
    for err in exc.errors(include_url=False):
        path = _data_path(data, err["loc"])
        ctx = err.get("ctx") or {}
        at = tuple(ctx.get("at") or ())
        if at:
            node = data
            for k in path:
                node = node[k]
            path = path + _follow(node, at)
        found.append((path, err))
    deepest = max(len(p) for p, _ in found)
    here = [(p, e) for p, e in found if len(p) == deepest]
    path = here[0][0]
    said = [e for _, e in here if e["type"] == "said"]
    if said:
        ctx = said[0]["ctx"]
        node = data
        for k in path:
            node = node[k]
        return path, ctx["message"], path + _follow(node, tuple(ctx.get("line_at") or ()))
    if here[0][1]["type"] == "expected":
        return path, here[0][1]["msg"], path
    expected = []
    for _, e in here:
        text = expected_text(e)
        if text not in expected:
            expected.append(text)
    node = data
    for k in path:
        node = node[k]
    return path, f"expected {' or '.join(expected)}, got {shown(here[0][1].get('input', node))}", path


def check_data(data: Any, model: type[BaseModel] | None = None) -> None:
    """Validate parsed workflow data (raises :class:`pydantic.ValidationError`)."""
    (model or workflow_model()).model_validate(data, strict=True)


def check_workflow(data: Any, file: str, marks: Marks | None = None, *, prefix: str | None = None) -> None:
    """Validate ``data`` (a parsed workflow file) against the declaration; raise a
    :class:`~anonflow.errors.WorkflowError` in one line naming ``file``, the line (when
    ``marks`` knows it) and the key."""
    if not isinstance(data, dict):
        raise WorkflowError("expected a mapping with keys name, seed, sources, steps, got " + shown(data), where=file)
    try:
        check_data(data)
    except ValidationError as exc:
        path, message, line_path = describe_error(exc, data)
        line = marks.line(data, line_path) if marks is not None else None
        named, rest = where_parts(path)
        where = [file] + ([prefix] if prefix else []) + ([f"line {line}"] if line else []) + named
        if "{key}" in message:
            key = (repr(rest[0]) if len(rest) == 1 else key_text(rest)) if rest else (named[0] if named else "the file")
            message = message.replace("{key}", key)
        elif rest:
            message = f"{key_text(rest)}: {message}"
        raise WorkflowError(message, where=": ".join(where)) from None
