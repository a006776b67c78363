"""What a run leaves outside the store is journaled first, and removed even if the run is killed.

A run creates things outside the store that hold original records or earlier outputs: work
folders of a partitioned step (``.anonflow-work-*``, in the output folder or ``work_dir``),
the local folder of a Dask LocalCluster and DuckDB's spill folder (in the temporary folder),
and the folder publishing moves earlier outputs aside into (``.anonflow-previous-*``). Before
it creates any of them, the run writes what it is about to create into its **journal**, a
file ``.anonflow-journal-<run>.jsonl`` in the output folder (one JSON object a line, each
flushed to disk before the thing it names is made), and the store records where that file is
(table ``af_journal``). The run holds an exclusive ``flock`` on its journal while it lives.

- A run that ends, succeeded or failed (an error, Ctrl-C, ``SIGTERM``, ``SIGHUP``: see
  :func:`cleanup_on_termination`), removes what it created, puts earlier outputs back if it did
  not publish, and deletes its journal.
- A run that could not (``SIGKILL``, a power cut) leaves its journal. :func:`recover` replays
  it: work, Dask and spill folders are removed, what the run published is removed and the
  earlier outputs are moved back (or, if the run was already committing its outputs, the new
  ones are kept and the moved-aside copies dropped). It runs when the store is next opened for
  writing (every journal ``af_journal`` names) and when a run next publishes into that output
  folder (every journal found there, whichever store it belongs to). A journal whose lock is
  held belongs to a live run and is left alone.

DuckDB's first spill folder, made when a store is opened and before any journal exists, is
named with the process id (:func:`spill_folder`): a store opened later removes those of
processes no longer alive (:func:`remove_dead_spills`).

A journal is read only as a list of paths to clean, and only if it is this user's and
owner-only (a journal planted in a shared folder is ignored); only paths of the kinds anonflow
creates are touched: a folder of this user named as anonflow names them (never a symbolic
link), and outputs inside the journal's own output folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

#: the journal files' names: ``.anonflow-journal-<run id>.jsonl``
JOURNAL_PREFIX = ".anonflow-journal-"
_JOURNAL_NAME = re.compile(re.escape(JOURNAL_PREFIX) + r"[0-9A-Za-z_-]{1,64}\.jsonl")
#: what each kind of folder a journal may name is called (the last part of its path)
FOLDER_NAMES = {
    "work": re.compile(r"\.anonflow-work-.*"),
    "dask": re.compile(r"anonflow-dask-[0-9a-f]+"),
    "spill": re.compile(r"anonflow-spill-[0-9a-f]+"),
    "aside": re.compile(r"\.anonflow-previous-[0-9a-f]+"),
}


def private_folder(parent: Path | str, prefix: str, journal: "Journal | None", kind: str) -> Path:
    """A new owner-only folder ``parent/<prefix><random hex>``, journaled before it is made."""
    parent = Path(parent)
    while True:
        path = parent / f"{prefix}{secrets.token_hex(6)}"
        if journal is not None:
            journal.created(kind, path)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)
        return path


#: the folder a store spills to before any run's journal exists (:func:`spill_folder`)
SPILL_PREFIX = "anonflow-spill-"
_SPILL_OF_PROCESS = re.compile(re.escape(SPILL_PREFIX) + r"p([0-9]{1,10})-[0-9A-Za-z_]+")


def spill_folder(parent: Path | str | None = None) -> str:
    """A new owner-only spill folder for a store this process opens, in ``parent`` (default:
    the system's temporary folder), named with the process id (``anonflow-spill-p<pid>-...``)
    so that :func:`remove_dead_spills` can tell one a killed process left behind. Spill folders
    of a killed process found there are removed first."""
    remove_dead_spills(parent)
    return tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}p{os.getpid()}-", dir=parent)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def remove_dead_spills(parent: Path | str | None = None) -> list[str]:
    """Remove the spill folders (:func:`spill_folder`) in ``parent`` that belong to this user
    and to a process that no longer lives: a store opened by a process killed with ``SIGKILL``
    never closed, and DuckDB may have spilled original records there. Never a symbolic link,
    never another user's folder, never a live process's (a reused process id keeps its
    folder: left, not wrongly removed). Returns what was removed."""
    folder = str(parent) if parent is not None else tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _SPILL_OF_PROCESS.fullmatch(entry.name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or _alive(int(m.group(1))):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(entry.path)
    return removed


class Journal:
    """One run's journal (see the module docstring), created and locked in ``folder``."""

    def __init__(self, folder: Path | str, run_id: str, *, store: str | None = None) -> None:
        self.folder = Path(os.path.abspath(folder))
        self.path = self.folder / f"{JOURNAL_PREFIX}{run_id}.jsonl"
        self.run_id = run_id
        self._lock = threading.Lock()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd: int | None = fd
        self._write({"op": "begin", "run": run_id, "store": store, "out": str(self.folder), "pid": os.getpid()})
        fsync_folder(self.folder)

    def _write(self, record: dict[str, Any]) -> None:
        with self._lock:
            if self._fd is None:
                return
            os.write(self._fd, (json.dumps(record, ensure_ascii=True) + "\n").encode())
            os.fsync(self._fd)

    def created(self, kind: str, path: Path | str) -> None:
        """``path`` (a folder of ``kind``: work, dask, spill, aside) is about to be created."""
        self._write({"op": "create", "kind": kind, "path": os.path.abspath(path)})

    def removed(self, path: Path | str) -> None:
        """``path`` (created earlier) is gone."""
        self._write({"op": "remove", "path": os.path.abspath(path)})

    def publishing(self, path: Path | str) -> None:
        """A publisher is about to write ``path`` (inside the output folder)."""
        self._write({"op": "publish", "path": os.path.abspath(path)})

    def moved(self, original: Path | str, target: Path | str) -> None:
        """An earlier output at ``original`` is about to be moved aside to ``target``."""
        self._write({"op": "move", "path": os.path.abspath(original), "to": os.path.abspath(target)})

    def committing(self) -> None:
        """The run's outputs are final from here on: a recovery keeps them."""
        self._write({"op": "commit"})

    def close(self) -> None:
        """The run ended and cleaned up after itself: the journal goes."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)


class LazyJournal:
    """A :class:`Journal` made when the run first needs one (the first thing it is about to
    create), so a run that creates nothing outside the store (an API run in memory that
    publishes nothing) leaves no output folder; ``on_start(journal)`` runs once it exists
    (the runner creates the output folder first and records the journal in the store)."""

    def __init__(self, folder: Path | str, run_id: str, *, store: str | None,
                 before: Any = None, after: Any = None) -> None:
        self.folder, self.run_id, self.store = Path(folder), run_id, store
        self._before, self._after = before, after
        self.journal: Journal | None = None

    def start(self) -> Journal:
        if self.journal is None:
            if self._before is not None:
                self._before()
            self.journal = Journal(self.folder, self.run_id, store=self.store)
            if self._after is not None:
                self._after(self.journal)
        return self.journal

    def created(self, kind: str, path: Path | str) -> None:
        self.start().created(kind, path)

    def publishing(self, path: Path | str) -> None:
        self.start().publishing(path)

    def moved(self, original: Path | str, target: Path | str) -> None:
        self.start().moved(original, target)

    def committing(self) -> None:
        if self.journal is not None:
            self.journal.committing()

    def removed(self, path: Path | str) -> None:
        if self.journal is not None:
            self.journal.removed(path)

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()


def fsync_folder(folder: Path) -> None:
    """Make a folder's entries (files created, renamed or removed in it) durable; best effort."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _records(fh: Any) -> list[dict[str, Any]]:
    out = []
    for line in fh.read().decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the last line, torn by the kill
        if isinstance(rec, dict) and isinstance(rec.get("op"), str):
            out.append(rec)
    return out


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def _remove(path: str) -> bool:
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
        return True
    if os.path.isdir(path):
        shutil.rmtree(path)
        return True
    return False


def recover(path: Path | str) -> list[str] | None:
    """Clean up after the run whose journal is ``path``: returns one line per thing cleaned
    (empty: it had cleaned up itself), or None if the run is alive (its journal is locked) or
    ``path`` is not a journal."""
    path = Path(path)
    if not _JOURNAL_NAME.fullmatch(path.name):
        return None
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None  # not written by anonflow as this user: never acted on (a shared folder)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # a live run holds it
        if not os.path.exists(path):  # recovered and removed meanwhile by someone else
            return []
        with os.fdopen(os.dup(fd), "rb") as fh:
            records = _records(fh)
        done = _replay(records, str(path.parent))
        path.unlink(missing_ok=True)
        return done
    finally:
        os.close(fd)


def _replay(records: list[dict[str, Any]], out: str) -> list[str]:
    created: dict[str, str] = {}
    published: list[str] = []
    moved: list[tuple[str, str]] = []
    committing = False
    for rec in records:
        op, p = rec["op"], rec.get("path")
        if op == "create" and isinstance(p, str) and rec.get("kind") in FOLDER_NAMES:
            created[p] = rec["kind"]
        elif op == "remove" and isinstance(p, str):
            created.pop(p, None)
        elif op == "publish" and isinstance(p, str) and _inside(p, out):
            published.append(p)
        elif op == "move" and isinstance(p, str) and isinstance(rec.get("to"), str) and _inside(p, out) \
                and _inside(rec["to"], out):
            moved.append((p, rec["to"]))
        elif op == "commit":
            committing = True
    done: list[str] = []
    asides = {p for p, kind in created.items() if kind == "aside"}
    moved = [(p, to) for p, to in moved if any(_inside(to, a) for a in asides)]
    if committing:  # the outputs were final: earlier ones not written again come back, the copies go
        for p, to in moved:
            if not os.path.lexists(p) and os.path.lexists(to):
                os.replace(to, p)
                done.append(f"kept the earlier output {p} (not written again)")
    else:  # publish all or nothing: what the run wrote goes, what it moved aside comes back
        for p in reversed(published):
            if any(p == q or _inside(p, q) for q, _ in moved):
                continue  # handled below
            if _remove(p):
                done.append(f"removed {p}, published by the interrupted run")
                _prune(os.path.dirname(p), out)
        for p, to in moved:
            if os.path.lexists(to):
                if os.path.lexists(p):
                    _remove(p)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                os.replace(to, p)
                done.append(f"put back the earlier output {p}")
    for p, kind in created.items():
        name = os.path.basename(p)
        if not FOLDER_NAMES[kind].fullmatch(name) or os.path.islink(p) or not os.path.isdir(p) \
                or os.lstat(p).st_uid != os.getuid():
            continue
        shutil.rmtree(p, ignore_errors=True)
        what = {"work": "work folder", "dask": "Dask local folder", "spill": "DuckDB spill folder",
                "aside": "folder of moved-aside outputs"}[kind]
        done.append(f"removed the {what} {p}")
    return done


def _prune(folder: str, out: str) -> None:
    while _inside(folder, out):
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)


def journals_in(folder: Path | str) -> list[Path]:
    """The journal files in ``folder`` (listed exactly: no pattern is made of its name)."""
    try:
        with os.scandir(folder) as it:
            return sorted(Path(e.path) for e in it if _JOURNAL_NAME.fullmatch(e.name) and e.is_file(follow_symlinks=False))
    except OSError:
        return []


def recover_folder(folder: Path | str) -> dict[str, list[str]]:
    """:func:`recover` every journal left in an output folder: ``{journal path: lines}``."""
    out = {}
    for path in journals_in(folder):
        done = recover(path)
        if done is not None:
            out[str(path)] = done
    return out


# -- signals --------------------------------------------------------------------------------

#: signals that end a run with its cleanup (SIGINT raises KeyboardInterrupt as it always does)
TERMINATING = ("SIGTERM", "SIGHUP")


@contextlib.contextmanager
def cleanup_on_termination() -> Iterator[None]:
    """While the block runs (in the main thread), SIGTERM and SIGHUP raise ``SystemExit``
    (128 + the signal's number), so that the block's ``finally`` cleanup runs before the
    process ends, as Ctrl-C's ``KeyboardInterrupt`` does; a second signal during the cleanup
    is ignored. The previous handlers are restored afterwards. Outside the main thread (an API
    run in a thread) it does nothing: Python delivers signals to the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        for sig in previous:  # a second signal, of either kind, does not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    previous: dict[int, Any] = {}
    for name in TERMINATING:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            previous[sig] = signal.signal(sig, stop)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
