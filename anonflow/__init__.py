"""anonflow: privacy-preserving publication of tabular microdata.

The Python API (``docs/api.md``): :func:`load` a workflow file or build a :class:`Workflow`
in code, :meth:`Workflow.run` it (a :class:`Result`), or :func:`anonymize` a DataFrame in one
call (an :class:`Anonymized`); :func:`purge` a store of its original records. Errors are the engine's: :class:`AnonflowError` and its
subclasses. These names are imported on first use, so ``import anonflow`` stays cheap;
:mod:`anonflow.api` is the API for writing plugins.
"""

from __future__ import annotations

from .errors import AnonflowError, InputError, PluginError, RunError, StoreError, WorkflowError

__version__ = "0.1.0"

# The API's names are looked up on first use (no import of anonflow.workflow_api here, not even
# for type checkers: the engine's modules import __version__ from this package, and an import of
# the API here would close a cycle through the session).
_LAZY = {"load": "workflow_api", "Workflow": "workflow_api", "Result": "workflow_api",
         "Anonymized": "workflow_api", "anonymize": "workflow_api", "purge": "workflow_api", "budget": "workflow_api"}

__all__ = ["AnonflowError", "Anonymized", "InputError", "PluginError", "Result", "RunError", "StoreError",
           "Workflow", "WorkflowError", "anonymize", "budget", "load", "purge", "__version__"]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'anonflow' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
