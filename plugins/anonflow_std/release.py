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

:func:`verify` re-hashes the files, re-runs the checks on the published files alone and,
with ``rerun``, re-runs the recorded workflow and compares every hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
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
from .lossyjoin import split_tables

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
REPORT = "report.html"
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
    for i, f in enumerate(data.schema):
        if pa.types.is_nested(f.type):
            data = data.set_column(i, f.name, _json_cells(data.column(f.name)))
    return data


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


def load_manifest(release: Path) -> dict[str, Any]:
    path = release / MANIFEST
    if not release.is_dir():
        raise InputError(f"{release} is not a directory (expected a release directory)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{release} holds no {MANIFEST}: not an anonflow release") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path} cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != "anonflow-release":
        raise InputError(f"{path} is not an anonflow release manifest")
    return data


def _file(manifest: Mapping[str, Any], role: str, fmt: str = "parquet") -> dict[str, Any]:
    for f in manifest.get("files") or []:
        if f.get("role") == role and f.get("format") == fmt:
            return f
    raise InputError(f"the manifest lists no {fmt} file with role {role!r}")


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
        data = pq.read_table(release / f["path"])
        typing = _typing_of(data, manifest, f["path"])
        data = data.replace_schema_metadata(None)
    else:
        fq, fs = _file(manifest, "qi"), _file(manifest, "sa")
        qi = pq.read_table(release / fq["path"])
        sa = pq.read_table(release / fs["path"])
        typing = _typing_of(qi, manifest, fq["path"])
        info = json.loads((qi.schema.metadata or {}).get(_LOSSY_KEY.encode(), b"{}"))
        cls_col, s, cnt = info.get("class_column"), info.get("sensitive"), info.get("count_column")
        if not cls_col or not s or not cnt:
            raise InputError(f"{fq['path']}: no {_LOSSY_KEY} metadata naming the class, sensitive and count columns")
        qcls = qi.column(cls_col).to_numpy(zero_copy_only=False)
        order = np.argsort(qcls, kind="stable")
        qi = qi.take(pa.array(order)).replace_schema_metadata(None)
        sa = sa.sort_by([(cls_col, "ascending"), (s, "ascending")])
        counts = sa.column(cnt).to_numpy(zero_copy_only=False).astype(np.int64)
        if (counts < 0).any():
            raise InputError(f"{fs['path']}: negative counts")
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
        return pacsv.read_csv(str(path)).num_rows
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
        qi, sa = pq.read_table(release / fq["path"]), pq.read_table(release / fs["path"])
        info = json.loads((qi.schema.metadata or {}).get(_LOSSY_KEY.encode(), b"{}"))
        bad = sql(pair_consistency_sql(info["class_column"], info["count_column"]), qi=qi, sa=sa).to_pylist()[0]["bad"]
        out.append({"check": "lossy-join-consistency",
                    "params": {"class_column": info["class_column"], "count_column": info["count_column"]},
                    "evaluated": None, "plugin": {"distribution": "anonflow", "version": __version__},
                    "recheck": True, "result": {"inconsistent_classes": float(bad)}, "holds": bad == 0})
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


# -- the publisher ---------------------------------------------------------------------------


class Release(Publisher):
    name = "release"
    version = __version__
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
    )

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, **_: Any) -> None:
        if os.path.isabs(params["path"]):
            raise InputError(f"release: 'path' must be relative (to --out-dir or the workflow's folder), got "
                             f"{params['path']!r}: a release is re-run into a scratch folder by 'anonflow verify --rerun'")
        if not _NAME.match(params["name"]):
            raise InputError(f"release: 'name' must be a plain file name stem, got {params['name']!r}")
        if params["class_column"] == params["count_column"]:
            raise InputError("release: class_column and count_column must differ")

    # -- publish ------------------------------------------------------------------------

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        from anonflow.plugins import get_registry

        self.check(params)
        info = ctx.run_info()
        registry = get_registry()
        target = ctx.resolve_output(params["path"])
        if target.exists() and not (target / MANIFEST).is_file():
            raise InputError(f"release path {params['path']!r} ({target}) exists and is not a release (no {MANIFEST}); "
                             "remove it or choose another path")
        parent = target.parent
        parent.mkdir(parents=True, exist_ok=True)
        remove_stale(parent, target.name)
        tmp = parent / f".{target.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            manifest = self.build(tmp, table, params, info, ctx, registry, target)
            swap_into_place(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        outputs = [Output(str(target / f["path"]), f["sha256"], f["rows"]) for f in manifest["files"]]
        outputs.append(Output(str(target / MANIFEST), file_sha256(target / MANIFEST), 0))
        ctx.note(f"release: {len(manifest['files'])} files and {MANIFEST} in {params['path']} "
                 f"({len(manifest['checks'])} privacy check(s) re-run on the published files)")
        return outputs

    def build(self, out: Path, table: TypedTable, params: Mapping[str, Any], info: RunInfo, ctx: StepContext,
              registry: Any, target: Path) -> dict[str, Any]:
        """Write the release into the (temporary) directory ``out``; return its manifest."""
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
            "overrides": plain(info.run.get("overrides") or []),
            "versions": plain({**(info.run.get("versions") or {}), "matplotlib": _matplotlib_version()}),
            "sources": [self._source(s, base, declared) for s in info.sources],
            "steps": [self._step(s, info, base, release_dir, declared) for s in info.steps],
            "release": {"step": cur.get("step"), "position": cur.get("position"),
                        "params": plain(relative_paths(dict(cur.get("params") or {}), base)),
                        "fingerprint": cur.get("fingerprint"),
                        "input": {"step": released["step"], "hash": released["output_hash"],
                                  "rows": released["rows"]},
                        "layout": layout, "claims": plain(table.claims), "typing": typing_json},
            "files": files,
            "metrics": self._metrics(info),
        }
        planned = report_mod.planned_checks(info, released, table.claims, registry)
        checks = run_file_checks(out, manifest, planned, registry, ctx.sql)
        failing = [c for c in checks if c["holds"] is False]
        if failing:
            raise RunError("release: privacy check(s) do not hold on the published files: " + "; ".join(
                f"{c['check']} ({', '.join(f'{k} = {v:g}' for k, v in c['result'].items() if v is not None)})"
                for c in failing))
        manifest["checks"] = plain(checks)
        manifest["sweep"] = plain(report_mod.sweep(info, registry))
        html = report_mod.render(info, registry)
        (out / REPORT).write_text(html, encoding="utf-8")
        files.append({"path": REPORT, "role": "report", "format": "html", "sha256": file_sha256(out / REPORT),
                      "rows": 0})
        manifest = plain(manifest)
        manifest["integrity"] = integrity(manifest)
        (out / MANIFEST).write_bytes(manifest_bytes(manifest))
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

        params = dict(s.get("params") or {})
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
               sources: Path | None = None) -> dict[str, Any]:
        return verify(release, rerun=rerun, db=db, sources=sources)


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

    def add(self, ok: bool, what: str, detail: str) -> None:
        self.items.append({"ok": bool(ok), "what": what, "detail": detail})

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
           registry: Any = None) -> dict[str, Any]:
    """Check a release directory; return ``{"release", "ok", "findings": [{ok, what, detail}]}``.

    1. the manifest's field digests, the workflow text's sha256 and every file's sha256 and rows;
       metric verdicts against their thresholds; no missing or unexpected file;
    2. the privacy checks, re-run on the published files alone through the registry;
    3. with ``rerun``: the sources' sha256, then the recorded workflow re-run (seed, ``--set``
       values) into a scratch store and folder, and every manifest field and file compared.
    """
    from anonflow.plugins import get_registry
    from anonflow.store import Store

    release = Path(release)
    registry = registry or get_registry()
    manifest = load_manifest(release)
    f = Findings()
    if manifest.get("schema_version") != SCHEMA_VERSION:
        f.add(False, "manifest field schema_version",
              f"is {manifest.get('schema_version')!r}; this anonflow reads version {SCHEMA_VERSION}")
        return {"release": str(release), "ok": False, "findings": f.items}

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
    wf = manifest.get("workflow") or {}
    text_hash = hashlib.sha256(str(wf.get("text", "")).encode()).hexdigest()
    f.add(text_hash == wf.get("sha256"), "manifest field workflow.text",
          "matches workflow.sha256" if text_hash == wf.get("sha256") else
          f"sha256 {_short(text_hash)} but workflow.sha256 records {_short(wf.get('sha256'))}")
    listed = set()
    for i, entry in enumerate(manifest.get("files") or []):
        name = entry.get("path", "")
        listed.add(name)
        path = release / name
        if not path.is_file():
            f.add(False, f"file {name}", f"is missing (manifest files[{i}])")
            continue
        digest = file_sha256(path)
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
    for path in sorted(release.iterdir()):
        if path.name not in listed and path.name != MANIFEST:
            f.add(False, f"file {path.name}", "is not listed in the manifest")
    for i, m in enumerate(manifest.get("metrics") or []):
        expect = verdict(m.get("value"), m.get("threshold"), m.get("name", ""))
        if expect != m.get("passed"):
            f.add(False, f"manifest field metrics[{i}].passed",
                  f"{m.get('step')}.{m.get('name')} = {m.get('value')!r} with threshold {m.get('threshold')!r} "
                  f"{'passes' if expect else 'fails'}, but the manifest records passed = {m.get('passed')!r}")

    # 2. the privacy checks on the published files alone
    scratch = Store(":memory:")
    try:
        recorded_checks = manifest.get("checks") or []
        try:
            plan = [{k: v for k, v in c.items() if k not in ("result", "holds")} for c in recorded_checks
                    if c.get("check") != "lossy-join-consistency"]
            for c in plan:
                if c["recheck"] and not registry.has("metric", c["check"]):
                    raise InputError(f"check plugin {c['check']!r} is not installed")
            again = run_file_checks(release, manifest, plan, registry,
                                    lambda q, params=None, **t: scratch.sql(q, params, **t))
        except Exception as exc:
            f.add(False, "privacy checks", f"cannot be re-run on the published files: {type(exc).__name__}: {exc}")
            again = None
        if again is not None:
            if len(again) != len(recorded_checks):
                f.add(False, "manifest field checks", f"lists {len(recorded_checks)} checks; the published files "
                                                      f"call for {len(again)}")
            for i, (old, new) in enumerate(zip(recorded_checks, again)):
                label = f"privacy check {new['check']} (manifest checks[{i}])"
                if new["holds"] is None and not new["recheck"]:
                    f.add(True, label, "needs the original table; not re-checked on the published files")
                    continue
                diffs = [k for k in sorted(set(old.get("result") or {}) | set(new["result"] or {}))
                         if not _same((old.get("result") or {}).get(k), (new["result"] or {}).get(k))]
                if new["holds"] is False:
                    f.add(False, label, "does not hold on the published files: " + ", ".join(
                        f"{k} = {v}" for k, v in (new["result"] or {}).items()))
                elif diffs or old.get("holds") is not new["holds"]:
                    f.add(False, label, "the published files give another result than the recorded one: " + "; ".join(
                        [f"{k}: recorded {(old.get('result') or {}).get(k)!r}, now {(new['result'] or {}).get(k)!r}"
                         for k in diffs] + ([] if old.get("holds") is new["holds"] else
                                            [f"holds: recorded {old.get('holds')!r}, now {new['holds']!r}"])))
                elif new["holds"] is None:
                    f.add(True, label, f"no model parameter to check against (it measures only); the published files "
                                       f"give the recorded values ({_params_text(new['params'])})")
                else:
                    f.add(True, label, f"holds on the published files ({_params_text(new['params'])})")
    finally:
        scratch.close()

    # 3. re-run
    if rerun:
        _rerun(release, manifest, f, registry, db=db, sources=sources)
    return {"release": str(release), "ok": f.ok, "findings": f.items}


def _params_text(params: Mapping[str, Any]) -> str:
    return report_mod._params_text(params)


def sources_base(release: Path, manifest: Mapping[str, Any], given: Path | None) -> Path | None:
    """The workflow file's folder, against which the sources' recorded paths resolve:
    ``given``, else the nearest folder above the release holding every source."""
    if given is not None:
        return Path(given).resolve()
    paths = [s["path"] for s in manifest.get("sources") or [] if s.get("path")]
    for d in [release.resolve().parent, *release.resolve().parent.parents]:
        if paths and all((d / p).exists() for p in paths):
            return d
    return None


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


def _rerun(release: Path, manifest: Mapping[str, Any], f: Findings, registry: Any, *, db: Path | None,
           sources: Path | None) -> None:
    from anonflow.dag import build_plan
    from anonflow.errors import AnonflowError
    from anonflow.runner import Runner
    from anonflow.spec import load_workflow
    from anonflow.store import Store

    base = sources_base(release, manifest, sources)
    if base is None:
        f.add(False, "re-run", "cannot find the sources: no folder above the release holds "
                               + ", ".join(s["path"] for s in manifest.get("sources") or [] if s.get("path"))
                               + " (give the workflow's folder with --sources DIR)")
        return
    changed = False
    for i, s in enumerate(manifest.get("sources") or []):
        if not s.get("path"):
            continue
        path = base / s["path"]
        if not path.is_file():
            f.add(False, f"source {s['name']}", f"{s['path']} (under {base}) is missing")
            changed = True
            continue
        digest = file_sha256(path)
        if digest != s.get("sha256"):
            f.add(False, f"source {s['name']}", f"{s['path']} has changed: sha256 {_short(digest)}, but the manifest "
                                                f"records {_short(s.get('sha256'))} (sources[{i}].sha256)")
            changed = True
        else:
            f.add(True, f"source {s['name']}", f"{s['path']} matches its recorded sha256")
    if changed:
        f.add(False, "re-run", "not attempted: a source differs from the one recorded")
        return

    wf = manifest["workflow"]
    rel_path = (manifest.get("release") or {}).get("params", {}).get("path")
    with tempfile.TemporaryDirectory(prefix="anonflow-verify-") as tmp_name:
        tmp = Path(tmp_name).resolve()
        (tmp / "wf").mkdir()
        wf_tmp = tmp / "wf" / wf["file"]
        wf_tmp.write_text(wf["text"], encoding="utf-8")
        try:
            spec = load_workflow(wf_tmp, (), manifest["seed"])
            for step, param, value in manifest.get("overrides") or []:
                if step not in spec.steps:
                    raise InputError(f"override {step}.{param}: the workflow has no step {step!r}")
                spec.steps[step].params[param] = value
            srcs = {n: dataclasses.replace(s, path=(base / os.path.relpath(s.path, wf_tmp.parent)).resolve())
                    if s.path is not None else s for n, s in spec.sources.items()}
            spec = dataclasses.replace(spec, path=base / wf["file"], sources=srcs,
                                       overrides=tuple(tuple(o) for o in manifest.get("overrides") or []))
            history = [{"params": p["params"], "metrics": p["metrics"]}
                       for p in ((manifest.get("sweep") or {}).get("points") or [])]
            plan = build_plan(spec, registry)
            with Store(db if db is not None else tmp / "rerun.duckdb") as store:
                Runner(store, registry, history=history).run(spec, use_cache=False, output_dir=tmp / "out", plan=plan)
        except AnonflowError as exc:
            f.add(False, "re-run", f"the recorded workflow failed when re-run: {exc}")
            return
        again_dir = tmp / "out" / str(rel_path)
        if not (again_dir / MANIFEST).is_file():
            f.add(False, "re-run", f"the re-run wrote no release at {rel_path}")
            return
        again = json.loads((again_dir / MANIFEST).read_text(encoding="utf-8"))
        diffs = [d for d in diff_json({k: v for k, v in manifest.items() if k != "integrity"},
                                      {k: v for k, v in again.items() if k != "integrity"})]
        for path, a, b in diffs:
            f.add(False, f"manifest field {path}", f"recorded {_show(a)}, re-run gives {_show(b)}")
        names = sorted({e["path"] for e in manifest.get("files") or []} | {e["path"] for e in again.get("files") or []}
                       | {MANIFEST})
        same_files = 0
        for name in names:
            a, b = release / name, again_dir / name
            if not a.is_file() or not b.is_file():
                f.add(False, f"file {name}", "exists only in the " + ("re-run" if b.is_file() else "release"))
            elif file_sha256(a) != file_sha256(b):
                f.add(False, f"file {name}", f"differs from the re-run's: sha256 {_short(file_sha256(a))} vs "
                                             f"{_short(file_sha256(b))}")
            else:
                same_files += 1
        if not diffs and same_files == len(names):
            f.add(True, "re-run", f"the recorded workflow re-run gives the same {len(again.get('steps') or [])} step "
                                  f"hashes and {len(names)} byte-identical files")


PLUGINS = [Release()]
