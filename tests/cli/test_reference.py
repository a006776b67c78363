"""docs/cli.md is generated from the commands' click declarations (anonflow.cli.clidocs), as
docs/workflows.md's tables are from the workflow file's: a changed option or help text that is
not regenerated fails here."""

from anonflow.cli import main
from anonflow.cli.clidocs import DOCS_FILE, render


def test_cli_reference_is_current():
    assert DOCS_FILE.read_text(encoding="utf-8") == render(), \
        "docs/cli.md is stale: run python -m anonflow.cli.clidocs"


def test_cli_reference_names_every_command_and_option():
    text = render()
    for name, command in main.commands.items():
        assert f"## `anonflow {name}`" in text
        for param in command.params:
            for opt in getattr(param, "opts", ()):
                if opt.startswith("-"):
                    assert f"`{opt}`" in text, f"anonflow {name} {opt} is not in docs/cli.md"


def test_a_changed_declaration_makes_the_reference_stale(monkeypatch):
    """The check can fail: a help text changed in the declaration changes the page."""
    before = render()
    monkeypatch.setattr(main.commands["purge"], "help", "Something else entirely.")
    assert render() != before and "Something else entirely." in render()
