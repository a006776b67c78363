"""A property-based fuzz test of the workflow loader over every shipped workflow.

Each example takes a file of ``workflows/*.yaml``, changes it at random -- a value swapped for
one of another type (negative, huge or non-finite numbers, booleans, null, NUL characters,
lists, mappings, deep nesting), a key deleted or renamed, a NUL byte put into the text -- and
runs ``anonflow plan --no-preview`` on it through the CLI. Whatever the change, the answer is a
normal plan (exit 0) or one line of error and exit code 2, never a traceback.

The data files are copied with their CSV files cut to a few hundred records, so a valid plan
is quick. ``ANONFLOW_FUZZ_EXAMPLES`` sets the number of examples (default 300, about 15 s), and
``ANONFLOW_FUZZ_PREVIEW=1`` plans with the preview (the preparation steps run on the data).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from anonflow.cli import main

from tests.support.helpers import WORKFLOWS

SHIPPED = sorted(WORKFLOWS.glob("*.yaml"))
EXAMPLES = int(os.environ.get("ANONFLOW_FUZZ_EXAMPLES", "300"))
#: ANONFLOW_FUZZ_PREVIEW=1: plan with the preview (the preparation steps run on the data; slower)
PREVIEW = () if os.environ.get("ANONFLOW_FUZZ_PREVIEW") else ("--no-preview",)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A copy of workflows/ whose CSV files hold their first 300 lines only."""
    root = tmp_path_factory.mktemp("fuzz") / "workflows"
    for src in (WORKFLOWS / "data").rglob("*"):
        dst = root / "data" / src.relative_to(WORKFLOWS / "data")
        if src.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
        elif src.suffix == ".csv":
            dst.parent.mkdir(parents=True, exist_ok=True)
            with open(src, encoding="utf-8", errors="replace") as fh:
                dst.write_text("".join(line for _, line in zip(range(300), fh)), encoding="utf-8")
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    return root


# -- mutations ------------------------------------------------------------------------

def paths(data, here=()):
    """Every path to a value in ``data`` (keys of mappings, indexes of lists)."""
    yield here
    if isinstance(data, dict):
        for k, v in data.items():
            yield from paths(v, (*here, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from paths(v, (*here, i))


def nested(depth: int):
    value = "x"
    for _ in range(depth):
        value = [value]
    return value


VALUES = st.one_of(
    st.integers(min_value=-3, max_value=3), st.sampled_from([10**30, -(10**25), 2**63, 1e308, 1e23]),
    st.sampled_from([float("inf"), float("-inf"), float("nan")]), st.booleans(), st.none(),
    st.text(max_size=8), st.text(max_size=4).map(lambda t: t + "\0" + t),
    st.sampled_from(["", " ", "typing", "mdav", "evaluate", "publish", "hierarchy", "continuous", "a.csv",
                     "../x", "/etc/passwd", "k-anonymity"]),
    st.lists(st.one_of(st.integers(), st.text(max_size=3), st.none()), max_size=3),
    st.dictionaries(st.text(max_size=4), st.one_of(st.integers(), st.text(max_size=3)), max_size=2),
    st.integers(min_value=60, max_value=80).map(nested),
    st.recursive(st.one_of(st.integers(-2, 2), st.text(max_size=3), st.none(), st.booleans(), st.floats()),
                 lambda inner: st.one_of(st.lists(inner, max_size=3),
                                         st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), inner,
                                                         max_size=3)), max_leaves=8),
)


def mutate(data, draw):
    """One random change of ``data`` in place (or of its root); returns the new root."""
    where = draw(st.sampled_from(list(paths(data))))
    op = draw(st.sampled_from(["swap", "swap", "delete", "rename", "nul"]))
    if not where:
        return draw(VALUES) if op == "swap" else data
    parent = data
    for k in where[:-1]:
        parent = parent[k]
    key = where[-1]
    if op == "swap":
        parent[key] = draw(VALUES)
    elif op == "delete":
        parent.pop(key) if isinstance(parent, dict) else parent.pop(key)
    elif op == "rename" and isinstance(parent, dict):
        new = draw(st.one_of(st.text(max_size=6), st.integers(), st.sampled_from(
            ["input", "with", "uses", "after", "path", "quasi", "metrics", "sources", "steps", str(key) + "x"])))
        if new not in parent:
            parent[new] = parent.pop(key)
    elif op == "nul" and isinstance(parent[key], str):
        parent[key] = parent[key][:1] + "\0" + parent[key][1:]
    return data


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          phases=(Phase.explicit, Phase.reuse, Phase.generate),  # a failure prints its draws; no slow shrinking
          derandomize="ANONFLOW_FUZZ_EXAMPLES" not in os.environ)
@given(st.data())
def test_a_mutated_shipped_workflow_plans_or_fails_in_one_line(folder, data):
    source = data.draw(st.sampled_from(SHIPPED), label="workflow")
    text = source.read_text(encoding="utf-8")
    if data.draw(st.integers(0, 9), label="text-level") == 0:  # a NUL byte (or a cut) in the text itself
        at = data.draw(st.integers(0, len(text)))
        text = text[:at] + data.draw(st.sampled_from(["\0", "", ": :", "\t"])) + text[at + 1:]
    else:
        parsed = yaml.safe_load(text)
        for _ in range(data.draw(st.integers(1, 3), label="changes")):
            parsed = mutate(parsed, data.draw)
        text = yaml.safe_dump(parsed, allow_unicode=True, sort_keys=False)
    path = folder / f"fuzz-{source.name}"
    path.write_text(text, encoding="utf-8")
    res = CliRunner().invoke(main, ["plan", *PREVIEW, str(path)])
    assert res.exception is None or isinstance(res.exception, SystemExit), (text, res.output)
    assert "Traceback" not in res.output
    assert res.exit_code in (0, 2), (text, res.output)
    if res.exit_code == 2:
        lines = res.output.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (text, res.output)
        assert str(path) in lines[0], lines[0]
    else:
        assert "valid" in res.output.splitlines()[0]
