"""The release format, at the bottom of the publishing family: the manifest's fields and its
canonical bytes and digests (:func:`integrity`), loading it back (regular files only), its file
entries, the data files' Parquet metadata keys, writing and reading the data files (CSV beside
Parquet), the published table rebuilt from them (:func:`load_release_table`), and what of a
run a manifest records (:func:`public_overrides`, :func:`declared_sources`). The publisher,
its report, its checks, ``anonflow verify`` and ``anonflow apply`` build on this module; it
imports none of them.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import posixpath
import re
import stat
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from anonflow.api import CLASS, ROW, InputError, RunInfo, TypedTable, Typing, canonical_json

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


#: Parquet metadata keys of a release's data files: the typing, the file's role, the lossy-join pair
TYPING_KEY = "anonflow.typing"


RELEASE_KEY = "anonflow.release"


LOSSY_KEY = "anonflow.lossy-join"


PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


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


def typing_of(data: pa.Table, manifest: Mapping[str, Any], where: str) -> Typing:
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
        typing = typing_of(data, manifest, f["path"])
        data = data.replace_schema_metadata(None)
    else:
        fq, fs = file_entry(manifest, "qi"), file_entry(manifest, "sa")
        qi = read_parquet(release, fq)
        sa = read_parquet(release, fs)
        typing = typing_of(qi, manifest, fq["path"])
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


def unsigned_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
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


def perturbations(steps: Any, released: str | None) -> list[dict[str, Any]]:
    """The perturbations behind the table step ``released`` made: every algorithm step of its
    lineage (all inputs, walked up to the sources) that declared what it changed
    (:meth:`anonflow.api.Algorithm.perturbs`), in run order, each ``{"step", "uses",
    "plugin_version", "columns": {column: declaration}}``.

    ``steps`` are step records: a run's (the declaration in ``summary.perturbs``) or a
    manifest's (``perturbs``); anything malformed in a manifest is skipped here (its
    digests say whether it was altered)."""
    if not isinstance(steps, list):
        return []
    by_name = {s.get("step"): s for s in steps if isinstance(s, Mapping) and isinstance(s.get("step"), str)}
    seen: set[str] = set()
    todo = [released] if isinstance(released, str) else []
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        todo += [i.get("name") for i in by_name[name].get("inputs") or [] if isinstance(i, Mapping)]
    out = []
    for s in steps:
        if not isinstance(s, Mapping) or s.get("step") not in seen or s.get("kind") != "algorithm":
            continue
        summary = s.get("summary") if isinstance(s.get("summary"), Mapping) else {}
        declared = s.get("perturbs", summary.get("perturbs"))
        if isinstance(declared, Mapping) and declared:
            out.append({"step": s["step"], "uses": s.get("uses"), "plugin_version": s.get("plugin_version"),
                        "columns": dict(declared)})
    return out


def perturbation_text(columns: Mapping[str, Any]) -> str:
    """One line for a step's declaration: ``column: kind (key value, ...); ...``."""
    parts = []
    for column, what in columns.items():
        what = what if isinstance(what, Mapping) else {}
        rest = ", ".join(f"{k} {v if isinstance(v, str) else canonical_json(v)}" for k, v in what.items()
                         if k != "kind")
        parts.append(f"{column}: {what.get('kind')}" + (f" ({rest})" if rest else ""))
    return "; ".join(parts)
