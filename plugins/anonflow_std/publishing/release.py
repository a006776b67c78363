"""Audited, repeatable releases: the ``release`` publisher and the release format.

A release is a directory::

    <path>/
      <name>.parquet, <name>.csv          layout: table (the published table, with _class)
      <name>-qi.parquet, <name>-qi.csv    layout: lossy-join (QI table + class id ...
      <name>-sa.parquet, <name>-sa.csv    ... and SA table: class id, sensitive value, count)
      report.html                         self-contained report (see report.py)
      manifest.json                       what was done, from what, with which versions and results
      manifest.sig                        signed releases only: Ed25519 signature of manifest.json

The manifest (``schema_version`` 1, its top-level fields :data:`MANIFEST_FIELDS`) records the
workflow text and its sha256, the seed and ``--set`` overrides, every step in order with its
parameters, fingerprint and input/output hashes, versions, sources (path relative to the
workflow file, sha256, schema), the files (path relative to the release, sha256, rows), every
metric value with its threshold and verdict, the privacy checks re-run on the published files
(check plugin, parameters, result), the parameter sweep shown by the report, the signature's
record and the digests of every field. It holds no timestamps, run ids or absolute paths: the
same workflow, data and seed give the same bytes on any machine.

This module holds the format (the manifest's JSON, bytes and digests), writing the files (the
directory is written next to its target under a temporary name and renamed into place: a
failure leaves no release), reading a release back (regular files only; the published table
rebuilt from its Parquet files, and the privacy checks run on it: :func:`run_file_checks`),
Ed25519 signing keys, and the :class:`Release` publisher. Which checks apply and how one runs
is :mod:`anonflow_std.publishing.checks`; ``anonflow verify`` is :mod:`anonflow_std.publishing.verify`; the report
page is :mod:`anonflow_std.publishing.report`.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import math
import os
import posixpath
import re
import shutil
import stat
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from anonflow.api import (CLASS, ROW, InputError, Output, Param, Publisher, RunError, RunInfo, StepContext,
                          TypedTable, Typing, file_sha256, fsync_folder, make_ordinary)
from anonflow.lineage import canonical_json

from .. import __version__
from ..common import sensitive_column
from ..lossyjoin.publisher import K_MEANING, check_header_name, k_figures, split_tables
from ..privacy.counts import pair_consistency_sql
from . import report as report_mod
from .checks import claim_checks, planned_checks, run_checks, scratch_context, threshold_misses, verdict
from .publishers import csv_columns

SCHEMA_VERSION = 1
#: the top-level fields of a schema_version 1 manifest, exactly (docs/releases.md, "The manifest")
MANIFEST_FIELDS = ("schema_version", "format", "publisher", "workflow", "seed", "overrides", "versions", "sources",
                   "steps", "release", "files", "metrics", "checks", "sweep", "signature", "integrity")
#: the fields of its records of fixed shape, exactly (``signature`` is null in an unsigned release)
MANIFEST_RECORDS = {"publisher": ("name", "version"), "workflow": ("name", "file", "sha256", "text"),
                    "release": ("step", "position", "params", "fingerprint", "input", "layout", "claims", "typing"),
                    "signature": ("algorithm", "file", "public_key_sha256", "signs"),
                    "integrity": ("algorithm", "manifest", "fields")}
#: the fields of each entry of the manifest's ``files``, exactly
FILE_FIELDS = ("path", "role", "format", "sha256", "rows")
MANIFEST = "manifest.json"
REPORT = "report.html"
#: the Ed25519 signature of manifest.json's bytes (base64, one line), in a signed release
SIGNATURE = "manifest.sig"
SIGN_EXTRA = "the cryptography package is not installed: pip install 'anonflow[sign]'"
#: Parquet metadata keys of a release's data files: the typing, the file's role, the lossy-join pair
TYPING_KEY = "anonflow.typing"
RELEASE_KEY = "anonflow.release"
LOSSY_KEY = "anonflow.lossy-join"
PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# -- JSON --------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """``value`` as plain JSON data: tuples become lists, NaN and infinities null."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return plain(value.item())
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    return (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def json_digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value, strict=True).encode()).hexdigest()


def field_digests(manifest: Mapping[str, Any]) -> dict[str, str]:
    """sha256 of each manifest field, one level deep (``seed``, ``versions.duckdb``,
    ``steps[2]``), so that ``verify`` can name the field that was edited."""
    out: dict[str, str] = {}
    for key, value in manifest.items():
        if key == "integrity":
            continue
        if isinstance(value, dict) and value:
            for sub, v in value.items():
                out[f"{key}.{sub}"] = json_digest(v)
        elif isinstance(value, list) and value:
            for i, v in enumerate(value):
                out[f"{key}[{i}]"] = json_digest(v)
        else:
            out[key] = json_digest(value)
    return out


def integrity(manifest: Mapping[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in manifest.items() if k != "integrity"}
    return {"algorithm": "sha256", "manifest": json_digest(body), "fields": field_digests(body)}


# -- writing files -------------------------------------------------------------------------


def _json_cells(arr: pa.ChunkedArray) -> pa.Array:
    """A nested column as JSON text per cell (CSV cannot hold lists or structs)."""
    return pa.array([None if v is None else json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)
                     for v in arr.to_pylist()], pa.string())


def csv_ready(data: pa.Table) -> pa.Table:
    """``data`` as a release's CSV holds it: nested values as JSON text, and text cells that a
    spreadsheet would read as a formula escaped with a leading ``'`` (always, in a release)."""
    return csv_columns(data, json_text=_json_cells, escape=True)


def read_csv_text(path: Path, ncols: int) -> pa.Table:
    """A CSV file with every cell as text, exactly as written: an unquoted empty cell is null,
    a quoted one the empty string; nothing else is read as null. The header is row 0 (so it
    can be compared too); columns are ``f0``, ``f1``, ..."""
    names = [f"f{i}" for i in range(max(ncols, 1))]
    return pacsv.read_csv(str(path), read_options=pacsv.ReadOptions(autogenerate_column_names=True),
                          convert_options=pacsv.ConvertOptions(
                              column_types={n: pa.string() for n in names}, null_values=[""],
                              strings_can_be_null=True, quoted_strings_can_be_null=False))


def csv_difference(path: Path, data: pa.Table) -> str | None:
    """How the CSV file at ``path`` differs from the records of ``data`` (its Parquet partner,
    as read back), or None when it holds exactly them: the same header, row count and cells.
    The expected cells are ``data`` rendered as the writer renders it (:func:`csv_ready`, then
    Arrow's cast to text, which its CSV writer uses for numbers, booleans and dates), compared
    as text, with nulls (unquoted empty cells) compared as nulls; vectorized."""
    expected = csv_ready(data.replace_schema_metadata(None))
    got = read_csv_text(path, expected.num_columns)
    if got.num_columns != expected.num_columns:
        return f"has {got.num_columns} columns; its Parquet partner has {expected.num_columns}"
    header = [got.column(i)[0].as_py() if got.num_rows else None for i in range(got.num_columns)]
    if header != expected.column_names:
        return f"its header is {header}; its Parquet partner's columns are {expected.column_names}"
    got = got.slice(1)
    if got.num_rows != expected.num_rows:
        return f"holds {got.num_rows} records; its Parquet partner holds {expected.num_rows}"
    for i, name in enumerate(expected.column_names):
        want = expected.column(i)
        want = want if pa.types.is_string(want.type) else pc.cast(want, pa.string())
        have = got.column(i)
        want_null, have_null = pc.is_null(want), pc.is_null(have)
        ok = pc.if_else(pc.or_(want_null, have_null), pc.and_(want_null, have_null), pc.equal(want, have))
        bad = pc.indices_nonzero(pc.invert(ok))
        if len(bad):
            r = bad[0].as_py()
            return (f"record {r + 1}, column {name!r}: the CSV holds {have[r].as_py()!r}, its Parquet partner "
                    f"{want[r].as_py()!r} ({len(bad)} cell(s) differ)")
    return None


def write_parquet(path: Path, data: pa.Table, metadata: Mapping[str, str], compression: str) -> None:
    pq.write_table(data.replace_schema_metadata(dict(metadata)), str(path),
                   compression=None if compression == "none" else compression)


def write_csv(path: Path, data: pa.Table) -> None:
    pacsv.write_csv(csv_ready(data), str(path), write_options=pacsv.WriteOptions(include_header=True))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(parent: Path, name: str) -> None:
    """Remove temporary directories of releases at ``parent/name`` left by dead processes."""
    if not parent.is_dir():
        return
    for entry in parent.iterdir():
        m = re.fullmatch(rf"\.{re.escape(name)}\.(?:tmp|old)-(\d+)", entry.name)
        if m and entry.is_dir() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)


def swap_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished directory ``tmp`` onto ``target``; an existing release there is
    moved aside first and removed only once the new one is in place."""
    fsync_folder(tmp)
    old = None
    if target.exists() or target.is_symlink():
        if not target.is_dir() or target.is_symlink():
            raise RunError(f"release path {target} exists and is not a directory")
        if not (target / MANIFEST).is_file():
            raise RunError(f"release path {target} exists and is not a release (no {MANIFEST}); "
                           "remove it or choose another path")
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    fsync_folder(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# -- reading a release back -----------------------------------------------------------------


def not_regular(path: Path) -> str | None:
    """Why ``path`` is not a plain regular file, without following a symbolic link (``is a
    symbolic link``, ``is a directory``, ``is a FIFO``, ...), or None when it is one.
    ``does not exist`` when there is nothing there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be examined: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    kind = ("a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode) else
            "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    return f"is {kind}, not a regular file"


def open_regular(path: Path, dir_fd: int | None = None) -> int:
    """A read-only descriptor of the regular file ``path``, refusing a symbolic link (not
    followed), a FIFO (not waited on), a device or a directory with an ``OSError``."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd) if dir_fd is not None else os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symbolic link, not a regular file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def regular_sha256(path: Path) -> str:
    """sha256 of the regular file ``path`` (see :func:`open_regular`), streamed."""
    h = hashlib.sha256()
    with os.fdopen(open_regular(path), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_manifest(release: Path) -> dict[str, Any]:
    path = release / MANIFEST
    if not release.is_dir():
        raise InputError(f"{release} is not a directory (expected a release directory)")
    why = not_regular(path)
    if why == "does not exist":
        raise InputError(f"{release} holds no {MANIFEST}: not an anonflow release")
    if why is not None:
        raise InputError(f"{path} {why}: not opened (a release's files are regular files)")
    try:
        with os.fdopen(open_regular(path), "rb") as fh:
            data = json.loads(fh.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path} cannot be read as JSON: {exc}") from None
    except RecursionError:
        raise InputError(f"{path} nests its JSON too deeply to be a release manifest") from None
    if not isinstance(data, dict) or data.get("format") != "anonflow-release":
        raise InputError(f"{path} is not an anonflow release manifest")
    return data


def file_entry(manifest: Mapping[str, Any], role: str, fmt: str = "parquet") -> dict[str, Any]:
    for f in manifest.get("files") or []:
        if f.get("role") == role and f.get("format") == fmt:
            return f
    raise InputError(f"the manifest lists no {fmt} file with role {role!r}")


def read_parquet(release: Path, entry: Mapping[str, Any]) -> pa.Table:
    """The Parquet file a manifest entry names: a plain name in the release, a regular file
    (never a symbolic link or anything else followed out of the release)."""
    name = entry.get("path")
    if not isinstance(name, str) or not PLAIN_NAME.match(name):
        raise InputError(f"manifest file path {name!r} is not a plain file name in the release")
    why = not_regular(release / name)
    if why is not None:
        raise InputError(f"{name} {why}: not opened")
    return pq.read_table(release / name)


def _typing_of(data: pa.Table, manifest: Mapping[str, Any], where: str) -> Typing:
    meta = data.schema.metadata or {}
    raw = meta.get(TYPING_KEY.encode())
    recorded = (manifest.get("release") or {}).get("typing")
    if raw is None:
        raise InputError(f"{where}: no {TYPING_KEY} in its Parquet metadata")
    typing_json = json.loads(raw)
    if recorded is not None and canonical_json(typing_json, strict=True) != canonical_json(recorded, strict=True):
        raise InputError(f"{where}: the typing in its Parquet metadata differs from the manifest's release.typing")
    return Typing.from_json(typing_json)


def _sa_counts(qi: pa.Table, sa: pa.Table, cls_col: str, cnt: str, qname: str, sname: str) -> np.ndarray:
    """The SA table's counts (``sa`` sorted by class), as int64, once they are known to pair
    up with the QI table: non-negative integers that add up, per class id, to exactly the QI
    rows of that class (so expanding them never allocates more than the QI table's rows)."""
    n = qi.num_rows
    for t, col, name in ((qi, cls_col, qname), (sa, cls_col, sname), (sa, cnt, sname)):
        if col not in t.column_names:
            raise InputError(f"{name}: no column {col!r}")
    col = sa.column(cnt)
    if not pa.types.is_integer(col.type) or col.null_count:
        raise InputError(f"{sname}: the counts ({cnt!r}) are not all integers ({col.type}, {col.null_count} null)")
    raw = col.to_numpy(zero_copy_only=False)
    if (raw < 0).any() or (raw > n).any():
        raise InputError(f"{qname} and {sname} do not pair up: an SA count is negative or exceeds the QI table's "
                         f"{n} rows")
    counts = raw.astype(np.int64)
    if int(counts.sum()) != n:
        raise InputError(f"{qname} and {sname} do not pair up: the SA counts add up to {int(counts.sum())}, the QI "
                         f"table holds {n} rows")
    q = qi.group_by(cls_col).aggregate([([], "count_all")])
    s = sa.select([cls_col]).append_column("_n", pa.array(counts)).group_by(cls_col).aggregate([("_n", "sum")])
    j = q.join(s, cls_col, join_type="full outer")
    if j.num_rows != q.num_rows or j.num_rows != s.num_rows or not pc.all(
            pc.fill_null(pc.equal(j.column("count_all"), j.column("_n_sum")), False)).as_py():
        raise InputError(f"{qname} and {sname} do not pair up: the SA counts do not add up to the QI rows of every "
                         "class")
    return counts


def load_release_table(release: Path, manifest: Mapping[str, Any]) -> TypedTable:
    """The published table rebuilt from the release's Parquet files alone, typed from their
    metadata, with the claims the manifest records and a synthetic ``_row`` (file order).

    For the lossy-join layout, the QI table (class id renamed ``_class``) gets the SA table's
    values expanded from their counts, paired with the class's QI rows in file order: the
    pairing inside a class is arbitrary, but every check that counts values per class
    (k-anonymity by class, (alpha,k), l-diversity, ...) sees exactly the published counts."""
    rel = manifest["release"]
    claims = rel.get("claims") or {}
    if rel["layout"] == "table":
        f = file_entry(manifest, "table")
        data = read_parquet(release, f)
        typing = _typing_of(data, manifest, f["path"])
        data = data.replace_schema_metadata(None)
    else:
        fq, fs = file_entry(manifest, "qi"), file_entry(manifest, "sa")
        qi = read_parquet(release, fq)
        sa = read_parquet(release, fs)
        typing = _typing_of(qi, manifest, fq["path"])
        info = json.loads((qi.schema.metadata or {}).get(LOSSY_KEY.encode(), b"{}"))
        cls_col, s, cnt = info.get("class_column"), info.get("sensitive"), info.get("count_column")
        if not cls_col or not s or not cnt:
            raise InputError(f"{fq['path']}: no {LOSSY_KEY} metadata naming the class, sensitive and count columns")
        qcls = qi.column(cls_col).to_numpy(zero_copy_only=False)
        order = np.argsort(qcls, kind="stable")
        qi = qi.take(pa.array(order)).replace_schema_metadata(None)
        sa = sa.sort_by([(cls_col, "ascending"), (s, "ascending")])
        counts = _sa_counts(qi, sa, cls_col, cnt, fq["path"], fs["path"])
        expanded = pc.take(sa.column(s), pa.array(np.repeat(np.arange(sa.num_rows), counts)))
        scls = np.repeat(sa.column(cls_col).to_numpy(zero_copy_only=False), counts)
        if len(scls) != qi.num_rows or not np.array_equal(scls, qi.column(cls_col).to_numpy(zero_copy_only=False)):
            raise InputError(f"{fq['path']} and {fs['path']} do not pair up: the SA counts do not add up to the QI "
                             "rows of every class")
        data = qi.rename_columns([CLASS if c == cls_col else c for c in qi.column_names]).append_column(s, expanded)
    data = data.append_column(ROW, pa.array(np.arange(data.num_rows, dtype=np.int64)))
    return TypedTable(data, typing, claims)


def file_rows(path: Path, fmt: str) -> int:
    if fmt == "parquet":
        return pq.ParquetFile(str(path)).metadata.num_rows
    if fmt == "csv":
        return max(read_csv_text(path, 1).num_rows - 1, 0)
    return 0


def run_file_checks(release: Path, manifest: Mapping[str, Any], checks: list[dict[str, Any]], registry: Any,
                    sql: Any) -> list[dict[str, Any]]:
    """Run ``checks`` (as :func:`.checks.planned_checks` plans them) on the published files;
    return them with ``result`` and ``holds``. For a lossy-join release, the first entry is
    the pair's consistency (SA counts add up to QI rows, per class), in DuckDB SQL."""
    out: list[dict[str, Any]] = []
    rel = manifest["release"]
    if rel["layout"] == "lossy-join":
        fq, fs = file_entry(manifest, "qi"), file_entry(manifest, "sa")
        qi, sa = read_parquet(release, fq), read_parquet(release, fs)
        info = json.loads((qi.schema.metadata or {}).get(LOSSY_KEY.encode(), b"{}"))
        bad = sql(pair_consistency_sql(info["class_column"], info["count_column"]), qi=qi, sa=sa).to_pylist()[0]["bad"]
        out.append({"check": "lossy-join-consistency",
                    "params": {"class_column": info["class_column"], "count_column": info["count_column"]},
                    "evaluated": None, "plugin": {"distribution": "anonflow", "version": __version__},
                    "recheck": True, "result": {"inconsistent_classes": float(bad)}, "holds": bad == 0})
        typing = _typing_of(qi, manifest, fq["path"])
        out.append({"check": "lossy-join-k", "params": {"class_column": info["class_column"],
                                                        "quasi": list(typing.quasi)},
                    "evaluated": None, "plugin": {"distribution": "anonflow", "version": __version__},
                    "recheck": True, "result": k_figures(qi, typing.quasi, info["class_column"], sql), "holds": None,
                    "meaning": K_MEANING})
    table = load_release_table(release, manifest)
    return out + run_checks(checks, table, registry, scratch_context(sql, release, "verify"))


# -- signatures (Ed25519, the cryptography package: the 'sign' extra) ------------------------


def crypto() -> tuple[Any, Any]:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise InputError(f"signed releases need Ed25519 signatures, but {SIGN_EXTRA}") from None
    return ed25519, serialization


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} {path} not found") from None
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


def _read_private_key_file(path: Path) -> tuple[bytes, int]:
    """A private key file's bytes and mode (read through one descriptor)."""
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise InputError(f"signing key {path} not found") from None
    except OSError as exc:
        raise InputError(f"signing key {path} cannot be read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(), stat.S_IMODE(os.fstat(fh.fileno()).st_mode)


def load_private_key(path: Path) -> Any:
    """An Ed25519 private key from a PEM file (as ``anonflow keygen`` writes it, mode 0600).
    Refused, as ssh refuses an unprotected key, when the file's mode lets the group or others
    read or write it: whoever can read it can sign releases as its owner."""
    ed25519, serialization = crypto()
    data, mode = _read_private_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise InputError(f"signing key {path} is encrypted; give an unencrypted Ed25519 key "
                         "(anonflow keygen writes one)") from None
    except Exception:
        raise InputError(f"signing key {path} is not a PEM private key (anonflow keygen writes one)") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InputError(f"signing key {path} is not an Ed25519 key (anonflow keygen writes one)")
    if mode & 0o077:
        raise InputError(f"signing key {path} is open to others (mode {mode:04o}: its group or others may read or "
                         f"write it), so anyone who reads it can sign as you; not used: make it yours alone with "
                         f"chmod 600 {path}")
    return key


def signing_key(workflow_dir: Path, sign: str) -> Any:
    """The release publisher's ``sign`` key: ``sign`` resolved against the workflow's folder,
    which it must stay inside (symbolic links resolved), loaded and checked as an Ed25519
    private key; every problem is one ``release: ...`` InputError line."""
    rel = relative_inside(sign)
    base = Path(os.path.realpath(workflow_dir))
    if rel is None:
        raise InputError(f"release: 'sign' must be a key file inside the workflow's folder, given relative to it "
                         f"(no absolute path, no '..'), got {sign!r}")
    path = Path(os.path.realpath(base / rel))
    if path != base and base not in path.parents:
        raise InputError(f"release: 'sign' {sign!r} leads out of the workflow's folder {base} (through a symbolic "
                         f"link, to {path}); keep the key file inside it")
    why = not_regular(path)
    if why is not None and why != "does not exist":
        raise InputError(f"release: signing key {path} {why}")
    try:
        return load_private_key(path)
    except InputError as exc:
        raise InputError(f"release: {exc.message}") from None


def load_public_key(path: Path) -> Any:
    """An Ed25519 public key from a PEM file (``KEY.pub`` of ``anonflow keygen KEY``)."""
    ed25519, serialization = crypto()
    data = _read_key_file(path, "public key")
    if b"PRIVATE KEY-----" in data:
        raise InputError(f"public key {path} is a private key; give its .pub file (anonflow keygen KEY writes "
                         "KEY.pub): checking a signature needs only the public key")
    try:
        key = serialization.load_pem_public_key(data)
    except Exception:
        raise InputError(f"public key {path} is not a PEM public key (give the .pub file anonflow keygen "
                         "wrote)") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise InputError(f"public key {path} is not an Ed25519 key")
    return key


def key_fingerprint(public_key: Any) -> str:
    """sha256 of the raw 32-byte Ed25519 public key, hex."""
    _, serialization = crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def keygen(path: Path) -> tuple[Path, str]:
    """Write a new Ed25519 key pair: ``path`` (private key, PEM PKCS#8, mode 0600) and
    ``path.pub`` (public key, PEM); refuse to overwrite either. Return (public path, fingerprint)."""
    ed25519, serialization = crypto()
    path = Path(path)
    pub = path.with_name(path.name + ".pub")
    for p in (path, pub):
        if p.exists() or p.is_symlink():
            raise InputError(f"{p} already exists; anonflow keygen never overwrites a key file")
    if not path.parent.is_dir():
        raise InputError(f"folder {path.parent} does not exist")
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    written = []
    try:
        for p, data, mode in ((path, private, 0o600), (pub, public, 0o644)):
            try:
                fd = os.open(str(p), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                raise InputError(f"{p} already exists; anonflow keygen never overwrites a key file") from None
            written.append(p)
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), mode)
                fh.write(data)
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    return pub, key_fingerprint(key.public_key())


def _signature_b64(key: Any, data: bytes) -> bytes:
    return base64.b64encode(key.sign(data)) + b"\n"


def relative_inside(p: Any) -> str | None:
    """``p`` as a normalized relative POSIX path that stays inside its base folder, or None
    (absolute, a drive, empty, a NUL byte, or climbing out with ``..``)."""
    if not isinstance(p, str) or not p or "\0" in p or len(p) > 4096:
        return None
    q = p.replace("\\", "/")
    if q.startswith("/") or os.path.isabs(p) or re.match(r"^[A-Za-z]:", q):
        return None
    norm = posixpath.normpath(q)
    if norm in (".", "..") or norm.startswith("../"):
        return None
    return norm


# -- the publisher ---------------------------------------------------------------------------


class Release(Publisher):
    name = "release"
    version = __version__
    secret_params = ("sign",)
    accepts_row_id = False  # a release never links its records back to their source positions
    description = ("An audited release directory: the published files (Parquet and CSV), manifest.json (workflow, "
                   "seed, parameters, versions, sources, step hashes, metrics, privacy checks) and report.html; "
                   "checked by 'anonflow verify'.")
    params = (
        Param("path", "str", help="release directory, relative to --out-dir or the workflow file's folder"),
        Param("layout", "str", default="table", choices=("table", "lossy-join"),
              help="table: one table with _class; lossy-join: a QI table and an SA table (Anatomy-style)"),
        Param("name", "str", default="published", help="file name stem of the published files"),
        Param("sensitive", "str", default=None, nullable=True,
              help="lossy-join: the sensitive attribute (default: the only one typed)"),
        Param("class_column", "str", default="class_id", help="lossy-join: name of the class id column"),
        Param("count_column", "str", default="count", help="lossy-join: name of the SA table's count column"),
        Param("compression", "str", default="zstd", choices=("zstd", "snappy", "gzip", "none")),
        Param("sign", "str", default=None, nullable=True,
              help="Ed25519 private key file (anonflow keygen), relative to the workflow's folder: sign manifest.json "
                   "(manifest.sig); the manifest records the public key's sha256, never the key or its path"),
    )

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, workflow_dir: Path | None = None,
              **_: Any) -> None:
        """What can be told without the table; with ``workflow_dir`` (the engine passes it when
        the workflow is validated) the signing key is also resolved and loaded, so that a bad
        key fails before any step runs."""
        if os.path.isabs(params["path"]):
            raise InputError(f"release: 'path' must be relative (to --out-dir or the workflow's folder), got "
                             f"{params['path']!r}: a release is re-run into a scratch folder by 'anonflow verify --rerun'")
        if params.get("sign") is not None and relative_inside(params["sign"]) is None:
            raise InputError(f"release: 'sign' must be a key file inside the workflow's folder, given relative to it "
                             f"(no absolute path, no '..'), got {params['sign']!r}: 'anonflow verify --rerun' re-runs "
                             "the workflow in a scratch folder")
        if not PLAIN_NAME.match(params["name"]):
            raise InputError(f"release: 'name' must be a plain file name stem, got {params['name']!r}")
        for param in ("class_column", "count_column"):
            check_header_name(self.name, param, params.get(param))
        if params["class_column"] == params["count_column"]:
            raise InputError("release: class_column and count_column must differ")
        if workflow_dir is not None and params.get("sign") is not None:
            signing_key(Path(workflow_dir), params["sign"])

    # -- publish ------------------------------------------------------------------------

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        from anonflow.plugins import get_registry

        self.check(params)
        info = ctx.run_info()
        registry = get_registry()
        key = signing_key(info.workflow_dir, params["sign"]) if params.get("sign") is not None else None
        target = ctx.resolve_output(params["path"])
        if target.exists() and not (target / MANIFEST).is_file():
            raise InputError(f"release path {params['path']!r} ({target}) exists and is not a release (no {MANIFEST}); "
                             "remove it or choose another path")
        parent = target.parent
        parent.mkdir(parents=True, exist_ok=True)
        remove_stale(parent, target.name)
        tmp = parent / f".{target.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700)  # a work folder of anonflow's own while it is being written
        try:
            manifest = self.build(tmp, table, params, info, ctx, registry, target, key=key)
            make_ordinary(tmp)  # published: the modes the user's umask gives a new folder and its files
            swap_into_place(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        # the data files are tables (their rows); report.html, manifest.json and manifest.sig are not (no row
        # count; the manifest's own files entry for report.html keeps its recorded rows = 0)
        outputs = [Output(str(target / f["path"]), f["sha256"],
                          f["rows"] if f["format"] in ("parquet", "csv") else None) for f in manifest["files"]]
        outputs.append(Output(str(target / MANIFEST), file_sha256(target / MANIFEST), None))
        if key is not None:
            outputs.append(Output(str(target / SIGNATURE), file_sha256(target / SIGNATURE), None))
        ctx.note(f"release: {len(manifest['files'])} files and {MANIFEST} in {params['path']} "
                 f"({len(manifest['checks'])} privacy check(s) re-run on the published files)")
        return outputs

    def build(self, out: Path, table: TypedTable, params: Mapping[str, Any], info: RunInfo, ctx: StepContext,
              registry: Any, target: Path, key: Any = None) -> dict[str, Any]:
        """Write the release into the (temporary) directory ``out``; return its manifest. With
        ``key`` (an Ed25519 private key), also ``manifest.sig``, the signature of the manifest's bytes."""
        from anonflow.params import relative_paths

        base = info.workflow_dir
        cur = info.current or {}
        released = info.step(cur["inputs"][0]["name"]) if cur.get("inputs") else None
        if released is None:
            raise RunError("release: cannot find the step whose output is released in the run's record")
        layout, stem = params["layout"], params["name"]
        typing_json = relative_paths(table.typing.to_json(), base)
        meta = {TYPING_KEY: canonical_json(typing_json, strict=True)}
        files: list[dict[str, Any]] = []
        if layout == "table":
            parts = [("table", stem, table.data, {RELEASE_KEY: canonical_json({"role": "table", "layout": layout,
                                                                             "class_column": CLASS}, strict=True)})]
        else:
            s = sensitive_column(table, params["sensitive"], self.name)
            qi, sa = split_tables(table, s, ctx.sql, params["class_column"], params["count_column"])
            lj = {"class_column": params["class_column"], "sensitive": s, "count_column": params["count_column"]}
            parts = []
            for role, data, partner in (("qi", qi, f"{stem}-sa.parquet"), ("sa", sa, f"{stem}-qi.parquet")):
                info_json = canonical_json({**lj, "role": role, "partner": partner}, strict=True)
                parts.append((role, f"{stem}-{role}", data,
                              {LOSSY_KEY: info_json,
                               RELEASE_KEY: canonical_json({"role": role, "layout": layout, **lj, "partner": partner},
                                                           strict=True)}))
        for role, fstem, data, extra in parts:
            for fmt in ("parquet", "csv"):
                path = out / f"{fstem}.{fmt}"
                if fmt == "parquet":
                    write_parquet(path, data, {**meta, **extra}, params["compression"])
                else:
                    write_csv(path, data)
                files.append({"path": path.name, "role": role, "format": fmt, "sha256": file_sha256(path),
                              "rows": data.num_rows})

        release_dir = target
        declared = declared_sources(info.run["workflow_text"])
        manifest: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "format": "anonflow-release",
            "publisher": {"name": self.name, "version": self.version},
            "workflow": {"name": info.run["workflow"],
                         "file": Path(info.run["workflow_path"] or "workflow.yaml").name,
                         "sha256": info.run["workflow_hash"], "text": info.run["workflow_text"]},
            "seed": info.run["seed"],
            "overrides": plain(public_overrides(info)),
            "versions": plain({**(info.run.get("versions") or {}), "matplotlib": _matplotlib_version()}),
            "sources": [self._source(s, base, declared) for s in info.sources],
            "steps": [self._step(s, info, base, release_dir, declared) for s in info.steps],
            "release": {"step": cur.get("step"), "position": cur.get("position"),
                        "params": plain(relative_paths(_unsigned_params(cur.get("params")), base)),
                        "fingerprint": cur.get("fingerprint"),
                        "input": {"step": released["step"], "hash": released["output_hash"],
                                  "rows": released["rows"]},
                        "layout": layout, "claims": plain(table.claims), "typing": typing_json},
            "files": files,
            "metrics": self._metrics(info),
        }
        planned = planned_checks(info, released, table.claims, registry)
        extra, _ = claim_checks(table.claims, planned, registry)  # what 'anonflow verify' also runs
        checks = run_file_checks(out, manifest, planned + extra, registry, ctx.sql)
        failing = [f"{'claimed ' if c.get('claim') else ''}{c['check']} ("
                   + ", ".join(f"{k} = {v:g}" for k, v in c["result"].items() if v is not None) + ")"
                   for c in checks if c["holds"] is False]
        failing += [m for c in checks if not c.get("claim") for m in threshold_misses(c, manifest["steps"])]
        if failing:
            raise RunError("release: privacy check(s) do not hold on the published files: " + "; ".join(failing))
        manifest["checks"] = plain([c for c in checks if not c.get("claim")])
        manifest["sweep"] = plain(report_mod.sweep(info, registry))
        html = report_mod.render(info, registry)
        (out / REPORT).write_text(html, encoding="utf-8")
        files.append({"path": REPORT, "role": "report", "format": "html", "sha256": file_sha256(out / REPORT),
                      "rows": 0})
        manifest["signature"] = None if key is None else {
            "algorithm": "ed25519", "file": SIGNATURE, "public_key_sha256": key_fingerprint(key.public_key()),
            "signs": f"the bytes of {MANIFEST}"}
        manifest = plain(manifest)
        manifest["integrity"] = integrity(manifest)
        data = manifest_bytes(manifest)
        (out / MANIFEST).write_bytes(data)
        if key is not None:
            (out / SIGNATURE).write_bytes(_signature_b64(key, data))
        return manifest

    @staticmethod
    def _source(src: Mapping[str, Any], base: Path, declared: Mapping[str, str]) -> dict[str, Any]:
        return plain({"name": src["name"], "format": src["format"], "path": _source_path(src["name"], src.get("path"),
                                                                                          base, declared),
                      "table": src.get("table"), "options": src.get("options") or {}, "sha256": src.get("sha256"),
                      "rows": src.get("rows"), "schema": [{"name": c, "type": t} for c, t in src.get("columns") or []]})

    @staticmethod
    def _step(s: Mapping[str, Any], info: RunInfo, base: Path, release_dir: Path,
              declared: Mapping[str, str]) -> dict[str, Any]:
        from anonflow.params import relative_paths

        params = _unsigned_params(s.get("params")) if s["kind"] == "publish" else dict(s.get("params") or {})
        if s["kind"] == "source":
            path = _source_path(s["step"], params.get("path"), base, declared)
            inputs = [{"path": path, "sha256": i.get("sha256")} for i in s.get("inputs") or []]
            params["path"] = path
        else:
            inputs = [{"name": i.get("name"), "hash": i.get("hash")} for i in s.get("inputs") or []]
        rec_params = relative_paths(params, base)
        if s["kind"] == "source":  # as the workflow names it (an absolute path stays absolute)
            rec_params["path"] = params["path"]
        rec = {"step": s["step"], "position": s["position"], "kind": s["kind"], "uses": s["uses"],
               "plugin_version": s["plugin_version"], "params": rec_params,
               "seed": s["seed"], "fingerprint": s["fingerprint"], "inputs": inputs,
               "output_hash": s.get("output_hash"), "rows": s.get("rows")}
        summary = s.get("summary") or {}
        if summary.get("suppressed") is not None:  # records the algorithm suppressed, and its cap in records
            rec["suppressed"] = summary["suppressed"]
            rec["suppression_limit"] = summary.get("suppression_limit")
        if s["kind"] == "algorithm" and summary.get("fitted"):  # what it fitted, for anonflow apply
            rec["fitted"] = summary["fitted"]
        if s["kind"] == "publish":
            rec["files"] = [{"path": o["path"] if "://" in o["path"] else  # a database's table: its URL
                             os.path.relpath(o["path"], release_dir).replace(os.sep, "/"),
                             "sha256": o["sha256"], "rows": o["rows"]}
                            for o in info.outputs if o["step"] == s["step"]]
        return plain(rec)

    @staticmethod
    def _metrics(info: RunInfo) -> list[dict[str, Any]]:
        out = []
        for key, value in info.metrics.items():
            step, name = key.split(".", 1)
            th = info.thresholds.get(key)
            out.append({"step": step, "name": name, "value": value, "threshold": th, "passed": verdict(value, th, name)})
        return plain(out)

    # -- report and verify (used by the CLI) ------------------------------------------

    def report(self, info: RunInfo) -> str:
        """The report page of a recorded run (``anonflow report``)."""
        from anonflow.plugins import get_registry

        return report_mod.render(info, get_registry())

    def verify(self, release: Path, *, rerun: bool = False, db: Path | None = None,
               sources: Path | None = None, key: Path | None = None) -> dict[str, Any]:
        from .verify import verify  # verify.py imports this module

        return verify(release, rerun=rerun, db=db, sources=sources, key=key)

    def apply(self, release: Path, new_data: Path, out: Path | None = None, *, hierarchies: Path | None = None,
              suppression: float | None = None, key: Path | None = None) -> dict[str, Any]:
        """Publish new records as the release published its table (``anonflow apply``; see
        :mod:`anonflow_std.publishing.apply`); ``key``: the public key its signature must verify under."""
        from .apply import apply_release  # apply.py imports this module

        return apply_release(release, new_data, out, hierarchies=hierarchies, suppression=suppression, key=key)

    def keygen(self, path: Path) -> tuple[Path, str]:
        """Write an Ed25519 key pair for signed releases (``anonflow keygen``)."""
        return keygen(path)


def public_overrides(info: RunInfo) -> list[Any]:
    """The run's ``--set`` overrides less those that set a release's ``sign`` (a key's path is
    not the release's business: it changes no output)."""
    releases = {s["step"] for s in info.steps if s["kind"] == "publish" and (s.get("params") or {}).get(
        "publisher") == "release"}
    if info.current and info.current.get("kind") == "publish" and (info.current.get("params") or {}).get(
            "publisher") == "release":
        releases.add(info.current["step"])
    return [o for o in info.run.get("overrides") or []
            if not (o[0] in releases and str(o[1]).split(".", 1)[0] == "sign")]


def _unsigned_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """A publish step's parameters as a manifest records them: a release's ``sign`` (the
    private key's path) is left out; the manifest's ``signature`` says whether it was signed."""
    out = dict(params or {})
    if out.get("publisher") == "release":
        out.pop("sign", None)
    return out


def declared_sources(text: str) -> dict[str, str]:
    """Each source's file as the workflow file writes it: relative to the workflow's folder, or
    an absolute path kept as written (``verify --rerun`` then finds it at that path, or by its
    file name in ``--sources DIR``; recording it relative, as ``../../..``, named a file that
    never existed once the release was read from anywhere else)."""
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return {}
    out = {}
    for name, spec in ((data.get("sources") or {}) if isinstance(data, dict) else {}).items():
        file = spec if isinstance(spec, str) else (spec.get("path") if spec.get("path") is not None else spec.get("db")
                                                   ) if isinstance(spec, dict) else None
        if isinstance(file, str) and file and "\0" not in file:
            out[str(name)] = file if os.path.isabs(file) else file.replace(os.sep, "/")
    return out


def _source_path(name: str, path: str | None, base: Path, declared: Mapping[str, str]) -> str | None:
    if path in (None, "None"):
        return None
    if name in declared:
        return declared[name]
    rel = os.path.relpath(path, base).replace(os.sep, "/")
    # a file outside the workflow's folder, not named as written (the text cannot be read):
    # its absolute path, not a '../..' chain that only holds from where the run was made
    return rel if relative_inside(rel) is not None else Path(path).as_posix()


def _matplotlib_version() -> str:
    import matplotlib

    return matplotlib.__version__


PLUGINS = [Release()]
