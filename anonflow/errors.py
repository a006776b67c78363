"""One exception tree for anonflow.

The engine and plugins raise these; only :mod:`anonflow.cli` turns them into one-line
messages and exit codes. ``InputError`` (exit 2) means the user's workflow, data or
parameters are wrong; ``RunError`` (exit 1) means a valid workflow failed while running
(a threshold not met, a plugin crashed).
"""

from __future__ import annotations


class AnonflowError(Exception):
    """Base class of every error anonflow reports to a user."""

    exit_code = 1

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class InputError(AnonflowError):
    """The workflow file, a data file, a column or a parameter is not what was expected."""

    exit_code = 2


class WorkflowError(InputError):
    """The workflow file itself is invalid (syntax, graph, unknown plugin, bad parameter)."""


class BudgetError(InputError):
    """A run would spend more differential privacy on a source than the budget its workflow
    declares allows (the store's privacy ledger counts what earlier runs spent): refused
    before any record is read into the store."""


class PluginError(AnonflowError):
    """A plugin is broken: bad registration, duplicate name, or a crash inside it."""


class RunError(AnonflowError):
    """A valid workflow failed while running (for example a metric threshold was not met)."""


class StoreError(AnonflowError):
    """The DuckDB store cannot be opened or is not an anonflow store."""


class PurgedError(StoreError):
    """A table's records were purged from the store (``anonflow purge``, ``retain:``); its
    lineage and hashes are kept."""


class AnonflowWarning(UserWarning):
    """Something the user should fix that does not stop the command (the CLI prints it as
    one line, ``anonflow: warning: ...``, on stderr): a store open to other users, say."""
