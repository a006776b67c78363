"""``anonflow verify`` on a release's files alone: the manifest against its schema
(:func:`verify_schema`), the published columns against the typing (:func:`verify_columns`), and
the privacy checks re-run on the published files against the manifest's record
(:func:`verify_checks`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import pyarrow.parquet as pq

from anonflow.api import CLASS, canonical_json

from .checks import BUILTIN_CHECKS, release_checks, run_file_checks, show_value, threshold_misses
from .findings import Findings, same
from .lossy_join import k_sentence
from .manifest import FILE_FIELDS, LOSSY_KEY, MANIFEST_FIELDS, MANIFEST_RECORDS, SCHEMA_VERSION, file_entry, plain
from .report import params_text


def verify_schema(manifest: Mapping[str, Any], f: Findings) -> bool:
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


def verify_columns(release: Path, manifest: Mapping[str, Any], intact: Mapping[str, Mapping[str, Any]],
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
            f.add(False, f"file {name}", f"cannot be read: {error_text(exc)}")
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


def error_text(exc: Exception) -> str:
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


def verify_checks(release: Path, manifest: Mapping[str, Any], registry: Any, f: Findings, sql: Any) -> None:
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
                                       + error_text(exc))
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
        f.add(False, "privacy checks", "cannot be run on the published files: " + error_text(exc))
        return
    # the lossy-join pair's own checks
    rec_builtin = {c.get("check"): (i, c) for i, c in enumerate(recorded) if c.get("check") in BUILTIN_CHECKS}
    new_builtin = [c for c in again if c["check"] in BUILTIN_CHECKS]
    for name in sorted(set(rec_builtin) - {c["check"] for c in new_builtin}):
        f.add(False, "manifest field checks", f"records {name} (checks[{rec_builtin[name][0]}]), which a "
                                              f"{rel.get('layout')!r} release does not have")
    for new in new_builtin:
        if new["check"] in rec_builtin:
            compare_check(f, *rec_builtin[new["check"]], new, lossy, manifest)
        elif new["check"] == "lossy-join-k":  # written before the k figures were recorded: show them
            f.add(True, "lossy-join k figures", "not recorded in this release's manifest; from the published "
                                                "files: " + k_sentence(new["result"]), show=True)
        else:
            f.add(False, "manifest field checks", f"records no {new['check']} check; a lossy-join release does")
            compare_check(f, None, None, new, lossy, manifest)
    # the derived checks, each against the recorded entry with the same check and parameters
    unmatched = list(rec_plugin)
    steps = manifest.get("steps")
    for new in [c for c in again if c["check"] not in BUILTIN_CHECKS and not c.get("claim")]:
        j = next((n for n, (_, c) in enumerate(unmatched) if _check_key(c) == _check_key(new)), None)
        i, old = unmatched.pop(j) if j is not None else (None, None)
        label = compare_check(f, i, old, new, lossy, manifest)
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


def compare_check(f: Findings, i: int | None, old: Mapping[str, Any] | None, new: Mapping[str, Any], lossy: bool,
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
             if not same((old.get("result") or {}).get(k), (new["result"] or {}).get(k))]
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
        f.add(True, label, "measures only, and the published files give the recorded figures: "
                           + k_sentence(new["result"]), show=True)
    elif new["holds"] is None:
        f.add(True, label, f"no model parameter to check against (it measures only); the published files "
                           f"give the recorded values ({params_text(new['params'])})")
    else:
        f.add(True, label, f"holds on the published files ({params_text(new['params'])}){scope}",
              show=bool(scope))
    return label
