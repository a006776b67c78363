"""File permissions: what holds confidential data is readable by its owner only; what is
published gets the permissions the user's umask gives a new file.

The store holds the original microdata. DuckDB creates its file, its write-ahead log (deleted
at every checkpoint and created again at the next write) and its spill files itself, with the
process's umask; it has no setting for their mode. So while a store is open for writing
(:func:`owner_only`), anonflow sets the process umask to ``077``: every file created then is
``0600`` and every folder ``0700``, whoever creates it (DuckDB, a Dask worker started meanwhile,
a publisher). The user's own umask is restored when the last such store closes.

Published files are not confidential: :func:`make_ordinary` gives them (and the folders a run
created for them) the modes the user's umask would have given (``0666 & ~umask``,
``0777 & ~umask``); the output guard does so when a run's publishing is committed.

The umask is process-wide: a program that runs anonflow through the Python API and creates
files in other threads during a run creates them owner-only too (documented in docs/api.md).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path
from typing import Iterator

#: the umask while a store is open for writing: group and others get nothing
PRIVATE_UMASK = 0o077

_lock = threading.Lock()
_depth = 0
_saved: int | None = None


def _current_umask() -> int:
    with _lock:
        if _saved is not None:
            return _saved
        mask = os.umask(0o077)  # reading the umask means setting it: set the safe value meanwhile
        os.umask(mask)
        return mask


def ordinary_umask() -> int:
    """The umask the user set (not the private one anonflow sets while a store is open)."""
    return _current_umask()


@contextlib.contextmanager
def owner_only() -> Iterator[None]:
    """Every file created inside is readable by its owner only (umask ``077``), nested and
    thread-safe: the user's umask comes back when the outermost block ends."""
    enter_private()
    try:
        yield
    finally:
        leave_private()


def enter_private() -> None:
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = os.umask(PRIVATE_UMASK)
        _depth += 1


def leave_private() -> None:
    global _depth, _saved
    with _lock:
        if _depth == 0:
            return
        _depth -= 1
        if _depth == 0 and _saved is not None:
            os.umask(_saved)
            _saved = None


def make_ordinary(path: Path | str) -> None:
    """Give ``path`` (a file, or a folder and everything in it) the modes a new file or folder
    gets under the user's umask. Symbolic links are left alone (and not followed)."""
    mask = ordinary_umask()
    path = Path(path)
    if path.is_symlink() or not path.exists():
        return
    if path.is_file():
        os.chmod(path, 0o666 & ~mask)
        return
    for root, dirs, files in os.walk(path, followlinks=False):
        os.chmod(root, 0o777 & ~mask)
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                os.chmod(p, 0o666 & ~mask)


def make_ordinary_folder(path: Path | str) -> None:
    """Give one folder (not what it holds) the mode a new folder gets under the user's umask."""
    os.chmod(path, 0o777 & ~ordinary_umask())


def open_to_others(path: Path | str) -> str | None:
    """A warning if ``path`` (a store) can be read or written by its group or by others, with
    the fix; None if it is owner-only (or absent)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    if not mode & 0o077:
        return None
    who = " and ".join(w for w, bits in (("its group", 0o070), ("other users", 0o007)) if mode & bits)
    return (f"the store {path} holds the original records and is open to {who} (mode {mode:04o}); "
            f"make it owner-only: chmod 600 '{path}'")
