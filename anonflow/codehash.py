"""Digests of the code that runs a step, so that changed code never reuses a cached result.

A step's fingerprint (the key of the step cache) holds the digest of anonflow's own source
and of the package of every plugin the step uses. A plugin's *package* is the top-level
package its registering module belongs to, found from the module itself (``__file__`` or
``__path__``), so an editable install digests the working copy the module is imported from.
The digest covers every file under that folder (its path relative to the folder and its
bytes) except ``__pycache__`` folders and compiled ``.pyc`` files: Python sources, and also
compiled extensions, SQL or data files the code reads. A module that is not in a package is
digested alone.

Digests are computed once per process (a plugin's code does not change under a running
interpreter: Python would not re-import it either).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from functools import lru_cache
from pathlib import Path

#: files that are produced from the sources, not part of them
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def _files(root: Path) -> list[Path]:
    out: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        out += [Path(folder) / n for n in names if not n.endswith(_SKIP_SUFFIXES)]
    return sorted(out)


def digest_files(root: Path, files: list[Path]) -> str:
    """sha256 over each file's path relative to ``root`` and its bytes, in path order."""
    h = hashlib.sha256()
    for f in files:
        rel = f.relative_to(root).as_posix() if f != root else f.name
        try:
            data = f.read_bytes()
        except OSError:  # a dangling link or an unreadable file: its name still counts
            data = b"\0unreadable"
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def package_root(module_name: str) -> tuple[Path, bool] | None:
    """The folder of the top-level package ``module_name`` belongs to (``(folder, True)``),
    or the module's own file when it is not in a package (``(file, False)``); None when the
    module has no file (built in, or only in memory)."""
    top = module_name.split(".", 1)[0]
    mod = sys.modules.get(top)
    if mod is None:
        try:
            mod = importlib.import_module(top)
        except Exception:  # noqa: BLE001 - a module that cannot be imported has no digest
            return None
    paths = list(getattr(mod, "__path__", []) or [])
    if paths:
        # a namespace package may span several folders: the one holding the module itself
        own = sys.modules.get(module_name)
        own_file = getattr(own, "__file__", None)
        for p in paths:
            if own_file and os.path.abspath(own_file).startswith(os.path.abspath(p) + os.sep):
                return Path(p).resolve(), True
        return Path(paths[0]).resolve(), True
    file = getattr(mod, "__file__", None)
    return (Path(file).resolve(), False) if file else None


@lru_cache(maxsize=None)
def module_digest(module_name: str) -> str:
    """The digest of the code ``module_name`` runs with (see the module docstring); ``""``
    when it has no source on disk."""
    found = package_root(module_name)
    if found is None:
        return ""
    root, is_package = found
    if is_package:
        return digest_files(root, _files(root))
    return digest_files(root.parent, [root])


def code_digest(*modules: str) -> str:
    """One digest for the packages of ``modules`` (each top-level package counted once)."""
    tops = sorted({m.split(".", 1)[0] for m in modules if m})
    if len(tops) == 1:
        return module_digest(tops[0])
    parts = [f"{t}:{module_digest(t)}" for t in tops]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def engine_digest() -> str:
    """The digest of anonflow's own package."""
    return module_digest(__name__)


def short(digest: str) -> str:
    """The first 12 hex digits, as ``anonflow plugins`` shows a digest."""
    return digest[:12] if digest else "-"
