"""The JSON Schema of workflow files and the reference tables of docs/workflows.md, generated
from the declaration (:mod:`anonflow.workflow.model`).

``python -m anonflow.workflow.reference`` writes both anew."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..params import Param
from .model import (SCHEMA_ID, DuckdbSource, Executor, FileSource, MemorySource, PostgresSource, Resources,
                    builtin_steps, step_models, workflow_model)


# -- the JSON Schema and the reference tables -------------------------------------------

def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a workflow file, as shipped in
    ``anonflow/schemas/workflow.schema.json``."""
    schema = workflow_model().model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "anonflow workflow", **{k: v for k, v in schema.items() if k != "title"}}


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(p: Param) -> str:
    if p.required:
        return "required"
    if p.default is None:
        return "none"
    return f"`{p.default}`" if isinstance(p.default, str) else f"`{json.dumps(p.default)}`"


#: the kinds of source, as the reference table names them
SOURCE_KINDS = {"file": FileSource, "DuckDB": DuckdbSource, "PostgreSQL": PostgresSource, "in-memory": MemorySource}
#: built-in steps documented in one section share one table, each row saying which step it is for
SHARED_SECTIONS = {"filter": "filter,sample", "sample": "filter,sample"}


def _key_rows(model: type[BaseModel]) -> list[str]:
    return [f"| `{f.alias or n}` | {_cell(f.description or '')} |" for n, f in model.model_fields.items()]


def reference_tables() -> dict[str, str]:
    """The Markdown tables docs/workflows.md shows between ``<!-- schema:NAME -->`` and
    ``<!-- /schema:NAME -->``: ``top`` (the top-level keys), ``resources``, ``executor`` (its
    mapping form), ``sources`` (every key of every kind of source), ``steps`` (a step's keys),
    and ``with:STEP`` for each built-in step with parameters (``with:filter,sample`` for the
    section the two share)."""
    BUILTINS = builtin_steps()
    head = "| key | meaning |\n| --- | --- |\n"
    out = {"top": head + "\n".join(_key_rows(workflow_model())),
           "resources": head + "\n".join(_key_rows(Resources)),
           "executor": head + "\n".join(_key_rows(Executor))}
    keys: dict[str, tuple[list[str], list[str]]] = {}
    for kind, model in SOURCE_KINDS.items():
        for n, f in model.model_fields.items():
            kinds, texts = keys.setdefault(f.alias or n, ([], []))
            kinds.append(kind)
            if f.description and f.description not in texts:
                texts.append(f.description)
    out["sources"] = "| key | sources | meaning |\n| --- | --- | --- |\n" + "\n".join(
        f"| `{k}` | {', '.join(kinds) if len(kinds) < len(SOURCE_KINDS) else 'all'} | {_cell('; '.join(texts))} |"
        for k, (kinds, texts) in keys.items())
    plugin = step_models()["plugin"]
    out["steps"] = head + "\n".join(_key_rows(plugin))
    for uses, b in BUILTINS.items():
        if not b.params:
            continue
        name = "with:" + SHARED_SECTIONS.get(uses, uses)
        rows = out.get(name, "| parameter | default | meaning |\n| --- | --- | --- |").split("\n")
        rows += [f"| `{p.name}` | {_default(p)} | {_cell(p.help)} |" for p in b.params]
        if uses == "publish":
            rows.append("| other keys | | the publisher's own parameters (`path`, ...) |")
        out[name] = "\n".join(rows)
    return out


MARKER = re.compile(r"<!-- schema:(?P<name>[^ ]+) -->\n(?P<body>.*?)<!-- /schema:(?P=name) -->", re.S)


def render_docs(text: str) -> str:
    """``text`` (docs/workflows.md) with every generated table written anew from the declaration."""
    tables = reference_tables()

    def fill(m: re.Match) -> str:
        name = m["name"]
        if name not in tables:
            raise KeyError(f"docs marker schema:{name} names no generated table; known: {', '.join(tables)}")
        return f"<!-- schema:{name} -->\n{tables[name]}\n<!-- /schema:{name} -->"
    return MARKER.sub(fill, text)


def _main() -> None:  # pragma: no cover - a maintainer's command
    """``python -m anonflow.workflow.reference``: write the shipped JSON Schema and the generated
    tables of docs/workflows.md anew from the declaration."""
    here = Path(__file__).resolve().parent.parent
    (here / "schemas" / "workflow.schema.json").write_text(json_schema_text(), encoding="utf-8")
    docs = here.parent / "docs" / "workflows.md"
    if docs.is_file():
        docs.write_text(render_docs(docs.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    _main()
