"""``anonflow apply RELEASE NEW_DATA``: publish a new batch of records as a release published
its table (docs/releases.md, "Applying a release to new data").

1. The release is read (``manifest.json``, its integrity digest and the published table's
   sha256 checked): its layout (a lossy-join release is refused), the algorithm step that
   made the released table and the algorithm's plugin, which must offer ``apply``
   (``lattice``, the MDAV family; ``l-clustering`` and the GCA family do not).
2. The files the workflow's preparation read (hierarchy and grading files) are found by
   their recorded sha256, in ``--hierarchies DIR`` or beside the workflow (the folder above
   the release's output folder, as ``verify --rerun`` finds it), and copied pinned into a
   scratch folder.
3. The new data goes through the recorded preparation steps (the engine handle's
   ``prepare_batch``, :class:`anonflow.api.Engine`): the same typing, dropped identifiers, types and hierarchies.
4. The algorithm maps it onto the release (``Algorithm.apply``, given what the run fitted:
   the algorithm step's ``fitted`` in the manifest): the lattice applies the recorded node,
   microaggregation assigns each record to its nearest published group on z-scores by the
   recorded standardization.
5. The release's claimed models are checked **on the new batch alone** with the checks
   ``verify`` derives from the manifest (each evaluate step's privacy metrics, each claim
   with its claimed parameters); with a suppression allowance (``--suppression``, default the
   algorithm's recorded cap) the records of failing classes are withheld first, if they are
   few enough. A check that does not hold: exit 1, nothing written.
6. The folder is written whole (the engine handle's ``write_folder``): the data files as the
   release's (Parquet with the typing, CSV) and ``application.json``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import (CLASS, ROW, InputError, Metric, Partition, RunError, TypedTable, Typing, canonical_json,
                          file_sha256, suppression_limit, validate_params)

from .. import __version__
from .checks import release_checks, run_checks, scratch_context, threshold_misses
from .manifest import (MANIFEST, RELEASE_KEY, TYPING_KEY, file_entry, integrity, load_manifest, load_release_table,
                       plain, regular_sha256, write_csv, write_parquet)
from .release_files import Refused, copy_pinned, guessed_base, recorded_files
from .report import params_text
from .verify import verify

APPLICATION = "application.json"
FORMAT = "anonflow-application"


def _release_base(release: Path, manifest: Mapping[str, Any]) -> Path | None:
    """The workflow's folder as ``verify --rerun`` guesses it (:func:`.release_files.guessed_base`);
    None when that is the filesystem root or the home folder."""
    _, base, allowed = guessed_base(release, manifest)
    return base if allowed else None


def _place_files(release: Path, manifest: Mapping[str, Any], given: Path | None, scratch: Path) -> list[dict]:
    """Copy the hierarchy and grading files the recorded workflow reads into ``scratch`` at
    their recorded relative paths, each found by its recorded sha256: in ``given``
    (``--hierarchies DIR``: ``DIR/<recorded path>``, else ``DIR/<file name>``), else beside
    the workflow. Returns what was placed, for the application's record."""
    files, problems = recorded_files(manifest)
    wanted = {k: v for k, v in files.items() if not v["what"].startswith("source ")}
    if problems:
        bad = [p for p in problems if not p.startswith("source ")]
        if bad:
            raise InputError(f"the release's manifest names a file apply will not read: {bad[0]}")
    base = Path(os.path.realpath(given)) if given is not None else _release_base(release, manifest)
    if given is not None and not base.is_dir():
        raise InputError(f"--hierarchies {given} is not a folder")
    placed = []
    for rel, info in sorted(wanted.items()):
        where = [(base, rel)] if base is not None else []
        if given is not None and "/" in rel:
            where.append((base, rel.rsplit("/", 1)[1]))
        found = None
        for folder, name in where:
            try:
                digest = copy_pinned(folder, name, scratch / rel, info["sha256"], info["text"])
            except FileNotFoundError:
                continue
            except Refused as exc:
                raise InputError(f"{info['what']} ({folder / name}) {exc}: not read") from None
            if digest != info["sha256"]:
                raise InputError(f"{info['what']} ({folder / name}) is not the file the release was made with: its "
                                 f"sha256 differs from the recorded {info['sha256'][:16]}...")
            found = folder / name
            break
        if found is None:
            looked = f"beside the workflow ({base / rel})" if given is None and base is not None else \
                f"in --hierarchies {given}" if given is not None else "beside the workflow (its folder is unknown)"
            raise InputError(f"{info['what']} ({rel}, sha256 {info['sha256'][:16]}...) was not found {looked}; give "
                             "the folder that holds it with --hierarchies DIR")
        placed.append({"path": rel, "sha256": info["sha256"], "what": info["what"]})
    return placed


def _algorithm_step(manifest: Mapping[str, Any], registry: Any) -> tuple[dict[str, Any], Any]:
    rel = manifest["release"]
    name = (rel.get("input") or {}).get("step")
    step = next((s for s in manifest.get("steps") or [] if isinstance(s, Mapping) and s.get("step") == name), None)
    if step is None:
        raise InputError(f"the release's manifest records no step {name!r} (the released table's)")
    if step.get("kind") != "algorithm":
        raise InputError(f"the released table is made by step {name!r} ({step.get('uses')}), not by an algorithm: "
                         "apply maps new data through the algorithm that published the release")
    uses = step.get("uses")
    if not registry.has("algorithm", uses):
        raise InputError(f"the release was made by algorithm {uses!r}, which is not installed")
    obj = registry.get("algorithm", uses).obj
    if not callable(getattr(obj, "apply", None)):
        able = [n for n in registry.names("algorithm") if callable(getattr(registry.get("algorithm", n).obj, "apply",
                                                                           None))]
        raise InputError(f"the release was made by {uses!r}, which cannot be applied to new data (it offers no apply: "
                         "what it publishes is fitted to the records it was given); algorithms that can: "
                         f"{', '.join(able) or 'none installed'}")
    return dict(step), obj


def _class_verdicts(table: TypedTable, claims: Mapping[str, Any], registry: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per record, its class index (by ``_class``), and per class whether every claimed model
    that can judge classes (``Metric.partition_holds``) holds for it."""
    cls = np.asarray(table.data.column(CLASS).to_numpy(zero_copy_only=False))
    _, inverse = np.unique(cls, return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.int64)
    sizes = np.bincount(inverse).astype(np.int64)
    ok = np.ones(sizes.size, dtype=bool)
    for name, given in sorted((claims or {}).items()):
        if not registry.has("metric", name):
            continue
        obj = registry.get("metric", name).obj
        if type(obj).partition_holds is Metric.partition_holds:
            continue
        declared = {p.name for p in obj.params}
        try:
            mparams = validate_params(obj.params, {k: v for k, v in (given or {}).items() if k in declared})
        except Exception:
            continue
        try:
            ok &= np.asarray(obj.partition_holds(Partition(inverse, sizes, table), mparams), dtype=bool)
        except Exception:
            continue
    return inverse, ok


def _shown(result: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k} = {v:g}" for k, v in (result or {}).items() if isinstance(v, (int, float)))


def _outside_release(release: Path, out: Path) -> None:
    """``out`` is neither the release folder nor inside it (symbolic links resolved): a file
    written there would be a file the manifest does not list, and the release would no
    longer verify."""
    rel, target = Path(os.path.realpath(release)), Path(os.path.realpath(out))
    if target == rel or rel in target.parents:
        raise InputError(f"output {out} is {'the release folder' if target == rel else 'inside the release folder'} "
                         f"{release}; a release holds only the files its manifest lists (it would no longer verify): "
                         "write the application beside it, with -o")


def _verified(release: Path, key: Path | None, engine: Any) -> dict[str, Any]:
    """The release's verdict from :func:`.verify.verify` on its files alone (no re-run): apply
    publishes only under a release that verifies, so it refuses (one line, naming the first
    failed check) any release ``anonflow verify RELEASE [--key KEY]`` would fail. Returns the
    signature's status (``unsigned``, ``signed-unchecked`` or ``valid``)."""
    result = verify(release, key=key, engine=engine)
    failed = [i for i in result["findings"] if not i["ok"]]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        again = f"anonflow verify {release}" + (f" --key {key}" if key is not None else "")
        raise InputError(f"the release does not verify, so apply will not publish under its name: {first['what']}: "
                         f"{first['detail']}{more}; see {again}")
    return dict(result["signature"] or {"status": "unsigned"})


def signature_sentence(signature: Mapping[str, Any]) -> str:
    """What the signature check said, for the application's output."""
    status = signature.get("status")
    if status == "valid":
        return f"the release's signature is valid (public key sha256 {signature.get('public_key_sha256')})"
    if status == "signed-unchecked":
        return (f"the release is signed (public key sha256 {signature.get('public_key_sha256')}) but its signature "
                "was not checked: give --key PUBLIC_KEY")
    return "the release is unsigned: its authenticity rests on where you got it"


def checked_sentence(checks: list[Mapping[str, Any]], notes: list[tuple[bool, str, str]],
                     claims: Mapping[str, Any]) -> str:
    """What was checked on the new batch alone, in one sentence that is never empty."""
    def params(c: Mapping[str, Any]) -> str:
        text = params_text(c["params"])
        if text == "defaults" and isinstance(claims.get(c["check"]), Mapping):  # the check reads the claim
            return "as claimed: " + params_text(claims[c["check"]])
        return text

    said = [f"{c['check']} ({params(c)}) {'holds' if c['holds'] else 'measured'}" for c in checks]
    said += [f"{what} not checked ({detail})" for _, what, detail in notes]
    if not said:
        return ("nothing: the release claims no privacy model and no evaluate step of its table checks one, so no "
                "guarantee was checked")
    return "; ".join(said)


def apply_release(release: Path, new_data: Path, out: Path | None = None, *, hierarchies: Path | None = None,
                  suppression: float | None = None, key: Path | None = None, engine: Any = None) -> dict[str, Any]:
    """Apply the release at ``release`` to ``new_data``, writing the folder ``out`` (default
    ``<release>-applied``); returns the application's record. ``key``: the publisher's public
    key file; the release's signature must verify under it. ``engine``
    (:class:`anonflow.api.Engine`, the CLI's session): what prepares the new batch, checks and
    writes the output folder; the plugin reaches the engine only through it. Raises InputError (exit 2) for
    input that cannot be applied, a release that ``anonflow verify`` would fail (with ``key``:
    one whose signature does not verify) or an output folder in the release; RunError (exit 1)
    when the release's guarantee would not hold on the new batch; nothing is written then."""
    if engine is None:
        raise InputError("applying a release needs the engine: give apply(..., engine=...) (anonflow.api.Engine; "
                         "'anonflow apply' gives its own)")
    release = Path(release)
    new_data = Path(new_data)
    out = Path(out) if out is not None else release.with_name(release.name.rstrip("/") + "-applied")
    manifest = load_manifest(release)
    _outside_release(release, out)
    engine.check_output_folder(out)
    registry = engine.registry
    for field in ("release", "steps", "files", "workflow", "integrity"):
        if not isinstance(manifest.get(field), (dict, list)):
            raise InputError(f"{release / MANIFEST}: field {field!r} is missing or not of its kind")
    if integrity(manifest)["manifest"] != (manifest.get("integrity") or {}).get("manifest"):
        raise InputError(f"{release / MANIFEST} does not match its own integrity digest (it was edited after the "
                         "release was written); check it with anonflow verify")
    rel = manifest["release"]
    if rel.get("layout") == "lossy-join":
        raise InputError("a lossy-join release cannot be applied to new data: its classes and their sensitive "
                         "counts are fitted to the records it was made from, and its QI table publishes quasi-"
                         "identifiers exactly (a new record's values would be published as they are)")
    step, algo = _algorithm_step(manifest, registry)
    entry = file_entry(manifest, "table")
    try:
        digest = regular_sha256(release / str(entry.get("path")))
    except OSError as exc:
        raise InputError(f"{entry.get('path')} of the release cannot be read: {exc.strerror or exc}") from None
    if digest != entry.get("sha256"):
        raise InputError(f"{entry.get('path')} is not the release's published table: its sha256 differs from the "
                         "manifest's; check the release with anonflow verify")
    if not new_data.is_file():
        raise InputError(f"new data {new_data} is not a file")
    signature = _verified(release, key, engine)
    new_sha = regular_sha256(new_data)
    manifest_sha = file_sha256(release / MANIFEST)
    params = dict(step.get("params") or {})
    cap = algo.suppression_cap(params) if suppression is None else float(suppression)
    if not 0.0 <= cap <= 1.0 or math.isnan(cap):
        raise InputError(f"--suppression must be a fraction in [0, 1], got {suppression}")

    scratch = Path(tempfile.mkdtemp(prefix="anonflow-apply-"))
    try:
        with engine.scratch_sql() as sql:
            placed = _place_files(release, manifest, hierarchies, scratch)
            source_in = (step.get("inputs") or [{}])[0].get("name")
            overrides = [tuple(o) for o in manifest.get("overrides") or [] if isinstance(o, list) and len(o) == 3]
            batch = engine.prepare_batch(manifest["workflow"]["text"], source_in, new_data, scratch,
                                         seed=manifest.get("seed"), overrides=overrides)
            if batch.num_rows == 0:
                raise InputError(f"new data {new_data.name}: no records left after the recorded preparation")
            published = load_release_table(release, manifest)
            ctx = scratch_context(sql, scratch, "apply")
            actx = scratch_context(sql, scratch, step["step"])  # the algorithm's notes go into the record
            fitted = step.get("fitted") if isinstance(step.get("fitted"), Mapping) else {}
            applied, record = algo.apply(batch, published, params, actx, fitted=fitted)

            # the published columns, in the release's order
            typing = Typing.from_json(rel["typing"])
            names = [a.name for a in typing.attributes]
            data = applied.data
            missing = [c for c in names + [CLASS] if c not in data.column_names]
            if missing:
                raise RunError(f"{step['uses']}: apply returned no column {missing[0]!r}")
            data = data.select(names + [CLASS])
            claims = rel.get("claims") or {}
            n = data.num_rows

            # withhold the records of failing classes, within the allowance
            table = TypedTable(data.append_column(ROW, pa.array(np.arange(n, dtype=np.int64))), typing, claims)
            inverse, ok = _class_verdicts(table, claims, registry)
            failing = int((~ok[inverse]).sum())
            limit = suppression_limit(cap, n)
            withheld = 0
            if failing and failing <= limit:
                keep = ok[inverse]
                data = data.filter(pa.array(keep))
                withheld = failing
                table = TypedTable(data.append_column(ROW, pa.array(np.arange(data.num_rows, dtype=np.int64))), typing,
                                   claims)
            if data.num_rows == 0:
                raise RunError(f"apply: every record of the new batch would be withheld ({n}); nothing to publish")

            # the release's checks (the same that verify runs on its files), on the new batch alone
            planned, notes = release_checks(manifest, registry)
            bad_notes = [f"{what}: {detail}" for okay, what, detail in notes if not okay]
            if bad_notes:
                raise RunError(f"apply: {bad_notes[0]}")
            needs = next((c["check"] for c in planned if not c["recheck"]), None)
            if needs is not None:
                raise RunError(f"apply: the release's check {needs} needs the original table; it cannot be checked on "
                               "an applied batch")
            checks = [{"check": c["check"], "params": c["params"], "claim": bool(c.get("claim")),
                       "evaluated": c.get("evaluated"), "result": c["result"], "holds": c["holds"]}
                      for c in run_checks(planned, table, registry, ctx)]
            failed = [f"{'claimed ' if c['claim'] else ''}{c['check']} ({_shown(c['result'])})"
                      for c in checks if c["holds"] is False]
            failed += [m for c in checks if not c["claim"] for m in threshold_misses(c, manifest["steps"])]
            if failed:
                why = (f"; {failing} of its {n} records are in classes that fail the claimed model" if failing else "")
                hint = ""
                if failing and failing > limit:
                    need = min(math.ceil(failing / n * 1000 - 1e-9) / 1000, 1.0)
                    while need < 1.0 and suppression_limit(need, n) < failing:
                        need = min(round(need + 0.001, 3), 1.0)
                    hint = (f", more than the suppression allowance allows (--suppression {cap:g}: at most {limit}); "
                            f"withholding them needs --suppression {need:g}")
                raise RunError("apply: the new batch alone does not satisfy the release's guarantee: "
                               + "; ".join(failed) + why + hint + "; nothing was written")

            # listed by class, then by value, as a run's publisher lists records: never in the batch's own order
            data = data.sort_by([(k, "ascending") for k in [CLASS, *names]
                                 if not pa.types.is_nested(data.schema.field(k).type)])
            stem = Path(str(entry["path"])).stem
            meta = {TYPING_KEY: canonical_json(rel["typing"], strict=True),
                    RELEASE_KEY: canonical_json({"role": "table", "layout": "table", "class_column": CLASS,
                                                 "applied": True}, strict=True)}
            compression = (rel.get("params") or {}).get("compression", "zstd")
            result: dict[str, Any] = {}

            def write(tmp: Path) -> None:
                files = []
                for fmt in ("parquet", "csv"):
                    path = tmp / f"{stem}.{fmt}"
                    if fmt == "parquet":
                        write_parquet(path, data, meta, compression)
                    else:
                        write_csv(path, data)
                    files.append({"path": path.name, "role": "table", "format": fmt, "sha256": file_sha256(path),
                                  "rows": data.num_rows})
                record_json = plain({
                    "format": FORMAT, "schema_version": 1,
                    "anonflow": {"version": __version__},
                    "release": {"manifest_sha256": manifest_sha, "workflow": manifest["workflow"].get("name"),
                                "step": step["step"], "uses": step["uses"],
                                "plugin_version": step.get("plugin_version"), "params": params, "claims": claims},
                    "new_data": {"file": new_data.name, "sha256": new_sha, "rows": batch.num_rows},
                    "files_read": placed,
                    "applied": record,
                    "notes": list(actx.notes),
                    "suppression": {"allowance": cap, "limit": limit, "withheld": withheld},
                    "checked": "the new batch alone, not its union with the release",
                    "checks": checks,
                    "checked_sentence": checked_sentence(checks, notes, claims),
                    "signature": signature,
                    "signature_sentence": signature_sentence(signature),
                    "files": files,
                })
                body = json.dumps(record_json, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
                (tmp / APPLICATION).write_bytes((body + "\n").encode())
                result.update(record_json)

            engine.write_folder(out, write)
            result["out"] = str(out)
            return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
