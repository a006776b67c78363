"""The files a release's re-run reads: where each recorded source is found (in the workflow's
folder, by its recorded path, or by name under ``--sources``), and copies of them pinned to
their recorded sha256 (opened without following links, hashed as copied: :func:`copy_pinned`).
``anonflow verify --rerun`` and ``anonflow apply`` both use them.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import re
from pathlib import Path
from typing import Any, Mapping

from .manifest import not_regular, open_regular, relative_inside


def locate(wanted: Mapping[str, Mapping[str, Any]], base: Path | None,
            given: bool) -> tuple[dict[str, tuple[Path | None, str, str]], list[str]]:
    """Where each source recorded *outside* the workflow's folder (an absolute path, or one
    climbing out with ``..``) is read: ``{recorded path: (folder, name in it, as shown)}``,
    and the reasons some cannot be read (then nothing is run).

    The rule, and why it is safe for someone else's (hostile) manifest:

    - with ``--sources DIR`` (``given``): only ``DIR/<its file name>``; the recorded path itself
      is never opened. The user named the folder, and nothing outside it is read.
    - without it, an *absolute* recorded path is opened where it is, as the workflow named it
      (the custodian re-running a release on the machine that made it needs no option). It is
      only hashed (streamed) where it lies, as a regular file (a symbolic link, FIFO or device
      is not opened, and nothing under /proc, /sys or /dev), and used only when its sha256 is
      the one recorded: so the re-run never takes in data that is not the release's own
      source, the file is not copied, and verify never prints the digest of a file that does
      not match (a hostile manifest naming /home/you/secret learns nothing; the person
      running verify sees only that the recorded file is not there). Reading a file to hash it
      is the only thing such a manifest can make verify do.
    - a relative path that climbs out of the workflow's folder (``../data/x.csv``) is relative
      to a folder verify can only guess: it is read only with ``--sources DIR``, as
      ``DIR/<its file name>`` (folders further up are never searched)."""
    located: dict[str, tuple[Path | None, str, str]] = {}
    reasons: list[str] = []
    for key, info in wanted.items():
        if not info.get("outside"):
            continue
        name = info["name"]
        if given:
            if base is not None and not_regular(base / name) == "does not exist":
                reasons.append(f"{info['what']} is {key!r}, a path leaving the workflow's folder, and --sources {base} "
                               f"holds no {name} (such a source is read, with --sources DIR, only as DIR/{name})")
            located[key] = (base, name, f"{name} in {base}")
        elif posixpath.isabs(key):
            folder = os.path.realpath(posixpath.dirname(posixpath.normpath(key)))
            if any(folder == d or folder.startswith(d + "/") for d in SYSTEM_FOLDERS):
                reasons.append(f"{info['what']} is {key!r}, in a system folder ({folder}): not read")
            else:
                located[key] = (Path(folder), name, key)
        else:
            reasons.append(f"{info['what']} is {key!r}, a path leaving the workflow's folder (relative to a folder "
                           f"verify can only guess): give the folder that holds {name} with --sources DIR")
    return located, reasons


def guessed_base(release: Path, manifest: Mapping[str, Any]) -> tuple[Path, Path, bool]:
    """``(out_dir, base, allowed)``: the output folder the release was written into (the
    release directory with its recorded path taken off its end) and the folder above it, where
    a re-run (and ``anonflow apply``) looks for the files the workflow read; ``allowed`` is
    False when that folder is the filesystem root or the home folder, which are never searched."""
    rel_path = relative_inside(((manifest.get("release") or {}).get("params") or {}).get("path"))
    here = Path(os.path.realpath(release))
    parts = rel_path.split("/") if rel_path else []
    out_dir = here.parents[len(parts) - 1] if parts and len(parts) < len(here.parts) and \
        list(here.parts[-len(parts):]) == parts else here.parent
    base = out_dir.parent
    try:
        home = Path(os.path.realpath(Path.home()))
    except (RuntimeError, KeyError, OSError):
        home = None
    return out_dir, base, not (base == out_dir or base == Path(base.anchor) or base == home)


def sources_base(release: Path, manifest: Mapping[str, Any], given: Path | None) -> tuple[Path | None, str]:
    """The workflow file's folder, against which the recorded files resolve, and a sentence
    saying which folder it is and why (or, when there is none, why not).

    ``given`` (``--sources DIR``) is used as it is. Without it exactly one folder is
    considered: the parent of the output folder, the output folder being the release
    directory with its recorded path (``release.params.path``) taken off its end, else the
    release's parent (a release at ``<workflow folder>/out/<path>``, or ``--out-dir DIR``
    with DIR in the workflow's folder). It is used only if it holds every source with a
    recorded path as a regular file, and never when it is the filesystem root or the home
    folder. The output folder itself (which holds published files, perhaps named like a
    source) and folders further up are never searched."""
    if given is not None:
        base = Path(os.path.realpath(given))
        if not base.is_dir():
            return None, f"--sources {given} is not a folder"
        return base, f"{base} (given with --sources)"
    paths = [s["path"] for s in manifest.get("sources") or [] if isinstance(s, Mapping) and s.get("path")]
    out_dir, base, allowed = guessed_base(release, manifest)
    if not allowed:
        return None, (f"the folder above the output folder {out_dir} is {base}, the filesystem root or the home "
                      "folder, which is never searched")
    missing = [p for p in paths if relative_inside(p) is None or not_regular(base / relative_inside(p)) is not None]
    if missing:
        return None, (f"{base} (the folder above the output folder {out_dir}, the only one searched) does not hold "
                      + ", ".join(map(str, missing)) + " as regular files")
    return base, f"{base} (the folder above the output folder {out_dir}; give --sources DIR for another)"


def outside_source(path: Any) -> str | None:
    """The file name of a source recorded outside the workflow's folder, as the workflow names
    it (an absolute POSIX path, or a relative one climbing out with ``..``), or None when
    ``path`` is not such a path (inside the folder, a drive path, empty, NUL bytes, no name)."""
    if not isinstance(path, str) or not path or "\0" in path or len(path) > 4096 or "\\" in path:
        return None
    if relative_inside(path) is not None or re.match(r"^[A-Za-z]:", path):
        return None
    norm = posixpath.normpath(path)
    if not (posixpath.isabs(path) or norm == ".." or norm.startswith("../")):
        return None
    name = posixpath.basename(norm)
    return name if name not in ("", ".", "..") else None


def recorded_files(manifest: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every file a re-run of the release may read, from the manifest: the sources and the
    files the steps' recorded parameters name (hierarchy files, grading files), as
    ``{relative path: {sha256, what, text}}`` (``text``: hashed as load_grading hashes, the
    UTF-8 text with universal newlines), and the reasons some cannot be accepted (absolute
    paths, ``..`` escapes, a file recorded twice with two digests).

    A *source* the workflow names outside its folder (an absolute path, or ``../``) is
    accepted too, keyed by its path as recorded, with ``outside: True`` and ``name`` (its file
    name): :func:`_rerun_confined` reads it only at that absolute path or as ``DIR/name`` in
    ``--sources DIR``, never relative to a guessed folder (see :func:`locate`)."""
    files: dict[str, dict[str, Any]] = {}
    problems: list[str] = []

    def accept(path: Any, sha: Any, what: str, text: bool = False, source: bool = False) -> None:
        rel = relative_inside(path)
        name = outside_source(path) if source and rel is None else None
        if name is not None:
            if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
                problems.append(f"{what} ({path}) has no recorded sha256")
            elif path in files and files[path]["sha256"] != sha:
                problems.append(f"{what} ({path}) is recorded twice with different digests")
            else:
                files.setdefault(path, {"sha256": sha, "what": what, "text": False, "outside": True, "name": name})
            return
        if rel is None:
            problems.append(f"{what} is {path!r}: an absolute path or one leaving the workflow's folder")
        elif not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            problems.append(f"{what} ({rel}) has no recorded sha256")
        elif rel in files and (files[rel]["sha256"], files[rel]["text"]) != (sha, text):
            problems.append(f"{what} ({rel}) is recorded twice with different digests")
        else:
            files.setdefault(rel, {"sha256": sha, "what": what, "text": text})

    for s in manifest.get("sources") or []:
        if s.get("path") is None and s.get("format") == "duckdb":
            continue  # a table of the store: only the store given with --db can hold it
        if s.get("format") == "postgres":
            continue  # a server's table or query: read again and hashed by _check_postgres_sources
        accept(s.get("path"), s.get("sha256"), f"source {s.get('name')}", source=True)
    for st in manifest.get("steps") or []:
        params = st.get("params") or {}
        if st.get("kind") == "hierarchy" and isinstance(params, dict):
            for column, spec in params.items():
                if not isinstance(spec, dict):
                    continue
                for key, sha in (spec.get("files") or {}).items():
                    accept((spec.get("params") or {}).get(key), sha, f"hierarchy file of {st.get('step')}.{column}")
        elif st.get("kind") == "typing":
            for grading in gradings(params):
                if grading.get("source") is not None:
                    accept(grading.get("source"), grading.get("sha256"), f"grading file of step {st.get('step')}",
                           text=True)
    return files, problems


class Refused(Exception):
    """A recorded file that a re-run does not read (a symbolic link, not a regular file, ...)."""


def open_under(base: Path, rel: str) -> int:
    """A read-only descriptor of the regular file ``base/rel``: the folders on its path may be
    symbolic links only if they stay inside ``base``; the file itself must be a regular file
    (a symbolic link is not followed, a FIFO not waited on). Raises :class:`Refused` or
    ``FileNotFoundError``."""
    root = os.path.realpath(base)
    folder = os.path.realpath(os.path.join(root, posixpath.dirname(rel)))
    if folder != root and not folder.startswith(root.rstrip(os.sep) + os.sep):
        raise Refused(f"leads out of {root} (a folder on its path is a symbolic link to {folder})")
    try:
        dfd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Refused(f"cannot be read: {exc.strerror or exc}") from None
    try:
        return open_regular(Path(posixpath.basename(rel)), dir_fd=dfd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Refused(exc.strerror or str(exc)) from None
    finally:
        os.close(dfd)


def stream_sha256(fh: Any, text: bool) -> str:
    """sha256 of the rest of the binary stream ``fh``, read in blocks (for ``text``: of its
    UTF-8 text with universal newlines, as grading files are hashed)."""
    h = hashlib.sha256()
    if not text:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
        return h.hexdigest()
    reader = io.TextIOWrapper(fh, encoding="utf-8", newline=None)
    try:
        for chunk in iter(lambda: reader.read(1 << 20), ""):
            h.update(chunk.encode())
    except UnicodeDecodeError:
        return "not UTF-8 text"
    finally:
        reader.detach()
    return h.hexdigest()


def copy_pinned(base: Path, rel: str, dst: Path, sha: str, text: bool) -> str:
    """Copy the recorded file ``base/rel`` (see :func:`open_under`) to ``dst`` (a new file)
    only if it is the recorded one; return its sha256. The file is hashed first, streamed,
    without copying anything; on a mismatch nothing is copied. A match is copied from the
    same descriptor and the copy is hashed again: a file changed or swapped in between leaves
    no copy and its new digest is returned."""
    fd = open_under(base, rel)
    with os.fdopen(fd, "rb") as fin:
        digest = stream_sha256(fin, text)
        if digest != sha:
            return digest
        fin.seek(0)
        dst.parent.mkdir(parents=True, exist_ok=True)
        out = os.open(str(dst), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(out, "wb") as fout:
                for block in iter(lambda: fin.read(1 << 20), b""):
                    fout.write(block)
            with os.fdopen(open_regular(dst), "rb") as copy:
                again = stream_sha256(copy, text)
        except BaseException:
            dst.unlink(missing_ok=True)
            raise
    if again != sha:
        dst.unlink(missing_ok=True)
    return again


#: folders whose "regular files" are not files a workflow reads (kernel interfaces): an
#: absolute recorded path under them is never opened, not even to hash it
SYSTEM_FOLDERS = ("/proc", "/sys", "/dev")


def gradings(value: Any) -> list[dict[str, Any]]:
    """Every ``grading`` mapping inside a typing step's parameters."""
    out: list[dict[str, Any]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "grading" and isinstance(v, dict):
                out.append(v)
            else:
                out += gradings(v)
    elif isinstance(value, list):
        for v in value:
            out += gradings(v)
    return out
