"""``anonflow verify``: check a release directory from its files alone, or by re-running it.

:func:`verify` runs, in order: (0) every entry of the directory must be a regular file (no
symbolic link, FIFO, device or folder is ever opened); (1) the manifest's fields against
their digests and its schema, the workflow text against its sha256, every file's sha256 and
rows, no missing or unlisted file, each CSV file against its Parquet partner cell by cell,
the published columns against the typing, the metric verdicts, and the signature; (2) the
privacy checks, derived from what the release claims (:mod:`anonflow_std.publishing.checks`) and run on
the published files alone (:func:`anonflow_std.publishing.release.run_file_checks`), against the
manifest's record; (3) with ``rerun``, the recorded workflow re-run confined to a scratch
folder holding copies of the recorded, hash-pinned files only (a source named by absolute
path: at that path, or by its file name in ``--sources DIR``, see :func:`locate`), and every
manifest field and file compared; with other versions or code, the published files as tables
(:func:`compare_rerun`). Each result is a finding ``{ok, what, detail}``; see docs/releases.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import posixpath
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

from anonflow.api import AnonflowError, InputError, cleanup_on_termination

from .audit import verify_checks, verify_columns, verify_schema
from .checks import verdict
from .findings import Findings, short
from .manifest import (MANIFEST, PLAIN_NAME, SCHEMA_VERSION, SIGNATURE, csv_difference, declared_sources, field_digests,
                       file_rows, json_digest, load_manifest, not_regular, perturbation_text, perturbations,
                       read_parquet, regular_sha256, relative_inside)
from .release_files import recorded_files, sources_base
from .report import privacy_loss_text
# the names the re-run's body uses (:func:`_rerun_confined`)
from .release_files import Refused as _Refused
from .release_files import copy_pinned as _copy_pinned
from .release_files import locate as _locate
from .findings import short as _short
from .rerun_compare import compare_rerun as _compare_rerun
from .signing import SIGN_EXTRA, check_signature, crypto, load_public_key


def verify(release: Path, *, rerun: bool = False, db: Path | None = None, sources: Path | None = None,
           registry: Any = None, key: Path | None = None, engine: Any = None) -> dict[str, Any]:
    """Check a release directory; return ``{"release", "ok", "signature", "findings": [{ok, what, detail}]}``.

    0. every entry of the directory is a regular file (no symbolic link, FIFO, device or
       folder is ever opened), ``manifest.json`` and ``manifest.sig`` included;
    1. the manifest's field digests and its fields against its schema (:func:`verify_schema`), the
       workflow text's sha256 and every file's sha256 and rows;
       each CSV file against its Parquet partner, cell by cell; metric verdicts against their
       thresholds; no missing or unexpected file; the signature (with ``key``, a public key file);
    2. the privacy checks, derived from what the release claims (:func:`.checks.derive_checks`,
       :func:`.checks.claim_checks`) and run on the published files alone through the registry; the
       manifest's check list must be exactly the derived one;
    3. with ``rerun``: the recorded workflow re-run by ``engine`` (:class:`anonflow.api.Engine`),
       confined to a scratch folder holding copies of the recorded files only (see :func:`_rerun`),
       and every manifest field and file compared.
    """
    release = Path(release)
    if engine is None:
        raise InputError("verify needs the engine that checks and re-runs a release (anonflow.api.Engine): "
                         "'anonflow verify' passes its own; in Python pass engine=anonflow.session.Session()")
    registry = registry or engine.registry
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
    recorded = manifest.get("integrity") if isinstance(manifest.get("integrity"), dict) else {}
    body = {k: v for k, v in manifest.items() if k != "integrity"}
    now = field_digests(body)
    was = recorded.get("fields") if isinstance(recorded.get("fields"), dict) else {}
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
        ok = json_digest(body) == recorded.get("manifest")
        f.add(ok, "manifest", "field digests match" if ok else "digest of the whole manifest does not match "
                                                              "integrity.manifest")
    if not verify_schema(manifest, f):  # a field missing, or a record that is not one: nothing more to read
        return {"release": str(release), "ok": False, "signature": None, "findings": f.items}
    signature = check_signature(release, manifest, public_key, key, f)
    released = manifest["release"].get("input")
    for p in perturbations(manifest.get("steps"), released.get("step") if isinstance(released, dict) else None):
        f.add(True, f"perturbation by step {p['step']}", f"{p['uses']} {p['plugin_version']} changed "
              + perturbation_text(p["columns"]) + " (its declared guarantee; not re-checked on the files)", show=True)
    for st in manifest.get("steps") or []:  # differential privacy: the loss each step states it spent
        if isinstance(st, dict) and isinstance(st.get("privacy_loss"), dict):
            who = (st.get("params") or {}).get("publisher") if st.get("kind") == "publish" else st.get("uses")
            f.add(True, f"privacy loss of step {st.get('step')}", f"{who} {st.get('plugin_version')} spent "
                  + privacy_loss_text(st["privacy_loss"]) + " on its input (its declared guarantee, worked out from its "
                  "parameters; not re-checked on the files" + ("; its noised values come from OpenDP's safe sampler "
                                                              "and are not reproducible" if st.get("reproducible")
                                                              is False else "") + ")", show=True)
    wf = manifest["workflow"]
    text_hash = hashlib.sha256(str(wf.get("text", "")).encode()).hexdigest()
    f.add(text_hash == wf.get("sha256"), "manifest field workflow.text",
          "matches workflow.sha256" if text_hash == wf.get("sha256") else
          f"sha256 {short(text_hash)} but workflow.sha256 records {short(wf.get('sha256'))}")
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
        if not isinstance(name, str) or not PLAIN_NAME.match(name) or name in (MANIFEST, SIGNATURE):
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
            f.add(False, f"file {name}", f"sha256 {short(digest)} differs from manifest files[{i}].sha256 "
                                         f"{short(entry.get('sha256'))}: the file was changed")
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
    verify_columns(release, manifest, intact, f)
    for i, m in enumerate(manifest.get("metrics") or []):
        expect = verdict(m.get("value"), m.get("threshold"), m.get("name", ""))
        if expect != m.get("passed"):
            f.add(False, f"manifest field metrics[{i}].passed",
                  f"{m.get('step')}.{m.get('name')} = {m.get('value')!r} with threshold {m.get('threshold')!r} "
                  f"{'passes' if expect else 'fails'}, but the manifest records passed = {m.get('passed')!r}")

    # 2. the privacy checks the release's claims call for, on the published files alone
    with engine.scratch_sql() as sql:
        verify_checks(release, manifest, registry, f, sql)

    # 3. re-run
    if rerun:
        _rerun(release, manifest, f, engine, db=db, sources=sources)
        return {"release": str(release), "ok": f.ok, "signature": signature, "findings": f.items, "rerun": f.rerun}
    return {"release": str(release), "ok": f.ok, "signature": signature, "findings": f.items}


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
            writes += [f"step {name}: {k} = {params[k]!r}" if relative_inside(params[k]) is None else ""
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


def _rerun(release: Path, manifest: Mapping[str, Any], f: Findings, engine: Any, *, db: Path | None,
           sources: Path | None) -> None:
    """Re-run the recorded workflow, confined: the workflow text is loaded from a scratch
    folder (``mkdtemp``, owner-only); its sources must be exactly the manifest's, and every
    file it names (sources, hierarchy files, grading files) must be relative, inside the
    workflow's folder (:func:`sources_base`) and match the sha256 the manifest records; each
    is hashed in place, then copied into the scratch folder at the same relative path (see
    :func:`copy_pinned`), and the workflow runs from there into a scratch store (or ``db``)
    and a scratch output folder, so it cannot see any other file. Anything else is a failed
    ``re-run: not attempted: ...`` finding, and nothing is run. The scratch folder is removed
    afterwards, also when verify is ended by SIGTERM or SIGHUP."""
    f.rerun = {"verdict": "not-attempted"}
    with cleanup_on_termination():  # the engine's, as 'anonflow run' uses
        _rerun_confined(release, manifest, f, engine, db=db, sources=sources)


def _rerun_confined(release: Path, manifest: Mapping[str, Any], f: Findings, engine: Any, *, db: Path | None,
                    sources: Path | None) -> None:
    """The re-run of :func:`_rerun`, through the engine handle ``engine``
    (:class:`anonflow.api.Engine`): the only way this plugin runs a workflow."""
    def refuse(reason: str) -> None:
        f.add(False, "re-run", f"not attempted: {reason}")

    if engine is None:
        return refuse("no engine was given to re-run the workflow with (verify(..., engine=...); 'anonflow verify' "
                      "gives its own)")
    registry = engine.registry

    wf = manifest.get("workflow") or {}
    wf_name = wf.get("file")
    if not isinstance(wf_name, str) or not PLAIN_NAME.match(wf_name) or not isinstance(wf.get("text"), str):
        return refuse(f"workflow.file {wf_name!r} is not a plain file name, or workflow.text is missing")
    if hashlib.sha256(wf["text"].encode()).hexdigest() != wf.get("sha256"):
        return refuse("workflow.text does not match workflow.sha256")
    wanted, problems = recorded_files(manifest)
    if problems:
        return refuse("; ".join(problems))
    release_step = (manifest.get("release") or {}).get("step")
    rel_path = relative_inside(((manifest.get("release") or {}).get("params") or {}).get("path"))
    if rel_path is None:
        return refuse("release.params.path is an absolute path or leaves the output folder")
    inside = [p for p in wanted if not wanted[p].get("outside")]
    source_paths = [p for p in inside if wanted[p]["what"].startswith("source ")]
    base, where = sources_base(release, {"sources": [{"path": p} for p in source_paths],
                                         "release": {"params": {"path": rel_path}}}, sources)
    if base is None and (inside or sources is not None):
        return refuse(f"cannot find the sources: {where} (give the workflow's folder with --sources DIR)")
    located, why_not = _locate(wanted, base, sources is not None)
    if why_not:
        return refuse("; ".join(why_not))
    if base is not None and (inside or sources is not None):
        f.add(True, "sources", f"the recorded files are read from {where}", show=True)
    for key, (folder, _name, shown) in located.items():
        if folder is not None and sources is None:
            f.add(True, "sources", f"{wanted[key]['what']} is read at its recorded absolute path {shown} (used only "
                                   "if it is a regular file whose sha256 is the recorded one; give --sources DIR to "
                                   "read it from DIR instead)", show=True)

    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix="anonflow-verify-")).resolve()
        os.chmod(tmp, 0o700)
        src_dir = tmp / "workflow"
        src_dir.mkdir(mode=0o700)
        wf_path = src_dir / wf_name
        wf_path.write_text(wf["text"], encoding="utf-8")
        try:
            spec = engine.load_recorded(wf_path, seed=manifest.get("seed"), overrides=manifest.get("overrides") or [])
        except AnonflowError as exc:
            return refuse(f"the recorded workflow cannot be loaded: {exc}")
        # (a) its sources are exactly the manifest's; every other file it names is recorded
        recorded = {s.get("name"): s for s in manifest.get("sources") or []}
        declared = declared_sources(wf["text"])
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
            if src.kind.remote:  # the same server, table or query as recorded
                if rec.get("path") is not None or rec.get("table") != src.table or rec.get("options") != src.options:
                    reasons.append(f"source {name} reads {src.describe()} in the workflow, but the manifest records "
                                   "another connection, table or query")
                continue
            if src.path is None:
                if rec.get("path") is not None:
                    reasons.append(f"source {name} names no file in the workflow; the manifest records {rec['path']}")
                continue
            if rec.get("path") in located:  # recorded outside the workflow's folder: named exactly so
                if declared.get(name) != rec.get("path"):
                    reasons.append(f"source {name} reads {declared.get(name)!r} in the workflow, but the manifest "
                                   f"records {rec.get('path')}")
                continue
            rel = os.path.relpath(src.path, src_dir).replace(os.sep, "/")
            if relative_inside(rel) is None:
                reasons.append(f"source {name} reads {rel!r}, outside the workflow's folder")
            elif relative_inside(rel) != relative_inside(rec.get("path")):
                reasons.append(f"source {name} reads {rel} in the workflow, but the manifest records {rec.get('path')}")
        reads, writes, keys = _named_files(spec, registry)
        for where, p in reads:
            rel = relative_inside(str(p))
            if rel is None:
                reasons.append(f"{where} is {p!r}: an absolute path or one leaving the workflow's folder")
            elif rel not in wanted:
                reasons.append(f"{where} is {rel}, which the manifest does not record with a sha256")
        reasons += [f"{w}: an absolute path or one leaving the output folder" for w in writes]
        reasons += [f"{w}: outside the workflow's folder" for w in _outside_paths(spec)]
        for k in keys:
            if relative_inside(k) is None:
                reasons.append(f"a release's signing key is {k!r}: an absolute path or one leaving the workflow's "
                               "folder")
        if keys and manifest.get("signature") is not None:
            try:
                crypto()
            except InputError:
                reasons.append(f"the release is signed, and re-running it signs with a throwaway key, but {SIGN_EXTRA}")
        if release_step not in spec.steps:
            reasons.append(f"the workflow has no step {release_step!r} (manifest release.step)")
        if reasons:
            return refuse("; ".join(reasons))
        # (b) hash each accepted file in place; copy only a match, and hash the copy again
        changed = False
        copies: dict[str, Path] = {}  # recorded path outside the workflow's folder -> its scratch copy
        for i, (rel, info) in enumerate(sorted(wanted.items())):
            if info.get("outside"):
                folder, in_folder, shown = located[rel]
                dst = tmp / "sources" / str(i) / in_folder
                label = shown if sources is None else f"{in_folder} (under {folder}, for {rel})"
            else:
                folder, in_folder = base, rel
                if (sources is not None and base is not None and "/" in rel
                        and not_regular(base / rel) == "does not exist"
                        and not_regular(base / posixpath.basename(rel)) != "does not exist"):
                    in_folder = posixpath.basename(rel)  # --sources DIR holds it by its file name
                dst, label = src_dir / rel, f"{in_folder} (under {base})"
            if folder is None:
                f.add(False, info["what"], f"{rel} is missing (no folder to read it from)")
                changed = True
                continue
            try:
                digest = _copy_pinned(folder, in_folder, dst, info["sha256"], info["text"])
            except FileNotFoundError:
                f.add(False, info["what"], f"{label} is missing")
                changed = True
                continue
            except _Refused as exc:
                f.add(False, info["what"], f"{label} {exc}: not read")
                changed = True
                continue
            except OSError as exc:
                f.add(False, info["what"], f"{label} cannot be copied: {exc.strerror or exc}")
                changed = True
                continue
            idx = next((j for j, s in enumerate(manifest.get("sources") or []) if isinstance(s, Mapping) and (
                s.get("path") == rel if info.get("outside") else relative_inside(s.get("path")) == rel)), None)
            where = f"sources[{idx}].sha256" if idx is not None else "its step's parameters"
            if digest != info["sha256"] and info.get("outside") and sources is None:
                # read at a path the manifest names: say that it differs, never its digest (a
                # hostile manifest must not learn, through verify's output, a digest of any file)
                f.add(False, info["what"], f"{label} is not the recorded file: its sha256 differs from the one the "
                                           f"manifest records ({where}); not used")
                changed = True
            elif digest != info["sha256"]:
                f.add(False, info["what"], f"{label if info.get('outside') else rel} has changed: sha256 "
                                           f"{_short(digest)}, but the manifest records {_short(info['sha256'])} "
                                           f"({where})")
                changed = True
            else:
                f.add(True, info["what"], f"{label if info.get('outside') else rel} matches its recorded sha256")
                if info.get("outside"):
                    copies[rel] = dst
        # someone else's workflow: nothing it names is reached on its word (anonflow.egress): no
        # sink outside the scratch folder runs, credentials go only to hosts the verifier named
        policy = engine.rerun_policy()
        differ, unread = _check_postgres_sources(spec, manifest, tmp, f, engine, policy)
        if changed or differ:
            return refuse("a source or a file the workflow reads differs from the one recorded")
        if unread:
            return refuse("a PostgreSQL source cannot be read from its server")
        # the workflow names those sources outside its folder: it reads the hash-pinned copies
        spec = dataclasses.replace(spec, sources={
            name: (dataclasses.replace(src, path=copies[recorded[name]["path"]])
                   if recorded.get(name, {}).get("path") in copies else src)
            for name, src in spec.sources.items()})
        for k in keys:  # the re-run cannot sign with the publisher's key: it signs with a throwaway one
            ed25519, serialization = crypto()
            target = src_dir / relative_inside(k)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():  # owner-only, as the signing key must be
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    os.fchmod(fh.fileno(), 0o600)
                    fh.write(ed25519.Ed25519PrivateKey.generate().private_bytes(
                        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        try:
            history = [{"params": p["params"], "metrics": p["metrics"]}
                       for p in ((manifest.get("sweep") or {}).get("points") or [])]
            done = engine.rerun(spec, db=db if db is not None else tmp / "rerun.duckdb", out=tmp / "out",
                                history=history, egress=policy)
        except AnonflowError as exc:
            f.add(False, "re-run", f"the recorded workflow failed when re-run: {exc}")
            f.rerun = {"verdict": "failed"}
            return
        except Exception as exc:  # never a traceback for someone else's release
            f.add(False, "re-run", f"the recorded workflow failed when re-run: {type(exc).__name__}: {exc}")
            f.rerun = {"verdict": "failed"}
            return
        again_dir = tmp / "out" / rel_path
        if not (again_dir / MANIFEST).is_file():
            f.add(False, "re-run", f"the re-run wrote no release at {rel_path}")
            f.rerun = {"verdict": "failed"}
            return
        again = json.loads((again_dir / MANIFEST).read_text(encoding="utf-8"))
        _compare_rerun(release, manifest, again_dir, again, f, not_replayed=done.not_replayed)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _check_postgres_sources(spec: Any, manifest: Mapping[str, Any], tmp: Path, f: Findings,
                            engine: Any, policy: Any) -> tuple[bool, bool]:
    """Read each PostgreSQL source of the workflow from its server again (the URL the manifest
    records, which holds no password: libpq takes it from PGPASSWORD or .pgpass) into a
    scratch store, and compare its content hash with the recorded ``sha256``; a finding per
    source. Returns (one differs, one cannot be read): the re-run is then not attempted. The
    re-run reads it once more: a table changed in between shows as a difference of the
    re-run's manifest."""
    pg = {name: src for name, src in spec.sources.items() if src.kind.remote}
    if not pg:
        return False, False
    changed = unread = False
    recorded = manifest.get("sources") or []
    for name, src in sorted(pg.items()):
        idx = next((i for i, s in enumerate(recorded) if isinstance(s, Mapping) and s.get("name") == name), None)
        rec = recorded[idx] if idx is not None else {}
        what, label = f"source {name}", src.describe()
        try:
            sha, rows = engine.read_source(src, tmp / "postgres-sources.duckdb", egress=policy)
        except AnonflowError as exc:
            f.add(False, what, f"{label} cannot be read: {getattr(exc, 'message', exc)}")
            unread = True
            continue
        except Exception as exc:  # noqa: BLE001 - never a traceback for someone else's release
            f.add(False, what, f"{label} cannot be read: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            unread = True
            continue
        if sha != rec.get("sha256"):
            # never the digest or the count of what the query returned: the manifest chose the
            # query, and verify's output must not tell its author anything about the server's
            # records (as for a file read at a path the manifest names)
            f.add(False, what, f"{label} has changed: the content sha256 of what it returns differs from the one "
                               f"the manifest records (sources[{idx}].sha256); not used")
            changed = True
        else:
            f.add(True, what, f"{label} matches its recorded content sha256 ({rows} records, read again from "
                              "the server)")
    return changed, unread


