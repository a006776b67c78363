"""docs/cli.md, the command-line reference, generated from the commands' click declarations
(as docs/workflows.md's tables are from the workflow file's declaration): every command and
subcommand with its usage line, its help text and a table of its options.

``python -m anonflow.cli.clidocs`` writes docs/cli.md anew; a test fails when it is stale."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Iterator

import click

from . import main

#: docs/cli.md, beside the package in a source checkout
DOCS_FILE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

HEAD = """# Command-line reference

<!-- Generated from the commands' declarations by `python -m anonflow.cli.clidocs`; do not edit by hand
(tests/cli/test_reference.py fails when this page is stale). -->

Every command of `anonflow`, with its options, as `anonflow COMMAND --help` prints them. Errors are one
line on stderr (`Error: <where>: <what>`) with exit code 2 for invalid input or workflows and 1 for failed
runs; `anonflow --debug COMMAND ...` shows the traceback instead.
"""


def _commands(group: click.Group, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group, info_name=" ".join(path))
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _option_row(ctx: click.Context, param: click.Option) -> str:
    names = ", ".join(f"`{o}`" for o in (*param.opts, *param.secondary_opts))
    if not param.is_flag:
        names += f" `{param.make_metavar(ctx) if param.metavar is None else param.metavar}`"
    text = param.help or ""
    if param.multiple:
        text += " (repeatable)" if "repeatable" not in text else ""
    if param.show_default and param.default is not None and not param.is_flag:
        text += f" (default: `{param.default}`)"
    return f"| {names} | {_cell(text)} |"


def _section(path: tuple[str, ...], command: click.Command) -> str:
    ctx = click.Context(command, info_name=" ".join(path))
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"## `{' '.join(path)}`", "", "```", f"{' '.join(path)} {usage}".rstrip(), "```", ""]
    help_text = inspect.cleandoc(command.help or command.short_help or "")
    if help_text:
        lines += [help_text, ""]
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if options:
        lines += ["| option | meaning |", "| --- | --- |", *(_option_row(ctx, p) for p in options), ""]
    if isinstance(command, click.Group):
        subs = [n for n in command.list_commands(ctx)]
        lines += ["Subcommands: " + ", ".join(f"`{' '.join(path)} {n}`" for n in subs) + ".", ""]
    return "\n".join(lines)


def render() -> str:
    """The text of docs/cli.md, from the declarations of :data:`anonflow.cli.main`'s commands."""
    parts = [HEAD, _section(("anonflow",), main)]
    parts += [_section(path, command) for path, command in _commands(main, ("anonflow",))]
    return "\n".join(parts).rstrip() + "\n"


def _main() -> None:  # pragma: no cover - a maintainer's command
    """``python -m anonflow.cli.clidocs``: write docs/cli.md anew."""
    DOCS_FILE.write_text(render(), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    _main()
