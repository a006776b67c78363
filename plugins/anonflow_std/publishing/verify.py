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
path: at that path, or by its file name in ``--sources DIR``, see :func:`_locate`), and every
manifest field and file compared; with other versions or code, the published files as tables
(:func:`_compare_rerun`). Each result is a finding ``{ok, what, detail}``; see docs/releases.md.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import math
import os
import posixpath
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import pyarrow.parquet as pq

from anonflow import egress
from anonflow.api import CLASS, InputError, cleanup_on_termination, file_sha256, sandboxed_connection
from anonflow.lineage import canonical_json

from .checks import release_checks, show_value, threshold_misses, verdict
from .release import (FILE_FIELDS, LOSSY_KEY, MANIFEST, MANIFEST_FIELDS, MANIFEST_RECORDS, PLAIN_NAME,
                      SCHEMA_VERSION, SIGN_EXTRA, SIGNATURE, crypto, csv_difference, field_digests, file_entry,
                      file_rows, integrity, declared_sources, json_digest, key_fingerprint, load_manifest,
                      load_public_key, manifest_bytes, not_regular, open_regular, plain, read_parquet,
                      regular_sha256, relative_inside, run_file_checks)
from .report import params_text


class Findings:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        #: with --rerun: ``{"verdict": identical | same-tables-different-code | different | failed |
        #: not-attempted, "versions": [...], "code": [...]}`` (see :func:`_compare_rerun`)
        self.rerun: dict[str, Any] | None = None

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
    1. the manifest's field digests and its fields against its schema (:func:`_verify_schema`), the
       workflow text's sha256 and every file's sha256 and rows;
       each CSV file against its Parquet partner, cell by cell; metric verdicts against their
       thresholds; no missing or unexpected file; the signature (with ``key``, a public key file);
    2. the privacy checks, derived from what the release claims (:func:`.checks.derive_checks`,
       :func:`.checks.claim_checks`) and run on the published files alone through the registry; the
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
    if not _verify_schema(manifest, f):  # a field missing, or a record that is not one: nothing more to read
        return {"release": str(release), "ok": False, "signature": None, "findings": f.items}
    signature = _check_signature(release, manifest, public_key, key, f)
    wf = manifest["workflow"]
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
        return {"release": str(release), "ok": f.ok, "signature": signature, "findings": f.items, "rerun": f.rerun}
    return {"release": str(release), "ok": f.ok, "signature": signature, "findings": f.items}


def _verify_schema(manifest: Mapping[str, Any], f: Findings) -> bool:
    """The manifest holds exactly the fields of its schema version (:data:`MANIFEST_FIELDS`),
    its records of fixed shape exactly theirs (:data:`MANIFEST_RECORDS`), and each entry of
    ``files`` exactly :data:`FILE_FIELDS`: each field missing or not of the schema fails, named
    (also when the forger recomputed every digest). Returns False when verify cannot go on: a
    top-level field missing, a record that is not a mapping, ``files`` not a list."""
    schema = f"a schema_version {SCHEMA_VERSION} manifest"

    def fields(where: str, value: Mapping[str, Any], expected: tuple[str, ...]) -> bool:
        missing = [k for k in expected if k not in value]
        for k in missing:
            f.add(False, f"manifest field {where}{k}", f"is missing: {schema} has it")
        for k in value:
            if k not in expected:
                f.add(False, f"manifest field {where}{k}", f"is not a field of {schema}")
        return not missing

    complete = fields("", manifest, MANIFEST_FIELDS)
    for name, expected in MANIFEST_RECORDS.items():
        value = manifest.get(name)
        if name not in manifest or (name == "signature" and value is None):
            continue
        if not isinstance(value, dict):
            f.add(False, f"manifest field {name}", f"is not a record ({', '.join(expected)}): {show_value(value)}")
            complete = False
        elif not fields(f"{name}.", value, expected):
            complete = False
    files = manifest.get("files")
    if not isinstance(files, list):
        if "files" in manifest:  # (a missing one is said above)
            f.add(False, "manifest field files", f"is not a list of files: {show_value(files)}")
        return False
    for i, entry in enumerate(files):
        if not isinstance(entry, dict):
            f.add(False, f"manifest field files[{i}]", f"is not a record ({', '.join(FILE_FIELDS)}): "
                                                      f"{show_value(entry)}")
            complete = False
        else:
            fields(f"files[{i}].", entry, FILE_FIELDS)
    return complete


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
            qi_entry = file_entry(manifest, "qi")
            if qi_entry.get("path") not in intact:
                return  # missing, changed or not a regular file: its own finding says so
            lj = json.loads((pq.read_schema(release / qi_entry["path"]).metadata or {}).get(LOSSY_KEY.encode(),
                                                                                           b"{}"))
        except Exception:
            lj = {}
        if not all(isinstance(lj.get(k), str) for k in ("class_column", "sensitive", "count_column")):
            f.add(False, "published columns", f"the QI table's {LOSSY_KEY} metadata does not name the class, "
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


def _error_text(exc: Exception) -> str:
    """An anonflow error's own message; another exception's type and text (never a traceback)."""
    message = getattr(exc, "message", None)
    return message if isinstance(message, str) else f"{type(exc).__name__}: {exc}"


def _check_key(c: Mapping[str, Any]) -> tuple[Any, ...]:
    return (c.get("check"), canonical_json(plain(c.get("params")), strict=True), c.get("evaluated"),
            c.get("recheck") is True)


def _checks_list(checks: list[Mapping[str, Any]]) -> str:
    if not checks:
        return "no check"
    def params(c: Mapping[str, Any]) -> str:
        text = params_text(c.get("params") if isinstance(c.get("params"), Mapping) else {})
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
        planned, notes = release_checks(manifest, registry)
    except Exception as exc:
        f.add(False, "privacy checks", "cannot be derived from the release's claims and evaluate steps: "
                                       + _error_text(exc))
        return
    derived = [c for c in planned if not c.get("claim")]
    for ok, what, detail in notes:
        f.add(ok, what, detail, show=True)
    rec_plugin = [(i, c) for i, c in enumerate(recorded) if c.get("check") not in BUILTIN_CHECKS]
    if [_check_key(c) for _, c in rec_plugin] != [_check_key(c) for c in derived]:
        f.add(False, "manifest field checks", f"records {_checks_list([c for _, c in rec_plugin])}; the release's "
                                              f"claims (release.claims) and the evaluate steps of its table call for "
                                              f"{_checks_list(derived)}")
    try:
        again = run_file_checks(release, manifest, planned, registry, sql)
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
            from ..lossyjoin.publisher import k_sentence

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
        label = f"claimed model {new['check']} ({params_text(new['params'])}, release.claims)"
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
             f"privacy check {new['check']} ({params_text(new['params'])}; not recorded in the manifest)")
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
        from ..lossyjoin.publisher import k_sentence

        f.add(True, label, "measures only, and the published files give the recorded figures: "
                           + k_sentence(new["result"]), show=True)
    elif new["holds"] is None:
        f.add(True, label, f"no model parameter to check against (it measures only); the published files "
                           f"give the recorded values ({params_text(new['params'])})")
    else:
        f.add(True, label, f"holds on the published files ({params_text(new['params'])}){scope}",
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


#: folders whose "regular files" are not files a workflow reads (kernel interfaces): an
#: absolute recorded path under them is never opened, not even to hash it
SYSTEM_FOLDERS = ("/proc", "/sys", "/dev")


def _locate(wanted: Mapping[str, Mapping[str, Any]], base: Path | None,
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
    ``--sources DIR``, never relative to a guessed folder (see :func:`_locate`)."""
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
    f.rerun = {"verdict": "not-attempted"}
    with cleanup_on_termination():  # the engine's, as 'anonflow run' uses
        _rerun_confined(release, manifest, f, registry, db=db, sources=sources)


def _rerun_confined(release: Path, manifest: Mapping[str, Any], f: Findings, registry: Any, *, db: Path | None,
                    sources: Path | None) -> None:
    from anonflow.runner.plan import build_plan
    from anonflow.errors import AnonflowError
    from anonflow.runner import Runner
    from anonflow.spec import _set_path, load_workflow
    from anonflow.store import Store

    def refuse(reason: str) -> None:
        f.add(False, "re-run", f"not attempted: {reason}")

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
            spec = load_workflow(wf_path, (), manifest.get("seed"))
            for step, param, value in manifest.get("overrides") or []:
                if step not in spec.steps:
                    raise InputError(f"override {step}.{param}: the workflow has no step {step!r}")
                _set_path(wf_path, spec.steps[step].params, step, param, value)
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
            if src.format == "postgres":  # the same server, table or query as recorded
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
        policy = rerun_policy()
        with egress.use(policy):
            differ, unread = _check_postgres_sources(spec, manifest, tmp, f)
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
            spec = dataclasses.replace(spec, overrides=tuple(tuple(o) for o in manifest.get("overrides") or []))
            history = [{"params": p["params"], "metrics": p["metrics"]}
                       for p in ((manifest.get("sweep") or {}).get("points") or [])]
            with egress.use(policy):
                plan = build_plan(spec, registry)
                with Store(db if db is not None else tmp / "rerun.duckdb") as store:
                    runner = Runner(store, registry, history=history, egress=policy)
                    runner.run(spec, use_cache=False, output_dir=tmp / "out", plan=plan)
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
        _compare_rerun(release, manifest, again_dir, again, f, not_replayed=runner.not_replayed)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)




def rerun_policy() -> Any:
    """The egress policy of a re-run: the one in force if it is a re-run's (``anonflow verify``
    sets it from ``--allow-host``), else a re-run's with the hosts the policy in force names."""
    current = egress.current()
    if not current.replay_external and current.credentials == "named":
        return current
    return egress.Policy(current.named, credentials="named", replay_external=False)


def _check_postgres_sources(spec: Any, manifest: Mapping[str, Any], tmp: Path, f: Findings) -> tuple[bool, bool]:
    """Read each PostgreSQL source of the workflow from its server again (the URL the manifest
    records, which holds no password: libpq takes it from PGPASSWORD or .pgpass) into a
    scratch store, and compare its content hash with the recorded ``sha256``; a finding per
    source. Returns (one differs, one cannot be read): the re-run is then not attempted. The
    re-run reads it once more: a table changed in between shows as a difference of the
    re-run's manifest."""
    from anonflow.errors import AnonflowError
    from anonflow.store import Store

    pg = {name: src for name, src in spec.sources.items() if src.format == "postgres"}
    if not pg:
        return False, False
    changed = unread = False
    recorded = manifest.get("sources") or []
    with Store(tmp / "postgres-sources.duckdb") as store:
        for name, src in sorted(pg.items()):
            idx = next((i for i, s in enumerate(recorded) if isinstance(s, Mapping) and s.get("name") == name), None)
            rec = recorded[idx] if idx is not None else {}
            what, label = f"source {name}", src.describe()
            try:
                art = store.load_source(src, run_id="verify", file_hash="")
            except AnonflowError as exc:
                f.add(False, what, f"{label} cannot be read: {getattr(exc, 'message', exc)}")
                unread = True
                continue
            except Exception as exc:  # noqa: BLE001 - never a traceback for someone else's release
                f.add(False, what, f"{label} cannot be read: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
                unread = True
                continue
            if art.hash != rec.get("sha256"):
                # never the digest or the count of what the query returned: the manifest chose the
                # query, and verify's output must not tell its author anything about the server's
                # records (as for a file read at a path the manifest names)
                f.add(False, what, f"{label} has changed: the content sha256 of what it returns differs from the one "
                                   f"the manifest records (sources[{idx}].sha256); not used")
                changed = True
            else:
                f.add(True, what, f"{label} matches its recorded content sha256 ({art.rows} records, read again from "
                                  "the server)")
    return changed, unread


# -- comparing a re-run with the release -------------------------------------------------------

#: manifest fields that differ whenever the code does: the versions themselves and the step
#: fingerprints (which count every plugin's code digest). With the same versions and code
#: they are compared like every other field; with other ones their differences are expected,
#: reported as version and code differences, never as data differences.
CODE_FIELDS = re.compile(r"^(versions(\.|\[|$)|publisher\.version$|release\.fingerprint$|"
                         r"steps\[\d+\]\.(fingerprint|plugin_version)$)")
#: the sha256 of a published file: bytes a writer of another version may lay out differently
#: for the same table (the data files are then compared as tables, below)
FILE_SHA = re.compile(r"^files\[(\d+)\]\.sha256$")
#: the sha256 of another publish step's file (not in the release; its step's input hash and
#: rows are compared as fields)
STEP_FILE_SHA = re.compile(r"^steps\[\d+\]\.files\[\d+\]\.sha256$")
#: what an algorithm step fitted (``steps[i].fitted``): a release written before anonflow
#: recorded it has none, which a re-run with newer code adds (expected, not a data difference)
STEP_FITTED = re.compile(r"^steps\[\d+\]\.fitted$")
#: the report's lineage plot (it draws every file and table the run wrote, those of a step not
#: replayed included)
LINEAGE_PLOT = re.compile(r'(<section id="lineage"><h2>Lineage</h2>(?:<div\b[^>]*>)?)<svg\b.*?</svg>', re.S)
#: what a publish step wrote (``steps[i].files``): not compared for a step not replayed
STEP_FILES = re.compile(r"^steps\[(\d+)\]\.files(\[|\.|$)")
#: the report page's parts that show the versions or are drawn by matplotlib
REPORT_VOLATILE = re.compile(r"<footer>.*?</footer>|<svg\b.*?</svg>", re.S)


def _role(manifest: Mapping[str, Any], index: int) -> Any:
    files = manifest.get("files") or []
    entry = files[index] if 0 <= index < len(files) else None
    return entry.get("role") if isinstance(entry, Mapping) else None


def _dest_text(destination: str) -> str:
    """A destination for a finding, a PostgreSQL URL as libpq reads it (no password)."""
    if destination.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        from anonflow.postgres import display

        return f"postgresql://{display(destination)}"
    return destination


def _version_text(v: Any) -> str:
    return "absent" if v is None else (v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))


def version_changes(recorded: Any, rerun: Any) -> tuple[list[str], list[str]]:
    """What differs between the manifest's ``versions`` and the re-run's: ``(versions,
    code)``, each a list of short phrases. ``versions``: packages (``duckdb 1.1.0 -> 1.2.0``)
    and plugins (``plugin algorithm:mdav: anonflow-std 0.5.0 -> 0.6.0``); ``code``: the code
    digests (``versions.code``: anonflow's own, each plugin's), or that the manifest records
    none (a release written before anonflow recorded them)."""
    a = recorded if isinstance(recorded, Mapping) else {}
    b = rerun if isinstance(rerun, Mapping) else {}
    versions = [f"{k} {_version_text(a.get(k))} -> {_version_text(b.get(k))}"
                for k in sorted(set(a) | set(b), key=str) if k not in ("plugins", "code") and a.get(k) != b.get(k)]
    pa_, pb_ = (a.get("plugins") if isinstance(a.get("plugins"), Mapping) else {},
                b.get("plugins") if isinstance(b.get("plugins"), Mapping) else {})
    versions += [f"plugin {k}: {pa_.get(k) or 'not installed'} -> {pb_.get(k) or 'not installed'}"
                 for k in sorted(set(pa_) | set(pb_), key=str) if pa_.get(k) != pb_.get(k)]
    code: list[str] = []
    ca, cb = a.get("code"), b.get("code")
    if ca is None and cb is not None:
        code.append("the manifest records no code digests (written by an anonflow that did not record them), so "
                    "the re-run's code cannot be compared with the release's")
    elif ca is not None and cb is None:
        code.append("the re-run records no code digests, the manifest does")
    elif ca != cb:
        ca = ca if isinstance(ca, Mapping) else {}
        cb = cb if isinstance(cb, Mapping) else {}
        if ca.get("anonflow") != cb.get("anonflow"):
            code.append(f"anonflow's own code (sha256 {_short(ca.get('anonflow'))} -> {_short(cb.get('anonflow'))})")
        qa = ca.get("plugins") if isinstance(ca.get("plugins"), Mapping) else {}
        qb = cb.get("plugins") if isinstance(cb.get("plugins"), Mapping) else {}
        changed = [k for k in sorted(set(qa) | set(qb), key=str) if qa.get(k) != qb.get(k)]
        by_dist: dict[str, list[str]] = {}  # one package's plugins share its code digest: one phrase each
        for k in changed:
            dist = str(pa_.get(k) or pb_.get(k) or "?").split(" ")[0]
            by_dist.setdefault(dist, []).append(str(k))
        for dist, keys in sorted(by_dist.items()):
            code.append(f"the code of {len(keys)} plugin(s) of {dist} (" + ", ".join(keys[:8])
                        + (f", and {len(keys) - 8} more" if len(keys) > 8 else "") + ")")
        for k in sorted(set(ca) | set(cb), key=str):
            if k not in ("anonflow", "plugins") and ca.get(k) != cb.get(k):
                code.append(f"code digest {k}")
    return versions, code


def compare_tables(a: Path, b: Path, fmt: str) -> dict[str, Any]:
    """Two published files (``parquet`` or ``csv``) compared as tables, with DuckDB: the same
    columns (names, in order, and types), and the same records, counted both ways as
    multisets (``EXCEPT ALL``) and in file order. Returns ``{same, in_order, rows: (a, b),
    only_a, only_b, detail}``; ``same`` means the same columns and the same multiset of records.
    Files are read through Arrow datasets (no glob expansion of their names); CSV columns are
    typed by the same inference on both sides."""
    import pyarrow.dataset as ds

    con = sandboxed_connection()  # one thread: a scan in file order (row_number() OVER () numbers records as stored)
    try:
        for name, path in (("a", a), ("b", b)):
            con.register(name, ds.dataset(str(path), format="parquet" if fmt == "parquet" else "csv"))
        cols_a = [(r[0], r[1]) for r in con.execute("DESCRIBE a").fetchall()]
        cols_b = [(r[0], r[1]) for r in con.execute("DESCRIBE b").fetchall()]
        rows = tuple(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("a", "b"))
        out: dict[str, Any] = {"rows": rows, "in_order": False, "only_a": None, "only_b": None}
        if [c for c, _ in cols_a] != [c for c, _ in cols_b]:
            out.update(same=False, detail=f"other columns: the release's are {[c for c, _ in cols_a]}, the re-run's "
                                          f"{[c for c, _ in cols_b]}")
            return out
        typed = [f"column {c!r} is {t} in the release, {u} in the re-run"
                 for (c, t), (_, u) in zip(cols_a, cols_b) if t != u]
        only_a = con.execute("SELECT count(*) FROM (SELECT * FROM a EXCEPT ALL SELECT * FROM b)").fetchone()[0]
        only_b = con.execute("SELECT count(*) FROM (SELECT * FROM b EXCEPT ALL SELECT * FROM a)").fetchone()[0]
        out.update(only_a=only_a, only_b=only_b)
        if typed or only_a or only_b:
            parts = typed + ([f"{only_a} of the release's {rows[0]} records are not in the re-run's file, and "
                              f"{only_b} of the re-run's {rows[1]} records are not in the release's"]
                             if only_a or only_b else [])
            out.update(same=False, detail="; ".join(parts))
            return out
        numbered = "SELECT row_number() OVER () AS __anonflow_row, * FROM {}"
        moved = con.execute(f"SELECT count(*) FROM ({numbered.format('a')} EXCEPT ALL {numbered.format('b')})"
                            ).fetchone()[0]
        out.update(same=True, in_order=moved == 0,
                   detail=f"the same {len(cols_a)} columns and {rows[0]} records"
                          + (" in the same order" if moved == 0 else f", {moved} of them in another place"))
        return out
    finally:
        con.close()


def _compare_rerun(release: Path, manifest: Mapping[str, Any], again_dir: Path, again: Mapping[str, Any],
                   f: Findings, not_replayed: Mapping[str, list[str]] | None = None) -> None:
    """Compare the re-run's release (``again_dir``, its manifest ``again``) with the recorded
    one and set ``f.rerun``'s verdict.

    With the same versions and code digests the re-run must give every manifest field and
    every file byte for byte (verdict ``identical``). When the versions or code differ (the
    ``versions`` field, code digests included: a plugin fixed without a version bump shows),
    the differences are reported in three parts: the versions and the code digests that
    changed (findings ``re-run versions`` and ``re-run code``, shown, not failures); the fields
    that differ because the code does (the versions, the step fingerprints, which count the
    code, the plugins' versions: expected, never data differences); and the data: every other
    manifest field (step output hashes, rows, metrics, checks, parameters, ...) must still be
    the recorded one, and every published data file must hold the same table (same columns,
    same records as a multiset; bytes may differ: another Arrow writes another Parquet layout).
    A re-run that publishes the same tables is verdict ``same-tables-different-code`` (a pass,
    with a shown note); one that publishes other records fails, naming the file and how many
    records differ. With other code ``report.html`` (it shows the versions, its plots are drawn
    by matplotlib) and ``manifest.json`` (compared field by field) are not compared byte for
    byte; the page is compared with its footer and plots left out, and a page that differs
    beyond them is said (shown), not failed: it is not attested by such a re-run."""
    skip = ("integrity", "signature")
    rec_versions, new_versions = manifest.get("versions"), again.get("versions")
    pub_a, pub_b = manifest.get("publisher") or {}, again.get("publisher") or {}
    code_differs = rec_versions != new_versions or pub_a.get("version") != pub_b.get("version")
    versions, code = version_changes(rec_versions, new_versions)
    if pub_a.get("version") != pub_b.get("version"):
        versions.append(f"publisher {(manifest.get('publisher') or {}).get('name')} "
                        f"{_version_text((manifest.get('publisher') or {}).get('version'))} -> "
                        f"{_version_text((again.get('publisher') or {}).get('version'))}")
    f.rerun = {"verdict": "different", "versions": versions, "code": code}
    # publish steps that write outside the output folder (a database) are not replayed
    # (anonflow.egress): what they recorded writing is not compared, and the verdict says so
    skipped = {i for i, st in enumerate(manifest.get("steps") or [])
               if isinstance(st, Mapping) and st.get("step") in (not_replayed or {})}
    if not_replayed:
        f.rerun["not_replayed"] = sorted(not_replayed)
        for name, dests in sorted(not_replayed.items()):
            f.add(True, f"step {name}", "not replayed: it writes outside the re-run's scratch folder ("
                  + ", ".join(_dest_text(d) for d in dests) + "); what it wrote is not attested by this re-run",
                  show=True)
    if code_differs:
        f.add(True, "re-run versions", ("the re-run runs other versions than the release records: " + "; ".join(
            versions)) if versions else "the re-run runs the versions the release records", show=True)
        f.add(True, "re-run code", ("the re-run's code differs from the release's: " + "; ".join(code)) if code else
              "the re-run's code digests are the ones the release records", show=True)

    diffs = diff_json({k: v for k, v in manifest.items() if k not in skip},
                      {k: v for k, v in again.items() if k not in skip})
    expected: list[str] = []        # fields that differ because the code does
    newly_fitted: list[str] = []    # steps[i].fitted the release (older code) does not record
    data_diffs = 0
    for path, a, b in diffs:
        step_files = STEP_FILES.match(path)
        if step_files and int(step_files.group(1)) in skipped:
            continue  # a step not replayed wrote nothing in the re-run
        file_sha = FILE_SHA.match(path)
        if skipped and file_sha and _role(manifest, int(file_sha.group(1))) == "report":
            continue  # the page draws what that step wrote: judged below, with the page itself
        if code_differs and CODE_FIELDS.match(path):
            expected.append(path)
            continue
        if code_differs and FILE_SHA.match(path):
            continue  # judged below, with the file itself compared as a table
        if code_differs and STEP_FILE_SHA.match(path):
            expected.append(path)
            continue
        if code_differs and STEP_FITTED.match(path) and a == "<absent>":
            newly_fitted.append(path)
            continue
        f.add(False, f"manifest field {path}", f"recorded {show_value(a)}, re-run gives {show_value(b)}")
        data_diffs += 1
    if expected:
        fps = sum(1 for p in expected if p.endswith("fingerprint"))
        others = sum(1 for p in expected if STEP_FILE_SHA.match(p))
        f.add(True, "re-run fingerprints", f"{fps} step fingerprint(s) differ (they count the code), and "
                                           f"{len(expected) - fps - others} version field(s)"
                                           + (f" and {others} sha256 of other publish steps' files" if others else "")
                                           + ": expected with other code, not data differences", show=True)

    if newly_fitted:
        f.add(True, "re-run fitted values", f"the re-run records what {len(newly_fitted)} algorithm step(s) fitted "
                                            f"({', '.join(p.removesuffix('.fitted') for p in newly_fitted)}.fitted), "
                                            "which the release, written before anonflow recorded it, does not: "
                                            "expected with newer code, not a data difference", show=True)

    signed = manifest.get("signature") is not None or again.get("signature") is not None
    entries = {e.get("path"): e for e in manifest.get("files") or [] if isinstance(e, Mapping)}
    again_entries = {e.get("path"): e for e in again.get("files") or [] if isinstance(e, Mapping)}
    names = sorted({e for e in entries if PLAIN_NAME.match(str(e))} | set(again_entries) | {MANIFEST})
    same_files = same_tables = 0
    for name in names:
        a, b = release / name, again_dir / name
        entry = entries.get(name) or again_entries.get(name) or {}
        why = not_regular(a)
        if why is not None and why != "does not exist":
            f.add(False, f"file {name}", f"{why} in the release: not compared")
            data_diffs += 1
            continue
        if why is not None or not b.is_file():
            f.add(False, f"file {name}", "exists only in the " + ("re-run" if b.is_file() else "release"))
            data_diffs += 1
            continue
        if name == MANIFEST:
            if code_differs or skipped:
                same_files += 1  # it records the versions (or the report's digest): compared field by field above
            elif signed and _unsigned_form(manifest) != _unsigned_form(again):
                f.add(False, f"file {name}", "differs from the re-run's (signatures aside)")
                data_diffs += 1
            elif not signed and regular_sha256(a) != file_sha256(b):
                f.add(False, f"file {name}", f"differs from the re-run's: sha256 {_short(regular_sha256(a))} vs "
                                             f"{_short(file_sha256(b))}")
                data_diffs += 1
            else:
                same_files += 1
            continue
        ha, hb = regular_sha256(a), file_sha256(b)
        if ha == hb:
            same_files += 1
            continue
        if entry.get("format") in ("parquet", "csv"):
            try:
                cmp = compare_tables(a, b, entry["format"])
            except Exception as exc:  # a file DuckDB cannot read: say so, never a traceback
                cmp = {"same": False, "detail": f"cannot be compared as tables: {_error_text(exc)}"}
            if cmp["same"] and code_differs:
                same_files += 1
                same_tables += 1
                f.add(True, f"file {name}", f"holds the same table as the re-run's ({cmp['detail']}); its bytes differ "
                                            f"(sha256 {_short(ha)} vs {_short(hb)}), as another writer version may lay "
                                            "them out", show=True)
            elif cmp["same"]:
                f.add(False, f"file {name}", f"differs from the re-run's: sha256 {_short(ha)} vs {_short(hb)} "
                                             f"(the same table, {cmp['detail']}, but the same versions and code must "
                                             "give the same bytes)")
                data_diffs += 1
            else:
                f.add(False, f"file {name}", f"differs from the re-run's: sha256 {_short(ha)} vs {_short(hb)}: "
                                             f"{cmp['detail']}")
                data_diffs += 1
            continue
        if skipped and not code_differs and entry.get("role") == "report":
            try:
                with os.fdopen(open_regular(a), "rb") as fh:
                    page_a = fh.read().decode("utf-8", "replace")
                page_b = b.read_text(encoding="utf-8", errors="replace")
                alike = LINEAGE_PLOT.sub(r"\1", page_a) == LINEAGE_PLOT.sub(r"\1", page_b)
            except OSError:
                alike = False
            if alike:
                same_files += 1
                f.add(True, f"file {name}", "differs from the re-run's page only in its lineage plot, which draws "
                                            "what the steps not replayed wrote", show=True)
            else:
                f.add(False, f"file {name}", f"differs from the re-run's beyond its lineage plot: sha256 "
                                             f"{_short(ha)} vs {_short(hb)}")
                data_diffs += 1
            continue
        if code_differs and entry.get("role") == "report":
            same_files += 1
            try:
                with os.fdopen(open_regular(a), "rb") as fh:
                    page_a = fh.read().decode("utf-8", "replace")
                page_b = b.read_text(encoding="utf-8", errors="replace")
                alike = REPORT_VOLATILE.sub("", page_a) == REPORT_VOLATILE.sub("", page_b)
            except OSError:
                alike = False
            f.add(True, f"file {name}", "differs from the re-run's page only in its versions footer and plots "
                                        "(drawn by the re-run's matplotlib)" if alike else
                  "differs from the re-run's page beyond its versions footer and plots (another report version?): "
                  "with other code the page is not attested by the re-run; compare it with a re-run's page, or "
                  "re-run with the recorded versions", show=True)
            continue
        f.add(False, f"file {name}", f"differs from the re-run's: sha256 {_short(ha)} vs {_short(hb)}")
        data_diffs += 1
    if data_diffs or same_files != len(names):
        return
    steps = len(again.get("steps") or [])
    if not code_differs:
        f.rerun["verdict"] = "identical"
        f.add(True, "re-run", f"the recorded workflow re-run gives the same {steps} step hashes and {len(names)} "
                              "byte-identical files" + (" (manifest.json compared without its signature)" if signed
                                                        else ""))
        return
    f.rerun["verdict"] = "same-tables-different-code"
    tables = sum(1 for n in names if (entries.get(n) or {}).get("format") in ("parquet", "csv"))
    f.add(True, "re-run", f"same published tables, different code: the recorded workflow re-run with other "
                          f"versions or code gives the same {steps} step output hashes, metrics and checks, and the "
                          f"same {tables} published table(s)"
                          + (f" ({same_tables} of them the same table in other bytes)" if same_tables else
                             ", byte for byte")
                          + "; it differs in its versions and code only (re-run versions, re-run code)", show=True)
