"""Audited, repeatable releases: the ``release`` publisher and ``anonflow verify``.

A release is a directory::

    <path>/
      <name>.parquet, <name>.csv          layout: table (the published table, with _class)
      <name>-qi.parquet, <name>-qi.csv    layout: lossy-join (QI table + class id ...
      <name>-sa.parquet, <name>-sa.csv    ... and SA table: class id, sensitive value, count)
      report.html                         self-contained report (see report.py)
      manifest.json                       what was done, from what, with which versions and results

The manifest (``schema_version`` 1) records the workflow text and its sha256, the seed and
``--set`` overrides, every step in order with its parameters, fingerprint and input/output
hashes, versions, sources (path relative to the workflow file, sha256, schema), the files
(path relative to the release, sha256, rows), every metric value with its threshold and
verdict, the privacy checks re-run on the published files (check plugin, parameters,
result), and the parameter sweep shown by the report. It holds no timestamps, run ids or
absolute paths: the same workflow, data and seed give the same bytes on any machine.

The directory is written next to its target under a temporary name and renamed into place;
a failure leaves no release (an existing one is replaced only on success).

:func:`verify` opens only regular files of the release, re-hashes them, derives the privacy
checks from what the release claims and runs them on the published files alone and, with
``rerun``, re-runs the recorded workflow (confined to a scratch folder) and compares every hash.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import hashlib
import io
import json
import math
import os
import posixpath
import re
import shutil
import signal
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from anonflow.api import (CLASS, ROW, InputError, Output, Param, Publisher, RunError, RunInfo, StepContext,
                          TypedTable, Typing, file_sha256)

from . import __version__
from . import report as report_mod
from .alphak import pair_consistency_sql, sensitive_column
from .lossyjoin import K_MEANING, check_header_name, k_figures, split_tables
from .publishers import csv_columns

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
REPORT = "report.html"
#: the Ed25519 signature of manifest.json's bytes (base64, one line), in a signed release
SIGNATURE = "manifest.sig"
SIGN_EXTRA = "the cryptography package is not installed: pip install 'anonflow[sign]'"
#: manifest sections whose digests are recorded one entry deep (list items, mapping keys)
_TYPING_KEY = "anonflow.typing"
_RELEASE_KEY = "anonflow.release"
_LOSSY_KEY = "anonflow.lossy-join"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


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


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    return (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def field_digests(manifest: Mapping[str, Any]) -> dict[str, str]:
    """sha256 of each manifest field, one level deep (``seed``, ``versions.duckdb``,
    ``steps[2]``), so that ``verify`` can name the field that was edited."""
    out: dict[str, str] = {}
    for key, value in manifest.items():
        if key == "integrity":
            continue
        if isinstance(value, dict) and value:
            for sub, v in value.items():
                out[f"{key}.{sub}"] = _digest(v)
        elif isinstance(value, list) and value:
            for i, v in enumerate(value):
                out[f"{key}[{i}]"] = _digest(v)
        else:
            out[key] = _digest(value)
    return out


def integrity(manifest: Mapping[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in manifest.items() if k != "integrity"}
    return {"algorithm": "sha256", "manifest": _digest(body), "fields": field_digests(body)}


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


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
    _fsync_dir(tmp)
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
    _fsync_dir(target.parent)
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


def _file(manifest: Mapping[str, Any], role: str, fmt: str = "parquet") -> dict[str, Any]:
    for f in manifest.get("files") or []:
        if f.get("role") == role and f.get("format") == fmt:
            return f
    raise InputError(f"the manifest lists no {fmt} file with role {role!r}")


def read_parquet(release: Path, entry: Mapping[str, Any]) -> pa.Table:
    """The Parquet file a manifest entry names: a plain name in the release, a regular file
    (never a symbolic link or anything else followed out of the release)."""
    name = entry.get("path")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(f"manifest file path {name!r} is not a plain file name in the release")
    why = not_regular(release / name)
    if why is not None:
        raise InputError(f"{name} {why}: not opened")
    return pq.read_table(release / name)


def _typing_of(data: pa.Table, manifest: Mapping[str, Any], where: str) -> Typing:
    meta = data.schema.metadata or {}
    raw = meta.get(_TYPING_KEY.encode())
    recorded = (manifest.get("release") or {}).get("typing")
    if raw is None:
        raise InputError(f"{where}: no {_TYPING_KEY} in its Parquet metadata")
    typing_json = json.loads(raw)
    if recorded is not None and canonical(typing_json) != canonical(recorded):
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
        f = _file(manifest, "table")
        data = read_parquet(release, f)
        typing = _typing_of(data, manifest, f["path"])
        data = data.replace_schema_metadata(None)
    else:
        fq, fs = _file(manifest, "qi"), _file(manifest, "sa")
        qi = read_parquet(release, fq)
        sa = read_parquet(release, fs)
        typing = _typing_of(qi, manifest, fq["path"])
        info = json.loads((qi.schema.metadata or {}).get(_LOSSY_KEY.encode(), b"{}"))
        cls_col, s, cnt = info.get("class_column"), info.get("sensitive"), info.get("count_column")
        if not cls_col or not s or not cnt:
            raise InputError(f"{fq['path']}: no {_LOSSY_KEY} metadata naming the class, sensitive and count columns")
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
    """Run ``checks`` (as :func:`report.planned_checks` plans them) on the published files;
    return them with ``result`` and ``holds``. For a lossy-join release, the first entry is
    the pair's consistency (SA counts add up to QI rows, per class), in DuckDB SQL."""
    out: list[dict[str, Any]] = []
    rel = manifest["release"]
    if rel["layout"] == "lossy-join":
        fq, fs = _file(manifest, "qi"), _file(manifest, "sa")
        qi, sa = read_parquet(release, fq), read_parquet(release, fs)
        info = json.loads((qi.schema.metadata or {}).get(_LOSSY_KEY.encode(), b"{}"))
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
    ctx = report_mod.scratch_context(sql, release, "verify")
    for c in checks:
        entry = dict(c)
        if not c["recheck"]:
            entry.update(result=None, holds=None)
        else:
            result = report_mod.run_check(c, table, registry, ctx)
            h = result.get(f"{c['check']}.holds")
            entry.update(result=result, holds=None if h is None else h == 1.0)
        out.append(entry)
    return out


# -- signatures (Ed25519, the cryptography package: the 'sign' extra) ------------------------


def _crypto() -> tuple[Any, Any]:
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


def load_private_key(path: Path) -> Any:
    """An Ed25519 private key from a PEM file (as ``anonflow keygen`` writes it)."""
    ed25519, serialization = _crypto()
    data = _read_key_file(path, "signing key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise InputError(f"signing key {path} is encrypted; give an unencrypted Ed25519 key "
                         "(anonflow keygen writes one)") from None
    except Exception:
        raise InputError(f"signing key {path} is not a PEM private key (anonflow keygen writes one)") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InputError(f"signing key {path} is not an Ed25519 key (anonflow keygen writes one)")
    return key


def signing_key(workflow_dir: Path, sign: str) -> Any:
    """The release publisher's ``sign`` key: ``sign`` resolved against the workflow's folder,
    which it must stay inside (symbolic links resolved), loaded and checked as an Ed25519
    private key; every problem is one ``release: ...`` InputError line."""
    rel = _inside(sign)
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
    ed25519, serialization = _crypto()
    data = _read_key_file(path, "public key")
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
    _, serialization = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def keygen(path: Path) -> tuple[Path, str]:
    """Write a new Ed25519 key pair: ``path`` (private key, PEM PKCS#8, mode 0600) and
    ``path.pub`` (public key, PEM); refuse to overwrite either. Return (public path, fingerprint)."""
    ed25519, serialization = _crypto()
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


def _inside(p: Any) -> str | None:
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
        if params.get("sign") is not None and _inside(params["sign"]) is None:
            raise InputError(f"release: 'sign' must be a key file inside the workflow's folder, given relative to it "
                             f"(no absolute path, no '..'), got {params['sign']!r}: 'anonflow verify --rerun' re-runs "
                             "the workflow in a scratch folder")
        if not _NAME.match(params["name"]):
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
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # published: the ordinary permissions of a new folder
            swap_into_place(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        outputs = [Output(str(target / f["path"]), f["sha256"], f["rows"]) for f in manifest["files"]]
        outputs.append(Output(str(target / MANIFEST), file_sha256(target / MANIFEST), 0))
        if key is not None:
            outputs.append(Output(str(target / SIGNATURE), file_sha256(target / SIGNATURE), 0))
        ctx.note(f"release: {len(manifest['files'])} files and {MANIFEST} in {params['path']} "
                 f"({len(manifest['checks'])} privacy check(s) re-run on the published files)")
        return outputs

    def build(self, out: Path, table: TypedTable, params: Mapping[str, Any], info: RunInfo, ctx: StepContext,
              registry: Any, target: Path, key: Any = None) -> dict[str, Any]:
        """Write the release into the (temporary) directory ``out``; return its manifest. With
        ``key`` (an Ed25519 private key), also ``manifest.sig``, the signature of the manifest's bytes."""
        from anonflow.runner import relative_paths

        base = info.workflow_dir
        cur = info.current or {}
        released = info.step(cur["inputs"][0]["name"]) if cur.get("inputs") else None
        if released is None:
            raise RunError("release: cannot find the step whose output is released in the run's record")
        layout, stem = params["layout"], params["name"]
        typing_json = relative_paths(table.typing.to_json(), base)
        meta = {_TYPING_KEY: canonical(typing_json)}
        files: list[dict[str, Any]] = []
        if layout == "table":
            parts = [("table", stem, table.data, {_RELEASE_KEY: canonical({"role": "table", "layout": layout,
                                                                             "class_column": CLASS})})]
        else:
            s = sensitive_column(table, params["sensitive"], self.name)
            qi, sa = split_tables(table, s, ctx.sql, params["class_column"], params["count_column"])
            lj = {"class_column": params["class_column"], "sensitive": s, "count_column": params["count_column"]}
            parts = []
            for role, data, partner in (("qi", qi, f"{stem}-sa.parquet"), ("sa", sa, f"{stem}-qi.parquet")):
                info_json = canonical({**lj, "role": role, "partner": partner})
                parts.append((role, f"{stem}-{role}", data,
                              {_LOSSY_KEY: info_json,
                               _RELEASE_KEY: canonical({"role": role, "layout": layout, **lj, "partner": partner})}))
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
        planned = report_mod.planned_checks(info, released, table.claims, registry)
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
        from anonflow.runner import relative_paths

        params = _unsigned_params(s.get("params")) if s["kind"] == "publish" else dict(s.get("params") or {})
        if s["kind"] == "source":
            path = _source_path(s["step"], params.get("path"), base, declared)
            inputs = [{"path": path, "sha256": i.get("sha256")} for i in s.get("inputs") or []]
            params["path"] = path
        else:
            inputs = [{"name": i.get("name"), "hash": i.get("hash")} for i in s.get("inputs") or []]
        rec = {"step": s["step"], "position": s["position"], "kind": s["kind"], "uses": s["uses"],
               "plugin_version": s["plugin_version"], "params": relative_paths(params, base),
               "seed": s["seed"], "fingerprint": s["fingerprint"], "inputs": inputs,
               "output_hash": s.get("output_hash"), "rows": s.get("rows")}
        summary = s.get("summary") or {}
        if summary.get("suppressed") is not None:  # records the algorithm suppressed, and its cap in records
            rec["suppressed"] = summary["suppressed"]
            rec["suppression_limit"] = summary.get("suppression_limit")
        if s["kind"] == "publish":
            rec["files"] = [{"path": os.path.relpath(o["path"], release_dir).replace(os.sep, "/"),
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
        return verify(release, rerun=rerun, db=db, sources=sources, key=key)

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
    """Each source's file as the workflow file writes it (relative to the workflow's folder)."""
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return {}
    out = {}
    for name, spec in ((data.get("sources") or {}) if isinstance(data, dict) else {}).items():
        file = spec if isinstance(spec, str) else (spec.get("path") if spec.get("path") is not None else spec.get("db")
                                                   ) if isinstance(spec, dict) else None
        if isinstance(file, str) and not os.path.isabs(file):
            out[str(name)] = file.replace(os.sep, "/")
    return out


def _source_path(name: str, path: str | None, base: Path, declared: Mapping[str, str]) -> str | None:
    if path in (None, "None"):
        return None
    if name in declared:
        return declared[name]
    return os.path.relpath(path, base).replace(os.sep, "/")


def verdict(value: float | None, threshold: Mapping[str, float] | None, name: str) -> bool | None:
    """Pass/fail of a metric value: against its threshold; a privacy check's ``.holds`` passes at 1."""
    if value is None:
        return None if not threshold else False
    if threshold:
        return ("min" not in threshold or value >= threshold["min"]) and ("max" not in threshold or
                                                                         value <= threshold["max"])
    if name.endswith(".holds"):
        return value == 1.0
    return None


def _matplotlib_version() -> str:
    import matplotlib

    return matplotlib.__version__


# -- verify -------------------------------------------------------------------------------------


class Findings:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, ok: bool, what: str, detail: str, show: bool = False) -> None:
        """``show``: a finding verify prints even when it holds (the signature status, the
        lossy-join k figures)."""
        self.items.append({"ok": bool(ok), "what": what, "detail": detail, **({"show": True} if show else {})})

    @property
    def ok(self) -> bool:
        return all(i["ok"] for i in self.items)


def _short(h: Any) -> str:
    return str(h)[:16] + "..." if isinstance(h, str) and len(h) > 16 else repr(h)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    return a == b


def verify(release: Path, *, rerun: bool = False, db: Path | None = None, sources: Path | None = None,
           registry: Any = None, key: Path | None = None) -> dict[str, Any]:
    """Check a release directory; return ``{"release", "ok", "signature", "findings": [{ok, what, detail}]}``.

    0. every entry of the directory is a regular file (no symbolic link, FIFO, device or
       folder is ever opened), ``manifest.json`` and ``manifest.sig`` included;
    1. the manifest's field digests, the workflow text's sha256 and every file's sha256 and rows;
       each CSV file against its Parquet partner, cell by cell; metric verdicts against their
       thresholds; no missing or unexpected file; the signature (with ``key``, a public key file);
    2. the privacy checks, derived from what the release claims (:func:`derive_checks`,
       :func:`claim_checks`) and run on the published files alone through the registry; the
       manifest's check list must be exactly the derived one;
    3. with ``rerun``: the recorded workflow re-run, confined to a scratch folder holding copies
       of the recorded files only (see :func:`_rerun`), and every manifest field and file compared.
    """
    from anonflow.plugins import get_registry
    from anonflow.store import Store

    release = Path(release)
    registry = registry or get_registry()
    f = Findings()
    why = not_regular(release / MANIFEST) if release.is_dir() else None
    if why is not None and why != "does not exist":
        f.add(False, f"file {MANIFEST}", f"{why}: not opened (a release holds only regular files)")
        return {"release": str(release), "ok": False, "signature": None, "findings": f.items}
    manifest = load_manifest(release)
    public_key = load_public_key(Path(key)) if key is not None else None
    if manifest.get("schema_version") != SCHEMA_VERSION:
        f.add(False, "manifest field schema_version",
              f"is {manifest.get('schema_version')!r}; this anonflow reads version {SCHEMA_VERSION}")
        return {"release": str(release), "ok": False, "signature": None, "findings": f.items}

    # 1. integrity of the manifest and the files
    recorded = manifest.get("integrity") or {}
    body = {k: v for k, v in manifest.items() if k != "integrity"}
    now = field_digests(body)
    was = recorded.get("fields") or {}
    altered = [k for k in now if k in was and now[k] != was[k]]
    added = [k for k in now if k not in was]
    removed = [k for k in was if k not in now]
    for k in altered:
        f.add(False, f"manifest field {k}", "was altered: its content no longer matches the digest recorded in "
                                            "integrity.fields")
    for k in added:
        f.add(False, f"manifest field {k}", "was added after the release was written")
    for k in removed:
        f.add(False, f"manifest field {k}", "was removed after the release was written")
    if not (altered or added or removed):
        ok = _digest(body) == recorded.get("manifest")
        f.add(ok, "manifest", "field digests match" if ok else "digest of the whole manifest does not match "
                                                              "integrity.manifest")
    signature = _check_signature(release, manifest, public_key, key, f)
    wf = manifest.get("workflow") or {}
    text_hash = hashlib.sha256(str(wf.get("text", "")).encode()).hexdigest()
    f.add(text_hash == wf.get("sha256"), "manifest field workflow.text",
          "matches workflow.sha256" if text_hash == wf.get("sha256") else
          f"sha256 {_short(text_hash)} but workflow.sha256 records {_short(wf.get('sha256'))}")
    listed = set()
    first: dict[str, int] = {}
    intact: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(manifest.get("files") or []):
        name = entry.get("path", "") if isinstance(entry, dict) else None
        if isinstance(name, str):
            listed.add(name)
            if name in first:
                f.add(False, f"file {name}", f"is listed twice in the manifest (files[{first[name]}] and files[{i}]); "
                                             "each file is listed once")
                continue
            first[name] = i
        if not isinstance(name, str) or not _NAME.match(name) or name in (MANIFEST, SIGNATURE):
            f.add(False, f"file {name!r}", f"manifest files[{i}].path is not a plain file name in the release")
            continue
        path = release / name
        why = not_regular(path)
        if why == "does not exist":
            f.add(False, f"file {name}", f"is missing (manifest files[{i}])")
            continue
        if why is not None:
            f.add(False, f"file {name}", f"{why}: not opened (a release holds only regular files)")
            continue
        try:
            digest = regular_sha256(path)
        except OSError as exc:
            f.add(False, f"file {name}", f"cannot be read: {exc.strerror or exc}")
            continue
        if digest != entry.get("sha256"):
            f.add(False, f"file {name}", f"sha256 {_short(digest)} differs from manifest files[{i}].sha256 "
                                         f"{_short(entry.get('sha256'))}: the file was changed")
            continue
        try:
            rows = file_rows(path, entry.get("format", ""))
        except Exception as exc:  # a file that hashes right but cannot be read: say so
            f.add(False, f"file {name}", f"cannot be read: {exc}")
            continue
        if entry.get("format") in ("parquet", "csv") and rows != entry.get("rows"):
            f.add(False, f"file {name}", f"holds {rows} rows; manifest files[{i}].rows records {entry.get('rows')}")
        else:
            f.add(True, f"file {name}", "sha256 and rows match the manifest")
            intact[name] = entry
    for path in sorted(release.iterdir()):
        if path.name in (MANIFEST, SIGNATURE) or path.name in listed:
            continue  # the manifest above, the signature in its own finding, listed files in theirs
        why = not_regular(path)
        f.add(False, f"file {path.name}", "is not listed in the manifest" if why is None else
              f"{why}: not opened (a release holds only regular files), and it is not listed in the manifest")
    # every CSV holds exactly the records of its Parquet partner (so the checks below, run on
    # the Parquet files, hold for the CSV files as well)
    for name, entry in intact.items():
        if entry.get("format") != "csv":
            continue
        partner = next((e for e in manifest.get("files") or [] if e.get("format") == "parquet"
                        and e.get("role") == entry.get("role")), None)
        if partner is None:
            f.add(False, f"file {name}", f"has no Parquet partner with role {entry.get('role')!r} in the manifest")
            continue
        try:
            diff = csv_difference(release / name, read_parquet(release, partner))
        except Exception as exc:
            diff = f"cannot be compared with {partner['path']}: {type(exc).__name__}: {exc}"
        f.add(diff is None, f"file {name}", f"holds exactly the records of {partner['path']} (header, rows and every "
                                            "cell, CSV escaping accounted for)" if diff is None else
              f"does not hold the records of {partner['path']}: {diff}")
    _verify_columns(release, manifest, intact, f)
    for i, m in enumerate(manifest.get("metrics") or []):
        expect = verdict(m.get("value"), m.get("threshold"), m.get("name", ""))
        if expect != m.get("passed"):
            f.add(False, f"manifest field metrics[{i}].passed",
                  f"{m.get('step')}.{m.get('name')} = {m.get('value')!r} with threshold {m.get('threshold')!r} "
                  f"{'passes' if expect else 'fails'}, but the manifest records passed = {m.get('passed')!r}")

    # 2. the privacy checks the release's claims call for, on the published files alone
    scratch = Store(":memory:")
    try:
        _verify_checks(release, manifest, registry, f, lambda q, params=None, **t: scratch.sql(q, params, **t))
    finally:
        scratch.close()

    # 3. re-run
    if rerun:
        _rerun(release, manifest, f, registry, db=db, sources=sources)
    return {"release": str(release), "ok": f.ok, "signature": signature, "findings": f.items}


def _verify_columns(release: Path, manifest: Mapping[str, Any], intact: Mapping[str, Mapping[str, Any]],
                    f: Findings) -> None:
    """Each published Parquet file holds exactly the columns its layout calls for: the table,
    the attributes of release.typing (and ``_class``); the QI table, those but the sensitive
    one, and the class column; the SA table, the class, sensitive and count columns. (Each
    CSV file is compared with its Parquet partner, header included.)"""
    rel = manifest.get("release") or {}
    try:
        declared = [a["name"] for a in (rel.get("typing") or {})["attributes"]]
    except Exception:
        f.add(False, "manifest field release.typing", "does not list the release's attributes")
        return
    lj: dict[str, Any] = {}
    if rel.get("layout") == "lossy-join":
        try:
            qi_entry = _file(manifest, "qi")
            if qi_entry.get("path") not in intact:
                return  # missing, changed or not a regular file: its own finding says so
            lj = json.loads((pq.read_schema(release / qi_entry["path"]).metadata or {}).get(_LOSSY_KEY.encode(),
                                                                                           b"{}"))
        except Exception:
            lj = {}
        if not all(isinstance(lj.get(k), str) for k in ("class_column", "sensitive", "count_column")):
            f.add(False, "published columns", f"the QI table's {_LOSSY_KEY} metadata does not name the class, "
                                              "sensitive and count columns")
            return
    for name, entry in intact.items():
        role = entry.get("role")
        if entry.get("format") != "parquet" or role not in ("table", "qi", "sa"):
            continue
        if role == "table":
            expect, optional = declared, [CLASS]
        elif role == "qi":
            expect, optional = [c for c in declared if c != lj["sensitive"]] + [lj["class_column"]], []
        else:
            expect, optional = [lj["class_column"], lj["sensitive"], lj["count_column"]], []
        try:
            have = pq.read_schema(release / name).names
        except Exception as exc:
            f.add(False, f"file {name}", f"cannot be read: {_error_text(exc)}")
            continue
        extra = [c for c in have if c not in expect and c not in optional]
        missing = [c for c in expect if c not in have]
        dup = sorted({c for c in have if have.count(c) > 1})
        if extra or missing or dup:
            f.add(False, f"file {name}", "does not hold exactly the columns of the release's typing "
                  f"({'the ' + role + ' table of a lossy-join release' if role != 'table' else 'table layout'}): "
                  + "; ".join([*(f"column {c!r} is not declared" for c in extra),
                               *(f"column {c!r} is missing" for c in missing),
                               *(f"column {c!r} appears twice" for c in dup)]))


#: checks a release adds itself (not metric plugins): the lossy-join pair's consistency and k figures
BUILTIN_CHECKS = ("lossy-join-consistency", "lossy-join-k")


def derive_checks(manifest: Mapping[str, Any], registry: Any) -> list[dict[str, Any]]:
    """The privacy checks a release must record, derived from its manifest as the publisher
    derives them from the run (:func:`report.planned_checks`): each privacy metric of an
    evaluate step (manifest ``steps``) whose anonymized input is the released table
    (``release.input.hash``), with that step's parameters, then each model in
    ``release.claims`` that no evaluate step checked, with default parameters (which read the
    claim). Never the manifest's own ``checks``."""
    import types

    rel = manifest.get("release") or {}
    claims = rel.get("claims") if rel.get("claims") is not None else {}
    if not isinstance(claims, Mapping):
        raise InputError(f"release.claims is not a mapping of model -> parameters: {_show(claims)}")
    steps = manifest.get("steps") or []
    if not isinstance(steps, list) or not all(isinstance(s, Mapping) for s in steps):
        raise InputError("manifest field steps is not a list of steps")
    released = {"output_hash": (rel.get("input") or {}).get("hash")}
    return report_mod.planned_checks(types.SimpleNamespace(steps=steps), released, claims, registry)


def claim_checks(claims: Any, planned: list[dict[str, Any]],
                 registry: Any) -> tuple[list[dict[str, Any]], list[tuple[bool, str, str]]]:
    """What ``claims`` (the released table's claimed models) call for beyond ``planned``:
    each claimed privacy model checked with its **claimed parameters** (those the check
    plugin declares), unless a planned check of that model runs with default parameters
    (which read the claim). Returns ``(checks, notes)``: the checks (``claim: True``) and
    ``(ok, what, detail)`` for claims that cannot be checked on the published files: a model
    with no installed check plugin, or invalid claimed parameters (not ok); a model whose
    check needs the original table (ok, said)."""
    from anonflow.params import ParamError, validate_params

    checks: list[dict[str, Any]] = []
    notes: list[tuple[bool, str, str]] = []
    if not isinstance(claims, Mapping):
        return checks, [(False, "manifest field release.claims", f"is not a mapping of model -> parameters: "
                                                                f"{_show(claims)}")]
    for name in sorted(claims):
        given, what = claims[name], f"claimed model {name}"
        if not isinstance(given, Mapping):
            notes.append((False, what, f"release.claims.{name} is not a mapping of parameters: {_show(given)}"))
            continue
        if not registry.has("metric", name):
            notes.append((False, what, "no installed check plugin of that name: the claim cannot be checked on the "
                                       "published files"))
            continue
        reg = registry.get("metric", name)
        if reg.obj.category != "privacy" or reg.obj.requires_original:
            notes.append((True, what, "not checked on the published files: " + (
                "its check needs the original table" if reg.obj.requires_original else
                f"the plugin of that name is a {reg.obj.category} metric, not a privacy check")))
            continue
        try:
            defaults = validate_params(reg.obj.params, {})
        except ParamError:
            defaults = None
        reads_claim = defaults is not None and any(
            c["check"] == name and canonical(plain(c["params"])) == canonical(plain(defaults)) for c in planned)
        if reads_claim:
            continue  # a planned check reads the claim
        declared = {p.name for p in reg.obj.params}
        try:
            params = validate_params(reg.obj.params,
                                     {k: v for k, v in given.items() if k in declared and v is not None})
        except ParamError as exc:
            notes.append((False, what, f"its claimed parameters are not valid for the check: {exc}"))
            continue
        checks.append({"check": name, "params": params, "evaluated": None,
                       "plugin": {"distribution": reg.distribution, "version": reg.version}, "recheck": True,
                       "claim": True})
    return checks, notes


def threshold_misses(check: Mapping[str, Any], steps: Any) -> list[str]:
    """The thresholds of the evaluate step that planned ``check`` (``evaluated``) on the
    check's values, that its ``result`` (on the published files) misses."""
    where = check.get("evaluated")
    if where is None or not isinstance(steps, list) or check.get("result") is None:
        return []
    step = next((s for s in steps if isinstance(s, Mapping) and s.get("step") == where
                 and s.get("kind") == "evaluate"), None)
    thresholds = ((step or {}).get("params") or {}).get("thresholds") or {}
    name, result, out = check["check"], check.get("result") or {}, []
    if not isinstance(thresholds, Mapping):
        return [f"step {where}'s thresholds are not a mapping: {_show(thresholds)}"]
    for key, bound in sorted(thresholds.items()):
        if key != name and not str(key).startswith(name + "."):
            continue
        value = result.get(key)
        try:
            ok = isinstance(bound, Mapping) and bool(bound) and verdict(value, bound, key) is True
        except TypeError:
            ok = False
        if not ok:
            out.append(f"{key} = {_show(value)} on the published files misses the threshold {_show(bound)} of "
                       f"evaluate step {where}")
    return out


def _error_text(exc: Exception) -> str:
    """An anonflow error's own message; another exception's type and text (never a traceback)."""
    message = getattr(exc, "message", None)
    return message if isinstance(message, str) else f"{type(exc).__name__}: {exc}"


def _check_key(c: Mapping[str, Any]) -> tuple[Any, ...]:
    return (c.get("check"), canonical(plain(c.get("params"))), c.get("evaluated"), c.get("recheck") is True)


def _checks_list(checks: list[Mapping[str, Any]]) -> str:
    if not checks:
        return "no check"
    def params(c: Mapping[str, Any]) -> str:
        text = _params_text(c.get("params") if isinstance(c.get("params"), Mapping) else {})
        return "default parameters, which read the claims" if text == "defaults" else text

    return "; ".join(f"{c.get('check')} ({params(c)}"
                     + (f"; evaluate step {c['evaluated']}" if c.get("evaluated") else "; from the claims") + ")"
                     for c in checks)


def _verify_checks(release: Path, manifest: Mapping[str, Any], registry: Any, f: Findings, sql: Any) -> None:
    """Step 2 of :func:`verify`: derive the checks, compare the manifest's list with them,
    run them (and the claimed models with their claimed parameters) on the published files."""
    rel = manifest.get("release") or {}
    lossy = rel.get("layout") == "lossy-join"
    recorded = manifest.get("checks")
    if not isinstance(recorded, list) or not all(isinstance(c, dict) for c in recorded):
        f.add(False, "manifest field checks", "is not a list of checks")
        recorded = [c for c in recorded if isinstance(c, dict)] if isinstance(recorded, list) else []
    try:
        derived = derive_checks(manifest, registry)
    except Exception as exc:
        f.add(False, "privacy checks", "cannot be derived from the release's claims and evaluate steps: "
                                       + _error_text(exc))
        return
    extra, notes = claim_checks(rel.get("claims") if rel.get("claims") is not None else {}, derived, registry)
    for ok, what, detail in notes:
        f.add(ok, what, detail, show=True)
    rec_plugin = [(i, c) for i, c in enumerate(recorded) if c.get("check") not in BUILTIN_CHECKS]
    if [_check_key(c) for _, c in rec_plugin] != [_check_key(c) for c in derived]:
        f.add(False, "manifest field checks", f"records {_checks_list([c for _, c in rec_plugin])}; the release's "
                                              f"claims (release.claims) and the evaluate steps of its table call for "
                                              f"{_checks_list(derived)}")
    try:
        again = run_file_checks(release, manifest, derived + extra, registry, sql)
    except Exception as exc:
        f.add(False, "privacy checks", "cannot be run on the published files: " + _error_text(exc))
        return
    # the lossy-join pair's own checks
    rec_builtin = {c.get("check"): (i, c) for i, c in enumerate(recorded) if c.get("check") in BUILTIN_CHECKS}
    new_builtin = [c for c in again if c["check"] in BUILTIN_CHECKS]
    for name in sorted(set(rec_builtin) - {c["check"] for c in new_builtin}):
        f.add(False, "manifest field checks", f"records {name} (checks[{rec_builtin[name][0]}]), which a "
                                              f"{rel.get('layout')!r} release does not have")
    for new in new_builtin:
        if new["check"] in rec_builtin:
            _compare_check(f, *rec_builtin[new["check"]], new, lossy, manifest)
        elif new["check"] == "lossy-join-k":  # written before the k figures were recorded: show them
            from .lossyjoin import k_sentence

            f.add(True, "lossy-join k figures", "not recorded in this release's manifest; from the published "
                                                "files: " + k_sentence(new["result"]), show=True)
        else:
            f.add(False, "manifest field checks", f"records no {new['check']} check; a lossy-join release does")
            _compare_check(f, None, None, new, lossy, manifest)
    # the derived checks, each against the recorded entry with the same check and parameters
    unmatched = list(rec_plugin)
    steps = manifest.get("steps")
    for new in [c for c in again if c["check"] not in BUILTIN_CHECKS and not c.get("claim")]:
        j = next((n for n, (_, c) in enumerate(unmatched) if _check_key(c) == _check_key(new)), None)
        i, old = unmatched.pop(j) if j is not None else (None, None)
        label = _compare_check(f, i, old, new, lossy, manifest)
        for miss in threshold_misses(new, steps):
            f.add(False, label, miss)
    # each claimed model with its claimed parameters
    for new in [c for c in again if c.get("claim")]:
        label = f"claimed model {new['check']} ({_params_text(new['params'])}, release.claims)"
        if new["holds"] is False:
            f.add(False, label, "does not hold on the published files: " + ", ".join(
                f"{k} = {v}" for k, v in (new["result"] or {}).items()))
        elif new["holds"] is None:
            f.add(True, label, "measures only (no model parameter to hold); checked on the published files")
        else:
            f.add(True, label, "holds on the published files")


def _compare_check(f: Findings, i: int | None, old: Mapping[str, Any] | None, new: Mapping[str, Any], lossy: bool,
                   manifest: Mapping[str, Any]) -> str:
    """One check re-run on the published files against its recorded entry ``old``
    (``checks[i]``; None when the manifest does not record it); returns its label."""
    label = (f"privacy check {new['check']} (manifest checks[{i}])" if i is not None else
             f"privacy check {new['check']} ({_params_text(new['params'])}; not recorded in the manifest)")
    if new["holds"] is None and not new["recheck"]:
        f.add(True, label, "needs the original table; not re-checked on the published files")
        return label
    old = old or {}
    diffs = [k for k in sorted(set(old.get("result") or {}) | set(new["result"] or {}))
             if not _same((old.get("result") or {}).get(k), (new["result"] or {}).get(k))]
    scope = ""
    by = (new.get("params") or {}).get("by") or (((manifest.get("release") or {}).get("claims") or {})
                                                .get("k-anonymity") or {}).get("by")
    if lossy and new["check"] == "k-anonymity" and by == "class":
        scope = ": k-anonymity of the classes (records per class id), not of the QI values"
    if new["holds"] is False:
        f.add(False, label, "does not hold on the published files: " + ", ".join(
            f"{k} = {v}" for k, v in (new["result"] or {}).items()))
    elif i is None:
        f.add(True, label, f"holds on the published files{scope}" if new["holds"] else
              "measures only; the published files give " + ", ".join(f"{k} = {v}" for k, v in
                                                                     (new["result"] or {}).items()))
    elif diffs or old.get("holds") is not new["holds"]:
        f.add(False, label, "the published files give another result than the recorded one: " + "; ".join(
            [f"{k}: recorded {(old.get('result') or {}).get(k)!r}, now {(new['result'] or {}).get(k)!r}"
             for k in diffs] + ([] if old.get("holds") is new["holds"] else
                                [f"holds: recorded {old.get('holds')!r}, now {new['holds']!r}"])))
    elif new["check"] == "lossy-join-k":
        from .lossyjoin import k_sentence

        f.add(True, label, "measures only, and the published files give the recorded figures: "
                           + k_sentence(new["result"]), show=True)
    elif new["holds"] is None:
        f.add(True, label, f"no model parameter to check against (it measures only); the published files "
                           f"give the recorded values ({_params_text(new['params'])})")
    else:
        f.add(True, label, f"holds on the published files ({_params_text(new['params'])}){scope}",
              show=bool(scope))
    return label


def _check_signature(release: Path, manifest: Mapping[str, Any], public_key: Any, key_path: Path | None,
                     f: Findings) -> dict[str, Any]:
    """The signature's finding; returns ``{"status", ...}``: ``unsigned``, ``signed-unchecked``
    (signed, no ``--key``), ``valid`` or ``invalid``."""
    sig = manifest.get("signature")
    sig_file = release / SIGNATURE
    why = not_regular(sig_file)
    if why is not None and why != "does not exist":
        f.add(False, "signature", f"{SIGNATURE} {why}: not opened (a release holds only regular files)")
        return {"status": "invalid", "reason": "not a regular file"}
    has_file = why is None
    fp = sig.get("public_key_sha256") if isinstance(sig, dict) else None
    if sig is None and not has_file:
        if public_key is not None:
            f.add(False, "signature", f"the release is unsigned (no {SIGNATURE}, and the manifest records no "
                                      f"signature), but --key {key_path} asks for a signed one")
            return {"status": "invalid", "reason": "unsigned"}
        f.add(True, "signature", show=True, detail="unsigned: the release carries no signature; its authenticity rests on where you got "
                                 "it (a release signed with the publisher's 'sign' is checked with --key)")
        return {"status": "unsigned"}
    if not isinstance(sig, dict) or not has_file:
        f.add(False, "signature", f"{SIGNATURE} is missing, but the manifest records a signature" if not has_file else
              f"{SIGNATURE} is present, but the manifest records no signature")
        return {"status": "invalid", "reason": "inconsistent"}
    if public_key is None:
        f.add(True, "signature", show=True, detail=f"signed (Ed25519, public key sha256 {fp}), but the signature was not checked: "
                                 "give --key PUBLIC_KEY")
        return {"status": "signed-unchecked", "public_key_sha256": fp}
    given = key_fingerprint(public_key)
    try:
        with os.fdopen(open_regular(sig_file), "rb") as fh:
            raw = base64.b64decode(fh.read(1 << 16).strip(), validate=True)
        with os.fdopen(open_regular(release / MANIFEST), "rb") as fh:
            signed_bytes = fh.read()
        public_key.verify(raw, signed_bytes)
        good = True
    except Exception:
        good = False
    if not good:
        f.add(False, "signature", f"{SIGNATURE} is not a valid signature of {MANIFEST} under the key {key_path} "
                                  f"(sha256 {_short(given)}): the manifest (or a file it lists, with its digests "
                                  "recomputed) was changed after signing, or it was signed with another key")
        return {"status": "invalid", "public_key_sha256": fp, "key": given}
    if fp != given:
        f.add(False, "signature", f"the manifest records public key sha256 {_short(fp)}, but it verifies under "
                                  f"{_short(given)}")
        return {"status": "invalid", "public_key_sha256": fp, "key": given}
    f.add(True, "signature", show=True, detail=f"{SIGNATURE} is a valid Ed25519 signature of {MANIFEST} by the key {key_path} "
                             f"(sha256 {given})")
    return {"status": "valid", "public_key_sha256": fp}


def _params_text(params: Mapping[str, Any]) -> str:
    return report_mod._params_text(params)


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
    rel_path = _inside(((manifest.get("release") or {}).get("params") or {}).get("path"))
    here = Path(os.path.realpath(release))
    parts = rel_path.split("/") if rel_path else []
    out_dir = here.parents[len(parts) - 1] if parts and len(parts) < len(here.parts) and \
        list(here.parts[-len(parts):]) == parts else here.parent
    base = out_dir.parent
    try:
        home = Path(os.path.realpath(Path.home()))
    except (RuntimeError, KeyError, OSError):
        home = None
    if base == out_dir or base == Path(base.anchor) or base == home:
        return None, (f"the folder above the output folder {out_dir} is {base}, the filesystem root or the home "
                      "folder, which is never searched")
    missing = [p for p in paths if _inside(p) is None or not_regular(base / _inside(p)) is not None]
    if missing:
        return None, (f"{base} (the folder above the output folder {out_dir}, the only one searched) does not hold "
                      + ", ".join(map(str, missing)) + " as regular files")
    return base, f"{base} (the folder above the output folder {out_dir}; give --sources DIR for another)"


def diff_json(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where two JSON values differ, as (path, a, b), paths like ``steps[2].output_hash``."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            p = f"{path}.{k}" if path else k
            if k not in a or k not in b:
                out.append((p, a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                out += diff_json(a[k], b[k], p)
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        for i in range(max(len(a), len(b))):
            p = f"{path}[{i}]"
            if i >= len(a) or i >= len(b):
                out.append((p, a[i] if i < len(a) else "<absent>", b[i] if i < len(b) else "<absent>"))
            else:
                out += diff_json(a[i], b[i], p)
        return out
    return [] if a == b and type(a) is type(b) else [(path, a, b)]


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def recorded_files(manifest: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every file a re-run of the release may read, from the manifest: the sources and the
    files the steps' recorded parameters name (hierarchy files, grading files), as
    ``{relative path: {sha256, what, text}}`` (``text``: hashed as load_grading hashes, the
    UTF-8 text with universal newlines), and the reasons some cannot be accepted (absolute
    paths, ``..`` escapes, a file recorded twice with two digests)."""
    files: dict[str, dict[str, Any]] = {}
    problems: list[str] = []

    def accept(path: Any, sha: Any, what: str, text: bool = False) -> None:
        rel = _inside(path)
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
        accept(s.get("path"), s.get("sha256"), f"source {s.get('name')}")
    for st in manifest.get("steps") or []:
        params = st.get("params") or {}
        if st.get("kind") == "hierarchy" and isinstance(params, dict):
            for column, spec in params.items():
                if not isinstance(spec, dict):
                    continue
                for key, sha in (spec.get("files") or {}).items():
                    accept((spec.get("params") or {}).get(key), sha, f"hierarchy file of {st.get('step')}.{column}")
        elif st.get("kind") == "typing":
            for grading in _gradings(params):
                if grading.get("source") is not None:
                    accept(grading.get("source"), grading.get("sha256"), f"grading file of step {st.get('step')}",
                           text=True)
    return files, problems


def _gradings(value: Any) -> list[dict[str, Any]]:
    """Every ``grading`` mapping inside a typing step's parameters."""
    out: list[dict[str, Any]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "grading" and isinstance(v, dict):
                out.append(v)
            else:
                out += _gradings(v)
    elif isinstance(value, list):
        for v in value:
            out += _gradings(v)
    return out


def _named_files(spec: Any, registry: Any) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """What the loaded workflow (after ``--set``) names, before anything reads it:
    ``(reads, writes, keys)``: the files its hierarchy and typing steps read, as
    ``(where, path)``; the paths its publish steps write; the signing keys of its releases."""
    reads: list[tuple[str, str]] = []
    writes: list[str] = []
    keys: list[str] = []
    for name, st in spec.steps.items():
        params = st.params or {}
        if st.uses == "hierarchy":
            for column, entry in params.items():
                if not isinstance(entry, Mapping) or len(entry) != 1:
                    continue
                (bname, bparams), = entry.items()
                if not registry.has("hierarchy", str(bname)):
                    continue
                builder = registry.get("hierarchy", str(bname)).obj
                file_keys = tuple(getattr(builder, "files", ()) or ())
                if isinstance(bparams, Mapping):
                    values = [bparams.get(k) for k in file_keys]
                else:
                    values = [bparams] if getattr(builder, "primary", None) in file_keys else []
                reads += [(f"step {name}: hierarchy file of {column}", v) for v in values if v is not None]
        elif st.uses == "typing":
            def walk(value: Any) -> None:
                if isinstance(value, Mapping):
                    for k, v in value.items():
                        if k == "grading" and isinstance(v, str):
                            reads.append((f"step {name}: grading file", v))
                        else:
                            walk(v)
                elif isinstance(value, list):
                    for v in value:
                        walk(v)
            walk(params)
        elif st.uses == "publish":
            pub = params.get("publisher")
            outs: tuple[str, ...] = ("path",)
            if isinstance(pub, str) and registry.has("publisher", pub):
                outs = tuple(getattr(registry.get("publisher", pub).obj, "outputs", ("path",)) or ("path",))
            writes += [f"step {name}: {k} = {params[k]!r}" if _inside(params[k]) is None else ""
                       for k in outs if params.get(k) is not None]
            if pub == "release" and params.get("sign") is not None:
                keys.append(params["sign"])
    return reads, [w for w in writes if w], keys


def _outside_paths(spec: Any) -> list[str]:
    """Step parameters that name an existing absolute path: a re-run reads nothing outside its
    scratch folder, whatever plugin would read it."""
    found: list[str] = []

    def walk(where: str, value: Any) -> None:
        if isinstance(value, str):
            if 1 < len(value) < 4096 and "\0" not in value and os.path.isabs(value):
                try:
                    exists = os.path.lexists(value)
                except (OSError, ValueError):
                    exists = False
                if exists:
                    found.append(f"{where} names {value!r}")
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(where, v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(where, v)

    for name, st in spec.steps.items():
        walk(f"step {name}", st.params)
    return found


class _Refused(Exception):
    """A recorded file that a re-run does not read (a symbolic link, not a regular file, ...)."""


def _open_under(base: Path, rel: str) -> int:
    """A read-only descriptor of the regular file ``base/rel``: the folders on its path may be
    symbolic links only if they stay inside ``base``; the file itself must be a regular file
    (a symbolic link is not followed, a FIFO not waited on). Raises :class:`_Refused` or
    ``FileNotFoundError``."""
    root = os.path.realpath(base)
    folder = os.path.realpath(os.path.join(root, posixpath.dirname(rel)))
    if folder != root and not folder.startswith(root.rstrip(os.sep) + os.sep):
        raise _Refused(f"leads out of {root} (a folder on its path is a symbolic link to {folder})")
    try:
        dfd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _Refused(f"cannot be read: {exc.strerror or exc}") from None
    try:
        return open_regular(Path(posixpath.basename(rel)), dir_fd=dfd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _Refused(exc.strerror or str(exc)) from None
    finally:
        os.close(dfd)


def _stream_sha256(fh: Any, text: bool) -> str:
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


def _copy_pinned(base: Path, rel: str, dst: Path, sha: str, text: bool) -> str:
    """Copy the recorded file ``base/rel`` (see :func:`_open_under`) to ``dst`` (a new file)
    only if it is the recorded one; return its sha256. The file is hashed first, streamed,
    without copying anything; on a mismatch nothing is copied. A match is copied from the
    same descriptor and the copy is hashed again: a file changed or swapped in between leaves
    no copy and its new digest is returned."""
    fd = _open_under(base, rel)
    with os.fdopen(fd, "rb") as fin:
        digest = _stream_sha256(fin, text)
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
                again = _stream_sha256(copy, text)
        except BaseException:
            dst.unlink(missing_ok=True)
            raise
    if again != sha:
        dst.unlink(missing_ok=True)
    return again


@contextlib.contextmanager
def _cleanup_on_termination() -> Any:
    """While the block runs (in the main thread), SIGTERM and SIGHUP raise ``SystemExit``
    (128 + the signal's number), so that the block's ``finally`` cleanup runs before the
    process ends; a second signal during the cleanup is ignored. The previous handlers are
    restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signum, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    previous: dict[int, Any] = {}
    for name in ("SIGTERM", "SIGHUP"):
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


def _unsigned_form(manifest: Mapping[str, Any]) -> bytes:
    """The manifest's bytes as if unsigned (a re-run signs with a throwaway key)."""
    body = {k: v for k, v in manifest.items() if k != "integrity"}
    body["signature"] = None
    body["integrity"] = integrity(body)
    return manifest_bytes(body)


def _rerun(release: Path, manifest: Mapping[str, Any], f: Findings, registry: Any, *, db: Path | None,
           sources: Path | None) -> None:
    """Re-run the recorded workflow, confined: the workflow text is loaded from a scratch
    folder (``mkdtemp``, owner-only); its sources must be exactly the manifest's, and every
    file it names (sources, hierarchy files, grading files) must be relative, inside the
    workflow's folder (:func:`sources_base`) and match the sha256 the manifest records; each
    is hashed in place, then copied into the scratch folder at the same relative path (see
    :func:`_copy_pinned`), and the workflow runs from there into a scratch store (or ``db``)
    and a scratch output folder, so it cannot see any other file. Anything else is a failed
    ``re-run: not attempted: ...`` finding, and nothing is run. The scratch folder is removed
    afterwards, also when verify is ended by SIGTERM or SIGHUP."""
    with _cleanup_on_termination():
        _rerun_confined(release, manifest, f, registry, db=db, sources=sources)


def _rerun_confined(release: Path, manifest: Mapping[str, Any], f: Findings, registry: Any, *, db: Path | None,
                    sources: Path | None) -> None:
    from anonflow.dag import build_plan
    from anonflow.errors import AnonflowError
    from anonflow.runner import Runner
    from anonflow.spec import _set_path, load_workflow
    from anonflow.store import Store

    def refuse(reason: str) -> None:
        f.add(False, "re-run", f"not attempted: {reason}")

    wf = manifest.get("workflow") or {}
    wf_name = wf.get("file")
    if not isinstance(wf_name, str) or not _NAME.match(wf_name) or not isinstance(wf.get("text"), str):
        return refuse(f"workflow.file {wf_name!r} is not a plain file name, or workflow.text is missing")
    if hashlib.sha256(wf["text"].encode()).hexdigest() != wf.get("sha256"):
        return refuse("workflow.text does not match workflow.sha256")
    wanted, problems = recorded_files(manifest)
    if problems:
        return refuse("; ".join(problems))
    release_step = (manifest.get("release") or {}).get("step")
    rel_path = _inside(((manifest.get("release") or {}).get("params") or {}).get("path"))
    if rel_path is None:
        return refuse("release.params.path is an absolute path or leaves the output folder")
    source_paths = [p for p in wanted if wanted[p]["what"].startswith("source ")]
    base, where = sources_base(release, {"sources": [{"path": p} for p in source_paths],
                                         "release": {"params": {"path": rel_path}}}, sources)
    if base is None and wanted:
        return refuse(f"cannot find the sources: {where} (give the workflow's folder with --sources DIR)")
    if base is not None:
        f.add(True, "sources", f"the recorded files are read from {where}", show=True)

    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix="anonflow-verify-")).resolve()
        os.chmod(tmp, 0o700)
        src_dir = tmp / "workflow"
        src_dir.mkdir(mode=0o700)
        wf_path = src_dir / wf_name
        wf_path.write_text(wf["text"], encoding="utf-8")
        try:
            spec = load_workflow(wf_path, (), manifest.get("seed"))
            for step, param, value in manifest.get("overrides") or []:
                if step not in spec.steps:
                    raise InputError(f"override {step}.{param}: the workflow has no step {step!r}")
                _set_path(wf_path, spec.steps[step].params, step, param, value)
        except AnonflowError as exc:
            return refuse(f"the recorded workflow cannot be loaded: {exc}")
        # (a) its sources are exactly the manifest's; every other file it names is recorded
        recorded = {s.get("name"): s for s in manifest.get("sources") or []}
        reasons = []
        if set(spec.sources) != set(recorded):
            reasons.append(f"the workflow's sources ({', '.join(sorted(spec.sources)) or 'none'}) are not the "
                           f"manifest's ({', '.join(sorted(map(str, recorded))) or 'none'})")
        for name, src in spec.sources.items():
            rec = recorded.get(name)
            if rec is None:
                continue
            if src.format != rec.get("format"):
                reasons.append(f"source {name} is {src.format} in the workflow, {rec.get('format')} in the manifest")
            if src.path is None:
                if rec.get("path") is not None:
                    reasons.append(f"source {name} names no file in the workflow; the manifest records {rec['path']}")
                continue
            rel = os.path.relpath(src.path, src_dir).replace(os.sep, "/")
            if _inside(rel) is None:
                reasons.append(f"source {name} reads {rel!r}, outside the workflow's folder")
            elif _inside(rel) != _inside(rec.get("path")):
                reasons.append(f"source {name} reads {rel} in the workflow, but the manifest records {rec.get('path')}")
        reads, writes, keys = _named_files(spec, registry)
        for where, p in reads:
            rel = _inside(str(p))
            if rel is None:
                reasons.append(f"{where} is {p!r}: an absolute path or one leaving the workflow's folder")
            elif rel not in wanted:
                reasons.append(f"{where} is {rel}, which the manifest does not record with a sha256")
        reasons += [f"{w}: an absolute path or one leaving the output folder" for w in writes]
        reasons += [f"{w}: outside the workflow's folder" for w in _outside_paths(spec)]
        for k in keys:
            if _inside(k) is None:
                reasons.append(f"a release's signing key is {k!r}: an absolute path or one leaving the workflow's "
                               "folder")
        if keys and manifest.get("signature") is not None:
            try:
                _crypto()
            except InputError:
                reasons.append(f"the release is signed, and re-running it signs with a throwaway key, but {SIGN_EXTRA}")
        if release_step not in spec.steps:
            reasons.append(f"the workflow has no step {release_step!r} (manifest release.step)")
        if reasons:
            return refuse("; ".join(reasons))
        # (b) hash each accepted file in place; copy only a match, and hash the copy again
        changed = False
        for i, (rel, info) in enumerate(sorted(wanted.items())):
            if base is None:
                f.add(False, info["what"], f"{rel} is missing (no folder to read it from)")
                changed = True
                continue
            try:
                digest = _copy_pinned(base, rel, src_dir / rel, info["sha256"], info["text"])
            except FileNotFoundError:
                f.add(False, info["what"], f"{rel} (under {base}) is missing")
                changed = True
                continue
            except _Refused as exc:
                f.add(False, info["what"], f"{rel} (under {base}) {exc}: not read")
                changed = True
                continue
            except OSError as exc:
                f.add(False, info["what"], f"{rel} cannot be copied: {exc.strerror or exc}")
                changed = True
                continue
            if digest != info["sha256"]:
                idx = next((j for j, s in enumerate(manifest.get("sources") or []) if _inside(s.get("path")) == rel),
                           None)
                where = f"sources[{idx}].sha256" if idx is not None else "its step's parameters"
                f.add(False, info["what"], f"{rel} has changed: sha256 {_short(digest)}, but the manifest records "
                                           f"{_short(info['sha256'])} ({where})")
                changed = True
            else:
                f.add(True, info["what"], f"{rel} matches its recorded sha256")
        if changed:
            return refuse("a source or a file the workflow reads differs from the one recorded")
        for k in keys:  # the re-run cannot sign with the publisher's key: it signs with a throwaway one
            ed25519, serialization = _crypto()
            target = src_dir / _inside(k)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        try:
            spec = dataclasses.replace(spec, overrides=tuple(tuple(o) for o in manifest.get("overrides") or []))
            history = [{"params": p["params"], "metrics": p["metrics"]}
                       for p in ((manifest.get("sweep") or {}).get("points") or [])]
            plan = build_plan(spec, registry)
            with Store(db if db is not None else tmp / "rerun.duckdb") as store:
                Runner(store, registry, history=history).run(spec, use_cache=False, output_dir=tmp / "out", plan=plan)
        except AnonflowError as exc:
            f.add(False, "re-run", f"the recorded workflow failed when re-run: {exc}")
            return
        except Exception as exc:  # never a traceback for someone else's release
            f.add(False, "re-run", f"the recorded workflow failed when re-run: {type(exc).__name__}: {exc}")
            return
        again_dir = tmp / "out" / rel_path
        if not (again_dir / MANIFEST).is_file():
            f.add(False, "re-run", f"the re-run wrote no release at {rel_path}")
            return
        again = json.loads((again_dir / MANIFEST).read_text(encoding="utf-8"))
        skip = ("integrity", "signature")
        diffs = diff_json({k: v for k, v in manifest.items() if k not in skip},
                          {k: v for k, v in again.items() if k not in skip})
        for path, a, b in diffs:
            f.add(False, f"manifest field {path}", f"recorded {_show(a)}, re-run gives {_show(b)}")
        signed = manifest.get("signature") is not None or again.get("signature") is not None
        names = sorted({e.get("path") for e in manifest.get("files") or [] if _NAME.match(str(e.get("path")))}
                       | {e["path"] for e in again.get("files") or []} | {MANIFEST})
        same_files = 0
        for name in names:
            a, b = release / name, again_dir / name
            why = not_regular(a)
            if why is not None and why != "does not exist":
                f.add(False, f"file {name}", f"{why} in the release: not compared")
            elif why is not None or not b.is_file():
                f.add(False, f"file {name}", "exists only in the " + ("re-run" if b.is_file() else "release"))
            elif name == MANIFEST and signed:
                if _unsigned_form(manifest) != _unsigned_form(again):
                    f.add(False, f"file {name}", "differs from the re-run's (signatures aside)")
                else:
                    same_files += 1
            elif regular_sha256(a) != file_sha256(b):
                f.add(False, f"file {name}", f"differs from the re-run's: sha256 {_short(regular_sha256(a))} vs "
                                             f"{_short(file_sha256(b))}")
            else:
                same_files += 1
        if not diffs and same_files == len(names):
            f.add(True, "re-run", f"the recorded workflow re-run gives the same {len(again.get('steps') or [])} step "
                                  f"hashes and {len(names)} byte-identical files"
                                  + (" (manifest.json compared without its signature)" if signed else ""))
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


PLUGINS = [Release()]
