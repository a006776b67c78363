"""The docs stay honest: they are checked against the code."""

import os
import re
from pathlib import Path

import pytest

from anonflow.builtins import BUILTINS
from anonflow.store import schema_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs"
README = Path(__file__).resolve().parents[1] / "README.md"


def test_store_schema_doc_is_rendered_from_the_migrations():
    """Regenerate with ANONFLOW_REGEN_DOCS=1 python -m pytest tests/test_docs.py."""
    path = DOCS / "store.md"
    text = path.read_text()
    if os.environ.get("ANONFLOW_REGEN_DOCS"):
        marker = "if it drifts.\n\n"
        text = text[: text.index(marker) + len(marker)] + schema_markdown()
        path.write_text(text)
    assert schema_markdown() in text


@pytest.mark.parametrize("step", sorted(BUILTINS))
def test_every_builtin_step_parameter_is_documented(step):
    text = (DOCS / "workflows.md").read_text()
    assert re.search(rf"^### .*`{step}`.* \(built-in\)$", text, flags=re.M)
    for p in BUILTINS[step].params:
        assert f"| `{p.name}` |" in text, f"{step}.{p.name}"


def test_readme_links_resolve():
    import re

    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()):
        assert (README.parent / target).exists(), target
