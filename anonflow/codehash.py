"""Digests of the code that runs a step, so that changed code never reuses a cached result.

A step's fingerprint (the key of the step cache) holds the digest of anonflow's own code and
of the code of every plugin the step uses. The code of a plugin is every top-level module and
package of

* the module that registered it and the one that defines its class, and
* every distribution these come from, and the one its entry point belongs to: each
  top-level name the distribution installs (``importlib.metadata``: the files of its
  ``RECORD``, ``top_level.txt``), so a helper in ``py-modules`` or a second package of the
  same distribution counts as much as the entry point's own package. An editable install
  (``pip install -e``) lists no sources in its ``RECORD``, only a ``.pth`` file or an
  import finder: the names come from the finder's mapping (setuptools), or from the
  modules and packages in the folders the ``.pth`` file puts on ``sys.path``;
* the distributions those require (``Requires-Dist``, transitively, not optional extras,
  not anonflow's own): one installed editable by the digest of its names, as above, any
  other by its version (:func:`installed_digest`).

Each top-level name is digested where Python imports it from (the module already imported,
else ``importlib.util.find_spec``), so a working copy on ``PYTHONPATH`` or an editable
install digests the files that actually run: a package's folder is digested whole (every
file's path relative to the folder and its bytes, except ``__pycache__`` folders and
compiled ``.pyc`` files: Python sources, and also compiled extensions, SQL or data files
the code reads), a module alone. The files that only locate the code (``.pth`` files,
editable finders, the ``.dist-info`` folder) are not digested: they hold absolute paths, and
a digest must not change when the same code is installed elsewhere.

Digests are computed once per process (a plugin's code does not change under a running
interpreter: Python would not re-import it either); :func:`clear_caches` forgets them.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Iterable

#: the distribution name at the start of a requirement (PEP 508)
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
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


def package_roots(module_name: str) -> list[tuple[Path, bool]]:
    """Where the top-level package of ``module_name`` is imported from: its folder
    (``(folder, True)``), or the module's own file when it is not in a package (``(file,
    False)``). A namespace package may span several folders: the one holding
    ``module_name`` when that is imported, else all of them. Empty when the module has no
    file (built in, or only in memory) or cannot be found. Nothing is imported: a name not
    imported yet is looked up with ``importlib.util.find_spec``."""
    top = module_name.split(".", 1)[0]
    mod = sys.modules.get(top)
    if mod is not None:
        paths = list(getattr(mod, "__path__", []) or [])
        file = getattr(mod, "__file__", None)
    else:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return []
        if spec is None:
            return []
        paths = list(spec.submodule_search_locations or [])
        file = spec.origin if spec.has_location else None
    if paths:
        own = sys.modules.get(module_name) if module_name != top else None
        own_file = getattr(own, "__file__", None)
        for p in paths:
            if own_file and os.path.abspath(own_file).startswith(os.path.abspath(p) + os.sep):
                return [(Path(p).resolve(), True)]
        return [(Path(p).resolve(), True) for p in (paths if file is None else paths[:1])]
    return [(Path(file).resolve(), False)] if file else []


@lru_cache(maxsize=None)
def module_digest(module_name: str) -> str:
    """The digest of the code ``module_name`` runs with (see the module docstring); ``""``
    when it has no source on disk."""
    digests = sorted(digest_files(root, _files(root)) if is_package else digest_files(root.parent, [root])
                     for root, is_package in package_roots(module_name))
    if len(digests) <= 1:
        return digests[0] if digests else ""
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def _importable(name: str) -> bool:
    return name.isidentifier() and not name.startswith("__editable__")


def _module_name(filename: str) -> str | None:
    """The module a file directly on ``sys.path`` defines (``helper.py`` -> ``helper``), if
    it is one Python can import."""
    for suffix in sorted(importlib.machinery.all_suffixes(), key=len, reverse=True):
        if filename.endswith(suffix):
            name = filename[: -len(suffix)].split(".", 1)[0]
            return name if _importable(name) else None
    return None


def _names_in_folder(folder: Path) -> set[str]:
    """The top-level modules and regular packages in a folder a ``.pth`` file puts on
    ``sys.path`` (an editable install that is not setuptools')."""
    out: set[str] = set()
    try:
        entries = list(folder.iterdir())
    except OSError:
        return out
    for entry in entries:
        if entry.is_dir():
            if _importable(entry.name) and (entry / "__init__.py").is_file():
                out.add(entry.name)
        else:
            name = _module_name(entry.name)
            if name:
                out.add(name)
    return out


def _finder_mapping(path: Path) -> set[str]:
    """The top-level names of a setuptools editable finder (its ``MAPPING`` dict)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else \
            (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "MAPPING" and node.value is not None:
            try:
                mapping = ast.literal_eval(node.value)
            except ValueError:
                return set()
            return {str(k).split(".", 1)[0] for k in mapping if _importable(str(k).split(".", 1)[0])}
    return set()


@lru_cache(maxsize=None)
def distribution_names(dist_name: str) -> frozenset[str]:
    """The top-level module and package names the installed distribution ``dist_name``
    provides (see the module docstring); empty when it is not installed."""
    try:
        dist = metadata.distribution(dist_name)
    except (metadata.PackageNotFoundError, ValueError):
        return frozenset()
    names: set[str] = set()
    for f in dist.files or []:
        parts = f.parts
        if not parts or parts[0] == ".." or parts[0].endswith((".dist-info", ".egg-info", ".data")) \
                or parts[0] == "__pycache__":
            continue
        if len(parts) > 1:
            if _importable(parts[0]):
                names.add(parts[0])
            continue
        filename = parts[0]
        located = Path(str(dist.locate_file(f)))
        if filename.endswith(".pth"):
            try:
                lines = located.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    folder = Path(line) if os.path.isabs(line) else located.parent / line
                    names |= _names_in_folder(folder)
        elif filename.startswith("__editable__") and filename.endswith(".py"):
            names |= _finder_mapping(located)
        else:
            name = _module_name(filename)
            if name:
                names.add(name)
    top_level = dist.read_text("top_level.txt") or ""
    names |= {n.strip() for n in top_level.splitlines() if _importable(n.strip())}
    return frozenset(names)


@lru_cache(maxsize=None)
def distributions_of(module_name: str) -> tuple[str, ...]:
    """The installed distribution that provides the top-level package of ``module_name``,
    when it is named like it (``anonflow`` -> ``anonflow``; a plugin's entry point names its
    own distribution anyway). Looked up by name: listing which distribution provides every
    installed package (``importlib.metadata.packages_distributions``) reads every
    installed ``RECORD`` and would cost every run a second or more."""
    top = module_name.split(".", 1)[0]
    for candidate in dict.fromkeys((top, top.replace("_", "-"))):
        if top in distribution_names(candidate):
            return (candidate,)
    return ()


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _editable(dist: metadata.Distribution) -> bool:
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    return bool(isinstance(info, dict) and (info.get("dir_info") or {}).get("editable"))


def _headers(dist: metadata.Distribution, field: str) -> list[str]:
    """The values of one field of a distribution's ``METADATA`` header, read as text (the
    email parser behind ``Distribution.requires`` takes tens of milliseconds a file)."""
    out: list[str] = []
    key = field.lower() + ":"
    for line in (dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "").splitlines():
        if not line:
            break  # the header ends at the first empty line (continuation lines are indented)
        if line.lower().startswith(key):
            out.append(line[len(key):].strip())
    return out


@lru_cache(maxsize=None)
def requirements(dist_name: str) -> tuple[str, ...]:
    """The installed distributions ``dist_name`` requires, directly or through others (not
    its optional extras), by canonical name; itself left out."""
    seen: set[str] = set()
    todo = [dist_name]
    while todo:
        try:
            dist = metadata.distribution(todo.pop())
        except (metadata.PackageNotFoundError, ValueError):
            continue
        for req in _headers(dist, "Requires-Dist"):
            spec, _, marker = req.partition(";")
            if "extra" in marker:
                continue
            found = _REQUIREMENT.match(spec)
            name = _canonical(found.group(1)) if found else ""
            if name and name not in seen:
                seen.add(name)
                todo.append(name)
    seen.discard(_canonical(dist_name))
    return tuple(sorted(seen))


@lru_cache(maxsize=None)
def installed_digest(dist_name: str) -> str:
    """The code of a distribution a plugin requires, cheaply: an editable install's names are
    digested as a plugin's are (its working copy may change at any time), an installed one
    counts by its version (reading every file of numpy, pyarrow or DuckDB on every run would
    cost seconds). ``""`` when it is not installed."""
    try:
        dist = metadata.distribution(dist_name)
    except (metadata.PackageNotFoundError, ValueError):
        return ""
    if _editable(dist):
        names = sorted(distribution_names(dist_name))
        return hashlib.sha256("\n".join(f"{t}:{module_digest(t)}" for t in names).encode()).hexdigest()
    return "version " + " ".join(_headers(dist, "Version"))


def code_names(modules: Iterable[str], distributions: Iterable[str] = ()) -> list[str]:
    """The top-level names whose code :func:`code_digest` covers: those of ``modules``, and
    every name of ``distributions`` and of the distributions ``modules`` come from."""
    tops = {m.split(".", 1)[0] for m in modules if m}
    names = set(tops)
    for d in _own_distributions(tops, distributions):
        names |= distribution_names(d)
    return sorted(names)


def _own_distributions(tops: set[str], distributions: Iterable[str]) -> set[str]:
    dists = {_canonical(d) for d in distributions}
    for top in tops:
        dists.update(_canonical(d) for d in distributions_of(top))
    return dists


def code_digest(*modules: str, distributions: Iterable[str] = ()) -> str:
    """One digest of the code of ``modules`` and of the distributions they come from (and of
    ``distributions``): see :func:`code_names`; each top-level name is digested once. The
    distributions these require (not their extras, and not anonflow's own, which the engine
    digest covers) count by :func:`installed_digest`."""
    tops = code_names(modules, distributions)
    own = _own_distributions({m.split(".", 1)[0] for m in modules if m}, distributions)
    engine = {_canonical(d) for d in distributions_of(__name__)}
    required = sorted({r for d in own for r in requirements(d)} - own - engine)
    parts = [f"{t}:{module_digest(t)}" for t in tops] + [f"requires {r}:{installed_digest(r)}" for r in required]
    if len(parts) == 1:
        return module_digest(tops[0])
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def engine_digest() -> str:
    """The digest of anonflow's own code: its package and, when it is installed, every
    top-level name of its distribution."""
    return code_digest(__name__)


def clear_caches() -> None:
    """Forget every digest and distribution listing (code was changed or installed)."""
    module_digest.cache_clear()
    distribution_names.cache_clear()
    distributions_of.cache_clear()
    requirements.cache_clear()
    installed_digest.cache_clear()


def short(digest: str) -> str:
    """The first 12 hex digits, as ``anonflow plugins`` shows a digest."""
    return digest[:12] if digest else "-"
