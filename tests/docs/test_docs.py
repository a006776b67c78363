"""The docs stay honest: they are checked against the code.

- every parameter of every built-in step is documented in *that* step's section of
  docs/workflows.md, and every parameter of every first-party plugin (algorithms, metrics,
  publishers, hierarchy builders) in *that* plugin's section of the docs; every parameter a
  docs table lists exists, with the default the code gives it;
- the lattice's list of privacy models names every model the lattice can search;
- the README's example workflow is the shipped file, and gives the figures the README quotes;
- every ``anonflow ...`` command line in the README and docs uses options its command has;
- the store schema in docs/store.md is rendered from the migrations.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml

from anonflow.steps import BUILTINS
from anonflow.params import REQUIRED
from anonflow.store import schema_markdown

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
WORKFLOWS_MD = DOCS / "workflows.md"
# where first-party plugins are documented, looked up by a heading naming the plugin in backticks
PLUGIN_DOCS = (DOCS / "algorithms.md", DOCS / "workflows.md", DOCS / "releases.md", DOCS / "perturbation-recode.md",
               DOCS / "perturbation-continuous.md", DOCS / "perturbation-risk.md", DOCS / "perturbation-utility.md",
               DOCS / "perturbation-attacks.md", DOCS / "differential-privacy.md")
SHIPPED_EXAMPLE = ROOT / "workflows" / "census-mdav.yaml"


# -- reading Markdown -------------------------------------------------------------------

@dataclass(frozen=True)
class Section:
    doc: str
    level: int
    heading: str
    own: str          # the text up to the next heading of any level
    body: str         # the text up to the next heading of the same or a higher level
    parents: tuple[str, ...]  # headings of the enclosing sections, outermost first


def sections(path: Path) -> list[Section]:
    """The sections of a Markdown file (headings inside fenced code blocks are not headings)."""
    lines = path.read_text().splitlines()
    heads: list[tuple[int, int, str]] = []
    fenced = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^(#{1,6}) (.*)$", line)
        if m:
            heads.append((i, len(m[1]), m[2].strip()))
    out = []
    for j, (i, level, text) in enumerate(heads):
        nxt = heads[j + 1][0] if j + 1 < len(heads) else len(lines)
        end = next((i2 for (i2, l2, _) in heads[j + 1:] if l2 <= level), len(lines))
        parents, lvl = [], level
        for (_, l2, t2) in reversed(heads[:j]):
            if l2 < lvl:
                parents.insert(0, t2)
                lvl = l2
        out.append(Section(path.name, level, text, "\n".join(lines[i + 1:nxt]), "\n".join(lines[i + 1:end]),
                           tuple(parents)))
    return out


def code_names(text: str) -> list[str]:
    """The code spans of a heading or a table cell: `k`, `per: value` -> k, per: value."""
    return re.findall(r"`([^`]+)`", text)


def _cells(line: str) -> list[str]:
    """Split a table row on the pipes outside code spans and not escaped."""
    cells, cur, code = [], "", False
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            cur += body[i: i + 2]
            i += 2
            continue
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    cells.append(cur.strip())
    return cells


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """The Markdown tables of ``text``: (header cells, rows of cells)."""
    out, block = [], []
    for line in text.splitlines() + [""]:
        if line.lstrip().startswith("|"):
            block.append(line)
            continue
        if len(block) >= 2:
            out.append((_cells(block[0]), [_cells(r) for r in block[2:]]))
        block = []
    return out


def param_rows(text: str):
    """Rows of the parameter tables in ``text`` (header ``| parameter | ...``): yields
    (names in the first cell, {header: cell})."""
    for header, rows in tables(text):
        if not header or header[0].lower() != "parameter":
            continue
        for row in rows:
            cells = dict(zip([h.lower() for h in header], row))
            names = [n.split(":")[0].strip() for n in code_names(row[0])]
            if names:
                yield names, cells


def defaults_agree(cell: str, names: list[str], name: str, default) -> bool:
    """Whether a table's default cell says what the code's default is. A default of None is
    described in prose (what an absent value means), so any text agrees with it."""
    if default is None:
        return True
    text = cell.strip()
    parts = [p.strip() for p in text.split(",")] if len(names) > 1 else [text]
    if len(parts) == len(names):
        text = parts[names.index(name)]
    if default is REQUIRED:
        return text.strip("`").strip().lower().startswith("required")
    m = re.fullmatch(r"`([^`]*)`", text)
    raw = m[1] if m else text
    if isinstance(default, str) and raw == default:
        return True
    try:
        value = yaml.safe_load(raw) if raw else None
    except yaml.YAMLError:
        return False
    if isinstance(value, (int, float)) and isinstance(default, (int, float)) \
            and not isinstance(value, bool) and not isinstance(default, bool):
        return float(value) == float(default)
    return value == default


# -- built-in steps (docs/workflows.md) ----------------------------------------------------

def step_section(step: str, doc: Path = WORKFLOWS_MD) -> Section:
    found = [s for s in sections(doc) if step in code_names(s.heading) and s.heading.endswith("(built-in)")]
    assert len(found) == 1, f"{doc.name}: no single '### `{step}` ... (built-in)' section"
    return found[0]


def documented_step_params(step: str, doc: Path = WORKFLOWS_MD) -> dict[str, dict[str, str]]:
    """The parameters the step's own section documents: name -> its table row. A section
    shared by several steps (`filter` and `sample`) must say which step a row is for."""
    section = step_section(step, doc)
    shared = len(code_names(section.heading)) > 1
    out = {}
    for names, cells in param_rows(section.own):
        if shared and f"(`{step}`)" not in cells.get("meaning", ""):
            continue
        for n in names:
            out[n] = cells | {"_names": names}
    return out


def check_step_params(step: str, doc: Path = WORKFLOWS_MD) -> None:
    documented = documented_step_params(step, doc)
    declared = {p.name: p for p in BUILTINS[step].params}
    missing = sorted(set(declared) - set(documented))
    assert not missing, f"{doc.name}, section of `{step}`: parameters not documented there: {missing}"
    unknown = sorted(set(documented) - set(declared))
    assert not unknown, f"{doc.name}, section of `{step}`: documents parameters `{step}` does not have: {unknown}"
    for name, p in declared.items():
        row = documented[name]
        assert defaults_agree(row.get("default", ""), row["_names"], name, p.default), \
            f"{doc.name}, `{step}`.`{name}`: documented default {row.get('default')!r}, the code's is {p.default!r}"


@pytest.mark.parametrize("step", sorted(BUILTINS))
def test_every_builtin_step_parameter_is_documented_in_its_own_section(step):
    check_step_params(step)


def test_a_parameter_documented_under_another_step_does_not_count(tmp_path):
    """The check reads each step's own section: move `enforce` from `evaluate`'s table to
    `publish`'s, or `n` from `sample`'s row to a row for `filter`, and it fails."""
    text = WORKFLOWS_MD.read_text()
    check_step_params("evaluate", WORKFLOWS_MD)
    row = next(line for line in text.splitlines() if line.startswith("| `enforce` |"))
    anchor = next(line for line in text.splitlines() if line.startswith("| `row_id` |"))
    moved = tmp_path / "workflows.md"
    moved.write_text(text.replace(row + "\n", "", 1).replace(anchor, anchor + "\n" + row, 1))
    with pytest.raises(AssertionError, match=r"not documented there: \['enforce'\]"):
        check_step_params("evaluate", moved)
    with pytest.raises(AssertionError, match=r"does not have: \['enforce'\]"):
        check_step_params("publish", moved)
    n_row = next(line for line in text.splitlines() if line.startswith("| `n` |"))
    moved.write_text(text.replace(n_row, n_row.replace("(`sample`)", "(`filter`)"), 1))
    with pytest.raises(AssertionError, match=r"not documented there: \['n'\]"):
        check_step_params("sample", moved)


def test_every_workflow_file_key_is_documented():
    """The top-level keys in the first YAML block and the step keys in the Steps block of
    docs/workflows.md: exactly those the file format declares (the tables are generated, below)."""
    from anonflow.workflow.model import step_models, workflow_model

    text = WORKFLOWS_MD.read_text()
    top = yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, flags=re.S)[1].replace("{...}", "{}"))
    assert set(top) == {f.alias or n for n, f in workflow_model().model_fields.items()}
    by = {s.heading: s for s in sections(WORKFLOWS_MD)}
    step_block = re.search(r"```yaml\n(.*?)```", by["Steps"].own, flags=re.S)[1]
    declared = {f.alias or n for n, f in step_models()["plugin"].model_fields.items()}
    assert set(next(iter(yaml.safe_load(step_block)["steps"].values()))) == declared


def test_the_reference_tables_are_generated_from_the_file_format():
    """Every table between ``<!-- schema:NAME -->`` markers in docs/workflows.md is what the
    declaration generates now (regenerate with ``python -m anonflow.workflow.reference``), and
    every generated table is shown there."""
    from anonflow.workflow.reference import MARKER, reference_tables, render_docs

    text = WORKFLOWS_MD.read_text()
    assert render_docs(text) == text, "docs/workflows.md is stale: run python -m anonflow.workflow.reference"
    assert {m["name"] for m in MARKER.finditer(text)} == set(reference_tables())


def test_a_stale_reference_table_is_caught(tmp_path):
    from anonflow.workflow.reference import render_docs

    text = WORKFLOWS_MD.read_text()
    stale = text.replace("| `threads` |", "| `thread` |", 1)
    assert stale != text and render_docs(stale) == text


# -- first-party plugins --------------------------------------------------------------------

def first_party():
    from anonflow.registry import get_registry

    return [r for r in get_registry() if r.module.split(".")[0] == "anonflow_std"]


def _row_is_for(cells: dict[str, str], plugin: str) -> bool:
    """A table with a `plugins` (or `publishers`) column documents a row for the plugins it
    names there ("all": every plugin of the section)."""
    for col in ("plugins", "publishers"):
        if col in cells:
            return cells[col].strip() == "all" or plugin in code_names(cells[col])
    return True


def _without_tables(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("|"))


def documented_plugin_params(kind: str, name: str, docs=PLUGIN_DOCS) -> set[str] | None:
    """The parameters documented in the plugin's own section(s): a row of a parameter table
    there (for this plugin, when the table has a plugins column), or a code span `param` /
    `param: value` in the section's text. None: the plugin has no section."""
    if kind == "hierarchy":
        # builders are rows of the `hierarchy` step's builder table: | `arx` | `file`, ... |
        section = step_section("hierarchy")
        for header, rows in tables(section.own):
            if header and header[0].lower() == "builder":
                for row in rows:
                    if code_names(row[0]) == [name]:
                        return {n.split(" ")[0] for n in code_names(row[1])}
        return None
    found = [s for path in docs for s in sections(path) if name in code_names(s.heading)]
    if not found:
        return None
    out: set[str] = set()
    for s in found:
        for names, cells in param_rows(s.body):
            if _row_is_for(cells, name):
                out.update(names)
        out.update(n.split(":")[0].strip() for n in code_names(_without_fences(_without_tables(s.body))))
    return out


@pytest.mark.parametrize("plugin", first_party(), ids=lambda r: f"{r.kind}:{r.name}")
def test_every_first_party_plugin_parameter_is_documented_in_its_own_section(plugin):
    documented = documented_plugin_params(plugin.kind, plugin.name)
    where = "docs/workflows.md's hierarchy builder table" if plugin.kind == "hierarchy" else \
        "docs/algorithms.md, docs/workflows.md or docs/releases.md"
    assert documented is not None, f"{plugin.kind} `{plugin.name}` has no section of its own in {where}"
    missing = sorted(p.name for p in plugin.obj.params if p.name not in documented)
    assert not missing, f"{plugin.kind} `{plugin.name}`: parameters not documented in its section: {missing}"


def test_a_plugin_parameter_documented_under_another_plugin_does_not_count(tmp_path):
    """Take `standardize` out of `mdav`'s section, leaving it in the MDAV family's table and
    `v-mdav`'s section: `mdav` then fails the check, `v-mdav` still passes."""
    doc = DOCS / "algorithms.md"
    text = doc.read_text()
    mdav = next(s for s in sections(doc) if "mdav" in code_names(s.heading))
    stripped = "\n".join(line for line in mdav.own.splitlines() if not line.startswith("| `standardize` |"))
    stripped = re.sub(r"`standardize[^`]*`", "standardization", stripped)
    path = tmp_path / "algorithms.md"
    path.write_text(text.replace(mdav.own, stripped, 1))
    assert "standardize" in documented_plugin_params("algorithm", "mdav")
    assert "standardize" not in documented_plugin_params("algorithm", "mdav", docs=(path,))
    assert "standardize" in documented_plugin_params("algorithm", "v-mdav", docs=(path,))


def _tables_with_plugins():
    """Every parameter table in a section whose heading (or an enclosing heading) names
    first-party plugins: (where, the plugins, header cells, row cells)."""
    by_name = {r.name: r for r in first_party() if r.kind != "hierarchy"}
    for path in PLUGIN_DOCS:
        for s in sections(path):
            # the plugins of the innermost heading that names any
            named = next(([n for n in code_names(h) if n in by_name] for h in (s.heading, *reversed(s.parents))
                          if any(n in by_name for n in code_names(h))), [])
            if not named:
                continue
            for names, cells in param_rows(s.own):
                yield f"{path.name} ({s.heading})", [by_name[n] for n in named], names, cells


def test_documented_plugin_parameters_exist_with_their_defaults():
    """Every row of a plugin's parameter table is a parameter of one of the plugins the
    section (and the row's plugins column) names, with the default the code declares."""
    checked = 0
    for where, plugins, names, cells in _tables_with_plugins():
        for name in names:
            owners = [r for r in plugins if _row_is_for(cells, r.name) and name in {p.name for p in r.obj.params}]
            assert owners, f"{where}: `{name}` is not a parameter of {', '.join(r.name for r in plugins)}"
            for r in owners:
                p = next(p for p in r.obj.params if p.name == name)
                if "default" in cells:
                    assert defaults_agree(cells["default"], names, name, p.default), \
                        f"{where}: `{r.name}`.`{name}` documented default {cells['default']!r}, the code's is {p.default!r}"
                    checked += 1
    assert checked > 40


def test_lattice_model_list_names_every_model_the_lattice_can_search():
    """docs/algorithms.md's lattice `model` row and docs/plugins.md's "In anonflow" list name
    every registered privacy check the lattice accepts (as the lattice itself decides)."""
    from anonflow.registry import get_registry
    from anonflow_std.generalization.lattice import _offers_partition

    reg = get_registry()
    models = sorted(n for n in reg.names("metric")
                    if reg.get("metric", n).obj.category == "privacy" and _offers_partition(reg.get("metric", n).obj))
    assert {"k-anonymity", "l-diversity", "p-sensitive-k-anonymity"} <= set(models)
    lattice = next(s for s in sections(DOCS / "algorithms.md") if "lattice" in code_names(s.heading))
    row = next(cells for names, cells in param_rows(lattice.own) if names == ["model"])
    assert sorted(set(code_names(row["meaning"])) & set(models)) == models, row["meaning"]
    plugins_md = next(s for s in sections(DOCS / "plugins.md") if "partition_holds" in s.heading)
    listed = plugins_md.own[plugins_md.own.index("In anonflow:"):]
    assert sorted(set(code_names(listed)) & set(models)) == models, listed


def _steps_in_yaml_examples(path: Path):
    """(step name, uses, with) of every step in the YAML examples of a Markdown file."""
    for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), flags=re.S):
        try:
            data = yaml.safe_load(block)
        except yaml.YAMLError:
            continue  # an excerpt with placeholders
        stack = [data]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                for key, value in node.items():
                    if isinstance(value, dict) and isinstance(value.get("uses"), str):
                        yield key, value["uses"], value.get("with") or {}
                    stack.append(value)


@pytest.mark.parametrize("path", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_yaml_examples_use_declared_parameters(path):
    """Every `with:` of an example step validates against its step's or plugin's declaration."""
    from anonflow.params import validate_params
    from anonflow.registry import get_registry

    reg = get_registry()
    for step, uses, given in _steps_in_yaml_examples(path):
        if uses == "hierarchy":
            continue  # its entries are columns, each a builder with its own parameters
        if uses in BUILTINS:
            declared = BUILTINS[uses].params
        elif reg.has("algorithm", uses):
            declared = reg.get("algorithm", uses).obj.params
        else:
            continue  # a third party's plugin (docs/plugin-example)
        if uses == "publish":
            publisher = reg.get("publisher", given["publisher"]).obj
            declared = (*declared, *publisher.params)
        validate_params(declared, given)  # raises ParamError naming the parameter


# -- README -----------------------------------------------------------------------------------

def readme_section(title: str) -> Section:
    return next(s for s in sections(README) if s.heading == title)


def test_readme_example_workflow_is_the_shipped_file():
    section = readme_section("A workflow file")
    assert f"`{SHIPPED_EXAMPLE.relative_to(ROOT)}`" in section.own
    block = re.search(r"```yaml\n(.*?)```", section.own, flags=re.S)[1]
    assert yaml.safe_load(block) == yaml.safe_load(SHIPPED_EXAMPLE.read_text())


def test_readme_quotes_what_the_shipped_workflow_gives(tmp_path):
    """Run the README's workflow (about 3 s) and compare with the figures and files it quotes."""
    from anonflow.runner import Runner
    from anonflow.workflow.spec import load_workflow
    from anonflow.store import Store

    text = readme_section("Try it (fresh machine, Python >= 3.11)").own
    assert f"anonflow run {SHIPPED_EXAMPLE.relative_to(ROOT)}" in text
    il = re.search(r"`scores\.sse-il` ≈ ([0-9.]+) %", text)[1]
    k = re.search(r"`scores\.k-anonymity` = ([0-9]+)", text)[1]
    store = Store(tmp_path / "store.duckdb")
    try:
        result = Runner(store).run(load_workflow(SHIPPED_EXAMPLE, []), output_dir=tmp_path / "out")
    finally:
        store.close()
    assert f"{result.metrics['scores.sse-il']:.{len(il.split('.')[1])}f}" == il
    assert result.metrics["scores.k-anonymity"] == int(k)
    for quoted in ("census-mdav.parquet", "census-mdav.csv", "census-mdav-release/manifest.json",
                   "census-mdav-release/report.html"):
        assert (tmp_path / "out" / quoted).is_file(), quoted


def _command_lines(path: Path):
    """``anonflow ...`` command lines in the bash blocks of a Markdown file (continuations
    joined, comments dropped) and ``anonflow ...`` code spans in its text."""
    text = path.read_text()
    for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.S):
        block = block.replace("\\\n", " ")
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            for part in re.split(r"&&|\|", line):
                part = part.strip()
                if part.startswith("anonflow "):
                    yield part
    for span in re.findall(r"`(anonflow [^`]+)`", _without_fences(text)):
        yield span


def _without_fences(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _options(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)} \
        | {"-h", "--help"}


@pytest.mark.parametrize("path", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_command_lines_use_options_their_command_has(path):
    """`anonflow run ... --debug` would fail: --debug belongs to `anonflow` itself."""
    from anonflow.cli import main

    checked = 0
    for line in _command_lines(path):
        try:
            words = shlex.split(line.replace("...", ""))[1:]
        except ValueError:
            continue
        command: click.Command = main
        for word in words:
            bare = word.split("=")[0].strip("[]")
            if not bare.startswith("-") or bare in ("-", "--"):
                if isinstance(command, click.Group) and word in command.commands:
                    command = command.commands[word]
                continue
            if bare.isupper() or not re.fullmatch(r"--?[a-z][a-z-]*", bare):
                continue  # a placeholder (FILE, RUN_ID, STEP.PARAM=VALUE), not an option
            assert bare in _options(command), \
                f"{path.name}: `{line}`: `{command.name}` has no option {bare}"
            checked += 1
    if path == README:
        assert checked >= 5


def test_readme_run_synopsis_matches_the_cli():
    from anonflow.cli import main

    text = README.read_text()
    synopsis = re.search(r"`anonflow run FILE ([^`]*)`", text)[1]
    documented = set(re.findall(r"\[(--[a-z-]+)", synopsis))
    declared = {o for p in main.commands["run"].params if isinstance(p, click.Option) for o in p.opts
                if o.startswith("--")}
    assert documented == declared
    assert "--debug" in {o for p in main.params for o in getattr(p, "opts", ())}
    assert "anonflow --debug " in text


# -- the store ----------------------------------------------------------------------------

def test_store_schema_doc_is_rendered_from_the_migrations():
    """Regenerate with ANONFLOW_REGEN_DOCS=1 python -m pytest tests/docs/test_docs.py."""
    path = DOCS / "store.md"
    text = path.read_text()
    if os.environ.get("ANONFLOW_REGEN_DOCS"):
        marker = "if it drifts.\n\n"
        text = text[: text.index(marker) + len(marker)] + schema_markdown()
        path.write_text(text)
    assert schema_markdown() in text


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()):
        assert (README.parent / target).exists(), target


def test_readme_holds_the_commands_ci_runs():
    """.ci/run greps README.md for its test command; a README edit must not lose it."""
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    test_cmd = re.search(r'^test_cmd="(.+)"$', ci, re.M).group(1)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert test_cmd in readme
    assert "pip install . && anonflow run workflows/" in readme  # command 1: a real workflow on shipped data
