"""Where a run may write: every published path stays inside the output folder.

A workflow file may come from someone else, so the paths its publish steps name are not
trusted. Two layers keep them in bounds:

* :func:`check_output_path`, when the workflow is validated (``anonflow plan`` and before
  ``anonflow run`` starts anything): a path must be relative, non-empty and must not climb
  out of the output folder (``..``);
* :class:`OutputGuard`, when a publisher resolves a path (``StepContext.resolve_output``):
  the real path (symbolic links followed) must lie inside the output folder, must not be the
  store, a source, the workflow file or any file a step reads (hierarchy and grading files),
  and, if something is already there, it must be a file this store published earlier and that
  nobody has changed since (same path and sha256, as recorded in ``af_outputs``). Everything
  else the user owns is never written over.

A run publishes all or nothing. When a publisher resolves a path that holds an earlier
run's file (or folder), the guard first moves it aside into a private folder inside the
output folder; if the run then fails (a later publish step, a release that cannot be
written, an interrupt), :meth:`OutputGuard.rollback` removes what this run wrote and moves
the earlier files back, so a failed run leaves earlier results as they were.
:meth:`OutputGuard.commit` drops the moved-aside copies once the run has succeeded.

A publisher that writes into a database (the ``postgres`` publisher) keeps its transaction
open and hands it to the guard (:meth:`OutputGuard.defer`): the guard commits it when the run
succeeds, before it drops the moved-aside files, and rolls it back when the run fails. (Two
databases are committed one after the other: if the second refuses, the first stays
written; the files are then restored and the run fails.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Callable, Iterable

from .cleanup import private_folder
from .errors import InputError, RunError, WorkflowError
from .filemodes import make_ordinary, make_ordinary_folder


def check_output_path(text: object, *, where: str, param: str = "path") -> None:
    """Reject an output path that could leave the output folder (raises WorkflowError)."""
    if not isinstance(text, str) or not text.strip():
        raise WorkflowError(f"parameter {param!r} must be a non-empty relative path, got {text!r}", where=where)
    if not text.isprintable():  # NUL, newline, ESC: nothing a file name needs, and a terminal would obey
        raise WorkflowError(f"parameter {param!r} contains a control character: {text!r}", where=where)
    win = PureWindowsPath(text)
    if os.path.isabs(text) or PurePosixPath(text).is_absolute() or win.drive or win.root:
        raise WorkflowError(f"parameter {param!r} is {text!r}, an absolute path; output paths are relative to the "
                            "output folder (--out-dir, default out/ beside the workflow file)", where=where)
    parts = PurePosixPath(text.replace("\\", "/")).parts
    long = next((p for p in parts if len(p.encode("utf-8")) > 255), None)
    if long is not None:
        raise WorkflowError(f"parameter {param!r}: the name {long[:40]!r}... is {len(long.encode('utf-8'))} bytes; "
                            "a file name holds at most 255", where=where)
    depth = 0
    for part in parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise WorkflowError(f"parameter {param!r} is {text!r}, which leaves the output folder; output paths "
                                "stay inside --out-dir (default out/ beside the workflow file)", where=where)
    if depth == 0:
        raise WorkflowError(f"parameter {param!r} is {text!r}, which names the output folder itself; give a file or "
                            "folder inside it", where=where)


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both absolute, normalized)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class OutputGuard:
    """Resolves and checks the paths publishers write (see the module docstring).

    ``published(path)`` returns the sha256 digests this store recorded for files published
    at ``path`` (an absolute, normalized path), ``protected`` lists files never to write."""

    def __init__(self, out_dir: Path, *, protected: Iterable[Path | str] = (),
                 published: Callable[[str], set[str]] = lambda path: set(),
                 store_path: Path | None = None) -> None:
        self.out_dir = Path(os.path.abspath(out_dir))
        self.protected = {os.path.realpath(p) for p in protected}
        self.published = published
        self.store_path = store_path
        #: files written so far in this run -> the step that wrote them (set by the runner)
        self.written: dict[str, str] = {}
        #: the publish step now running (set by the runner)
        self.step: str | None = None
        #: paths resolved by publish steps in this run, in order (they may have been written)
        self.resolved: list[str] = []
        #: path -> where its earlier content was moved aside (see :meth:`rollback`)
        self.moved: dict[str, str] = {}
        self._aside: Path | None = None
        #: transactions publishers left open (:meth:`defer`): (what, commit, rollback)
        self.pending: list[tuple[str, Callable[[], None], Callable[[], None]]] = []
        #: what those transactions write (``postgresql://...#schema.table``)
        self.claimed: set[str] = set()
        #: folders that did not exist when a publisher resolved a path in them
        self.created: set[str] = set()
        #: the run's journal (:class:`anonflow.cleanup.Journal`, set by the runner): what is
        #: published and moved aside is recorded there first, so a killed run's is undone later
        self.journal: Any = None

    def defer(self, keys: Iterable[str], commit: Callable[[], None], rollback: Callable[[], None]) -> None:
        """Commit a publisher's open transaction (a database's) with the run, or roll it back
        with it. ``keys`` name what it writes (``postgresql://...#schema.table``): a later
        step writing one of them is refused (InputError; a publisher checks :attr:`claimed`
        before it writes, else it would wait on the first step's lock)."""
        keys = list(keys)
        taken = [k for k in keys if k in self.claimed]
        if taken:
            raise InputError(f"{taken[0]} is written by an earlier publish step of this run; give each step its own "
                             "table")
        self.claimed.update(keys)
        self.pending.append((" and ".join(keys), commit, rollback))

    def resolve(self, text: str, *, check_existing: bool = True) -> Path:
        check_output_path(text, where="publish", param="path")
        path = Path(os.path.normpath(self.out_dir / text))
        real_out = os.path.realpath(self.out_dir)
        real = os.path.realpath(path)
        if not inside(real, real_out):
            raise InputError(f"output path {text!r} resolves to {real}, outside the output folder {real_out} "
                             "(through a symbolic link); nothing was written there")
        for p in self.protected:
            if real == p or inside(p, real):
                what = "the store" if self.store_path is not None and p.startswith(
                    os.path.realpath(self.store_path)) else "a file this workflow reads (its file, a source, a " \
                                                            "hierarchy or grading file)"
                raise InputError(f"output path {text!r} ({path}) would write over {what}: {p}; choose another path")
        for done, step in self.written.items():
            if step != self.step and (inside(done, str(path)) or inside(str(path), done)):
                raise InputError(f"output path {text!r} ({path}) would write over {done}, which step {step!r} "
                                 "published earlier in this run; give each publish step its own path")
        if check_existing:
            self._check_existing(text, path)
        if self.step is not None:  # a publisher is about to write: keep what is there until the run succeeds
            self._set_aside(path)
            folder = path.parent
            while inside(str(folder), str(self.out_dir)) and not folder.exists():
                self.created.add(str(folder))  # the publisher will create it
                if str(folder) == str(self.out_dir):
                    break
                folder = folder.parent
        return path

    def _set_aside(self, path: Path) -> None:
        key = str(path)
        if any(inside(key, done) for done in self.resolved):
            return  # resolved before in this run, or inside a folder that was: all there is this run's
        self.resolved.append(key)
        if self.journal is not None:
            self.journal.publishing(key)
        if not (path.exists() or path.is_symlink()):
            return
        if self._aside is None:
            self._aside = private_folder(self.out_dir, ".anonflow-previous-", self.journal, "aside")
        target = self._aside / str(len(self.moved))
        if self.journal is not None:
            self.journal.moved(key, target)
        os.replace(path, target)
        self.moved[key] = str(target)

    def rollback(self) -> list[str]:
        """Undo this run's publishing (the run failed): roll back the transactions publishers
        left open, remove every file or folder the publish steps resolved, then move the earlier
        content back. Returns the paths restored."""
        pending, self.pending = self.pending, []
        for _, _, undo in reversed(pending):
            try:
                undo()
            except Exception:  # noqa: BLE001 - a lost connection rolls back on the server's side
                pass
        for key in reversed(self.resolved):
            p = Path(key)
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.is_dir():
                shutil.rmtree(p)
            self._prune_empty(p.parent)
        restored = []
        for key, target in self.moved.items():
            Path(key).parent.mkdir(parents=True, exist_ok=True)
            os.replace(target, key)
            restored.append(key)
        self._finish()
        return restored

    def commit(self) -> None:
        """The run succeeded: commit the transactions publishers left open, then drop the
        earlier content moved aside (restoring any a publisher resolved but did not write
        again). A transaction that cannot be committed rolls back the rest and the files, and
        raises RunError."""
        committed: list[str] = []
        if self.journal is not None and self.pending:
            # from the first database commit on, the outputs are final: a recovery keeps them
            self.journal.committing()
        while self.pending:
            key, done, _ = self.pending.pop(0)
            try:
                done()
            except Exception as exc:  # noqa: BLE001 - the database's reason, in one line
                self.rollback()
                kept = f"only {', '.join(committed)} had been committed" if committed else \
                    "nothing of this run was published"
                raise RunError(f"could not commit what was published to {key}: "
                               f"{' '.join(str(exc).split())[:400]}; {kept}") from None
            committed.append(key)
        if self.journal is not None and not committed:
            self.journal.committing()
        for key, target in self.moved.items():
            if not (os.path.lexists(key)):
                os.replace(target, key)
        # published, so not confidential: the modes the user's umask gives (the store being
        # open made everything created meanwhile owner-only: anonflow.filemodes)
        for key in self.resolved:
            if key not in self.moved or os.path.lexists(key):
                make_ordinary(key)
        for folder in self.created:
            if os.path.isdir(folder) and not os.path.islink(folder):
                make_ordinary_folder(folder)
        self._finish()

    def _finish(self) -> None:
        if self._aside is not None:
            shutil.rmtree(self._aside, ignore_errors=True)
            if self.journal is not None and not os.path.lexists(self._aside):
                self.journal.removed(self._aside)
        self._aside = None
        self.moved = {}
        self.resolved = []
        self.claimed = set()
        self.created = set()

    def _prune_empty(self, folder: Path) -> None:
        """Remove folders left empty under the output folder (created for a file now removed)."""
        out = str(self.out_dir)
        while inside(str(folder), out) and str(folder) != out:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def _check_existing(self, text: str, path: Path) -> None:
        if not (path.exists() or path.is_symlink()):
            return
        files: list[Path] = []
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise InputError(f"output path {text!r} ({path}) exists and is not a plain file or folder; "
                             "anonflow writes only over files it published itself")
        if path.is_dir():
            for root, dirs, names in os.walk(path, followlinks=False):
                for d in dirs:
                    if os.path.islink(os.path.join(root, d)):
                        raise InputError(f"output path {text!r} ({path}) holds a symbolic link "
                                         f"({os.path.join(root, d)}); anonflow writes only over what it published")
                if root != str(path) and not dirs and not names:  # a folder someone added: it would be deleted
                    raise InputError(f"output path {text!r} ({path}) holds a folder anonflow did not create ({root}); "
                                     "remove it or choose another path")
                files += [Path(root) / n for n in names]
        else:
            files = [path]
        for f in files:
            recorded = self.published(os.path.normpath(str(f)))
            if not recorded:
                raise InputError(f"output path {text!r} would write over {f}, which this store "
                                 f"({self.store_path or 'in memory'}) did not publish; anonflow never overwrites a "
                                 "file it did not write: remove it or choose another path")
            if f.is_symlink() or not f.is_file() or file_sha256(f) not in recorded:
                raise InputError(f"output path {text!r} would write over {f}, which was changed after this store "
                                 "published it; remove it or choose another path")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """A file's sha256 (hex), read in blocks; the plugin API offers it as
    :func:`anonflow.api.file_sha256`."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
