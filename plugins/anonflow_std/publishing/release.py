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

import os
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

from anonflow.api import (CLASS, InputError, Output, Param, Publisher, RunError, RunInfo, StepContext, TypedTable,
                          canonical_json, file_sha256, fsync_folder, make_ordinary, relative_paths)

from .. import __version__
from ..common.columns import sensitive_column
from .lossy_join import check_header_name, split_tables
from . import report as report_mod
from .checks import claim_checks, planned_checks, run_file_checks, threshold_misses, verdict
from .manifest import (LOSSY_KEY, MANIFEST, PLAIN_NAME, RELEASE_KEY, REPORT, SCHEMA_VERSION, SIGNATURE, TYPING_KEY,
                       declared_sources, integrity, manifest_bytes, plain, public_overrides, relative_inside,
                       unsigned_params, write_csv, write_parquet)
from .release_apply import apply_release
from .signing import key_fingerprint, keygen, signature_b64, signing_key
from .verify import verify


# -- JSON --------------------------------------------------------------------------------


# -- writing files -------------------------------------------------------------------------


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


# -- signatures (Ed25519, the cryptography package: the 'sign' extra) ------------------------


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
        Param("tradeoff", "list", items="str", default=None, nullable=True,
              help="the report's trade-off plot of a sweep: [risk, utility], each a metric evaluated in every run "
                   "(<metric> or <step>.<metric>); default: the first risk measure and the first utility metric "
                   "whose values differ between the runs"),
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
        if params.get("tradeoff") is not None and (len(params["tradeoff"]) != 2 or len(set(params["tradeoff"])) != 2):
            raise InputError(f"release: 'tradeoff' names two metrics, [risk, utility], got {params['tradeoff']!r}")
        if workflow_dir is not None and params.get("sign") is not None:
            signing_key(Path(workflow_dir), params["sign"])

    # -- publish ------------------------------------------------------------------------

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        self.check(params)
        info = ctx.run_info()
        registry = ctx.registry
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
                        "params": plain(relative_paths(unsigned_params(cur.get("params")), base)),
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
            (out / SIGNATURE).write_bytes(signature_b64(key, data))
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
        params = unsigned_params(s.get("params")) if s["kind"] == "publish" else dict(s.get("params") or {})
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
        if s["kind"] == "algorithm" and summary.get("perturbs"):  # what it changed and its guarantee
            rec["perturbs"] = summary["perturbs"]
        if summary.get("privacy_loss"):  # the differential-privacy loss it spent (Plugin.privacy_loss)
            rec["privacy_loss"] = summary["privacy_loss"]
        if not _reproducible(s, info.registry):  # noise from a safe sampler: verify --rerun compares all but it
            rec["reproducible"] = False
            if summary.get("fitted"):  # what it released apart from the noise (columns, cells, rows)
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
        return report_mod.render(info, info.registry)

    def verify(self, release: Path, *, rerun: bool = False, db: Path | None = None,
               sources: Path | None = None, key: Path | None = None, engine: Any = None) -> dict[str, Any]:
        """Check a release (``anonflow verify``); ``engine`` (:class:`anonflow.api.Engine`, the
        CLI's session) re-runs its workflow with ``rerun``."""
        return verify(release, rerun=rerun, db=db, sources=sources, key=key, engine=engine)

    def apply(self, release: Path, new_data: Path, out: Path | None = None, *, hierarchies: Path | None = None,
              suppression: float | None = None, key: Path | None = None, engine: Any = None) -> dict[str, Any]:
        """Publish new records as the release published its table (``anonflow apply``; see
        :mod:`anonflow_std.publishing.release_apply`); ``key``: the public key its signature must verify under;
        ``engine`` (:class:`anonflow.api.Engine`, the CLI's session) prepares the new batch."""
        return apply_release(release, new_data, out, hierarchies=hierarchies, suppression=suppression, key=key,
                             engine=engine)

    def keygen(self, path: Path) -> tuple[Path, str]:
        """Write an Ed25519 key pair for signed releases (``anonflow keygen``)."""
        return keygen(path)


def _source_path(name: str, path: str | None, base: Path, declared: Mapping[str, str]) -> str | None:
    if path in (None, "None"):
        return None
    if name in declared:
        return declared[name]
    rel = os.path.relpath(path, base).replace(os.sep, "/")
    # a file outside the workflow's folder, not named as written (the text cannot be read):
    # its absolute path, not a '../..' chain that only holds from where the run was made
    return rel if relative_inside(rel) is not None else Path(path).as_posix()


def _reproducible(step: Mapping[str, Any], registry: Any) -> bool:
    """Whether the plugin of a step run gives the same output for the same input and seed
    (:attr:`anonflow.api.Plugin.reproducible`); a plugin the registry does not hold counts as so."""
    kind = {"algorithm": "algorithm", "evaluate": None, "publish": "publisher"}.get(step.get("kind"))
    name = (step.get("params") or {}).get("publisher") if kind == "publisher" else step.get("uses")
    if kind is None or registry is None or not isinstance(name, str) or not registry.has(kind, name):
        return True
    return getattr(registry.get(kind, name).obj, "reproducible", True) is not False


def _matplotlib_version() -> str:
    import matplotlib

    return matplotlib.__version__


PLUGINS = [Release()]
