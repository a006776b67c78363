"""The ``anonflow`` command line. Nothing imports this package.

It parses and prints; the work is in :class:`anonflow.session.Session` (run, plan, verify
and apply) and in the store. The commands live by group: :mod:`.running` (``run``,
``plan``), :mod:`.records` (``runs``, ``lineage``, ``report``, ``hierarchy``, ``purge``,
``plugins``, ``schema``), :mod:`.budgets` (``budget``), :mod:`.releases` (``verify``, ``apply``,
``keygen``) and :mod:`.scaffold` (``new-plugin``). docs/cli.md is generated from their declarations
(:mod:`.clidocs`).

Errors are one line on stderr (``Error: <where>: <what>``) with exit code 2 for invalid
input or workflows and 1 for failed runs; ``--debug`` (or ``ANONFLOW_DEBUG=1``) re-raises
with the traceback (:func:`.shared.guard`).
"""

from __future__ import annotations

import click

from .. import __version__
from .budgets import budget
from .records import hierarchy, lineage, plugins, purge, report, runs, schema
from .releases import apply_cmd, keygen, verify
from .running import plan, run
from .scaffold import new_plugin


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="anonflow")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
def main(debug: bool) -> None:
    """anonflow: declarative, audited anonymization of tabular microdata."""


for _command in (run, plan, plugins, runs, budget, purge, lineage, verify, apply_cmd, keygen, report, hierarchy,
                 schema, new_plugin):
    main.add_command(_command)

__all__ = ["main"]
