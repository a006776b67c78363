"""The privacy checks of a released table: which apply, and running them.

* :func:`planned_checks`: from a run's record, the checks that apply to the table it
  releases (each privacy metric of an evaluate step of that table, with its parameters, then
  each claimed model no evaluate step checked, with default parameters);
  :func:`derive_checks`: the same list derived from a release's manifest alone (``anonflow
  verify`` never trusts the manifest's own ``checks``); :func:`claim_checks`: each claimed
  model with its claimed parameters, where no planned check reads the claim;
  :func:`release_checks`: both, the one list ``verify`` and ``apply`` run.
* :func:`run_check`: one check run through the plugin registry, as an evaluate step runs it
  (:func:`scratch_context` gives it a context outside a workflow step); :func:`run_checks`:
  the checks :func:`release_checks` decided, on a table (the published one, or a new batch).
* :func:`verdict` and :func:`threshold_misses`: a metric value against its threshold, and
  the evaluate step's thresholds on a check's values.

The release publisher runs these on the files it writes
(:func:`anonflow_std.publishing.release.run_file_checks`), ``anonflow verify`` on a release's files
(:mod:`anonflow_std.publishing.verify`), and the report page shows them (:mod:`anonflow_std.publishing.report`).
"""

from __future__ import annotations

import json
import math
import types
from typing import Any, Mapping

import numpy as np

from anonflow.api import RunInfo, StepContext, TypedTable
from anonflow.params import metric_entries
from anonflow.errors import InputError
from anonflow.lineage import canonical_json
from anonflow.params import ParamError, validate_params


def planned_checks(info: RunInfo, released: dict[str, Any] | None, claims: Mapping[str, Any],
                   registry: Any) -> list[dict[str, Any]]:
    """The privacy checks that apply to the released table: each privacy metric of an
    evaluate step whose (anonymized) input is that table, with its parameters, then each
    privacy model the producing algorithm claims that no evaluate step checked (default
    parameters: the check reads the claim). ``evaluated`` names the evaluate step, if any."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    if released is None:
        return out
    for s in info.steps:
        if s["kind"] != "evaluate" or not s.get("inputs") or s["inputs"][-1].get("hash") != released["output_hash"]:
            continue
        for name, given in metric_entries((s["params"] or {}).get("metrics") or [], where=s["step"]):
            if not registry.has("metric", name):
                continue
            reg = registry.get("metric", name)
            if reg.obj.category != "privacy":
                continue
            params = validate_params(reg.obj.params, given)
            if (name, canonical_json(params)) in seen:
                continue
            seen.add((name, canonical_json(params)))
            out.append({"check": name, "params": params, "evaluated": s["step"],
                        "plugin": {"distribution": reg.distribution, "version": reg.version},
                        "recheck": not reg.obj.requires_original})
    for name in sorted(claims):
        if any(c["check"] == name for c in out) or not registry.has("metric", name):
            continue
        reg = registry.get("metric", name)
        if reg.obj.category != "privacy" or reg.obj.requires_original:
            continue
        try:
            params = validate_params(reg.obj.params, {})
        except ParamError:
            continue
        out.append({"check": name, "params": params, "evaluated": None,
                    "plugin": {"distribution": reg.distribution, "version": reg.version}, "recheck": True})
    return out


def scratch_context(info_sql: Any, workflow_dir: Any, step: str = "check") -> StepContext:
    """A context for running a metric outside a workflow step (notes are discarded)."""
    return StepContext(step=step, seed=0, rng=np.random.default_rng(0), workflow_dir=workflow_dir,
                       output_dir=workflow_dir, sql=info_sql)


def run_check(check: Mapping[str, Any], table: TypedTable, registry: Any, ctx: StepContext) -> dict[str, Any]:
    """Run one recorded check through the registry, as an evaluate step would."""
    reg = registry.get("metric", check["check"])
    params = validate_params(reg.obj.params, check["params"])
    reg.obj.check(params, anonymized=table)
    result = reg.obj.compute(None, table, params, ctx)
    return {k: clean_number(v) for k, v in sorted(result.items())}


def run_checks(checks: list[Mapping[str, Any]], table: TypedTable, registry: Any,
               ctx: StepContext) -> list[dict[str, Any]]:
    """Run the checks :func:`release_checks` decided on ``table`` (a release's published
    table for ``verify``, a new batch for ``apply``): each entry with its ``result`` and
    ``holds`` (True/False for a model with a parameter to hold, None for one that measures
    only, or for a check that needs the original table: not run, ``result`` None)."""
    out = []
    for c in checks:
        entry = dict(c)
        if not c["recheck"]:
            entry.update(result=None, holds=None)
        else:
            result = run_check(c, table, registry, ctx)
            h = result.get(f"{c['check']}.holds")
            entry.update(result=result, holds=None if h is None else h == 1.0)
        out.append(entry)
    return out


def clean_number(value: Any) -> float | None:
    v = float(value)
    return None if math.isnan(v) or math.isinf(v) else v


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
        return [f"step {where}'s thresholds are not a mapping: {show_value(thresholds)}"]
    for key, bound in sorted(thresholds.items()):
        if key != name and not str(key).startswith(name + "."):
            continue
        value = result.get(key)
        try:
            ok = isinstance(bound, Mapping) and bool(bound) and verdict(value, bound, key) is True
        except TypeError:
            ok = False
        if not ok:
            out.append(f"{key} = {show_value(value)} on the published files misses the threshold "
                       f"{show_value(bound)} of evaluate step {where}")
    return out


def derive_checks(manifest: Mapping[str, Any], registry: Any) -> list[dict[str, Any]]:
    """The privacy checks a release must record, derived from its manifest as the publisher
    derives them from the run (:func:`planned_checks`): each privacy metric of an
    evaluate step (manifest ``steps``) whose anonymized input is the released table
    (``release.input.hash``), with that step's parameters, then each model in
    ``release.claims`` that no evaluate step checked, with default parameters (which read the
    claim). Never the manifest's own ``checks``."""
    rel = manifest.get("release") or {}
    claims = rel.get("claims") if rel.get("claims") is not None else {}
    if not isinstance(claims, Mapping):
        raise InputError(f"release.claims is not a mapping of model -> parameters: {show_value(claims)}")
    steps = manifest.get("steps") or []
    if not isinstance(steps, list) or not all(isinstance(s, Mapping) for s in steps):
        raise InputError("manifest field steps is not a list of steps")
    released = {"output_hash": (rel.get("input") or {}).get("hash")}
    return planned_checks(types.SimpleNamespace(steps=steps), released, claims, registry)


def release_checks(manifest: Mapping[str, Any], registry: Any) -> tuple[list[dict[str, Any]],
                                                                        list[tuple[bool, str, str]]]:
    """Every privacy check a release implies, decided once for ``anonflow verify`` (which
    runs them on the published files) and ``anonflow apply`` (which runs them on a new batch
    alone): the checks :func:`derive_checks` derives from the manifest's evaluate steps and
    claims, then those :func:`claim_checks` adds for each claimed model with its claimed
    parameters (``claim: True``). Returns ``(checks, notes)``; ``notes`` are the claims that
    cannot be checked, as :func:`claim_checks` says. Raises InputError when the manifest's
    claims or steps are not of their kind."""
    derived = derive_checks(manifest, registry)
    rel = manifest.get("release") or {}
    extra, notes = claim_checks(rel.get("claims") if rel.get("claims") is not None else {}, derived, registry)
    return derived + extra, notes


def claim_checks(claims: Any, planned: list[dict[str, Any]],
                 registry: Any) -> tuple[list[dict[str, Any]], list[tuple[bool, str, str]]]:
    """What ``claims`` (the released table's claimed models) call for beyond ``planned``:
    each claimed privacy model checked with its **claimed parameters** (those the check
    plugin declares), unless a planned check of that model runs with default parameters
    (which read the claim). Returns ``(checks, notes)``: the checks (``claim: True``) and
    ``(ok, what, detail)`` for claims that cannot be checked on the published files: a model
    with no installed check plugin, or invalid claimed parameters (not ok); a model whose
    check needs the original table (ok, said)."""
    from .release import plain  # (release.py imports this module)

    checks: list[dict[str, Any]] = []
    notes: list[tuple[bool, str, str]] = []
    if not isinstance(claims, Mapping):
        return checks, [(False, "manifest field release.claims", f"is not a mapping of model -> parameters: "
                                                                f"{show_value(claims)}")]
    for name in sorted(claims):
        given, what = claims[name], f"claimed model {name}"
        if not isinstance(given, Mapping):
            notes.append((False, what, f"release.claims.{name} is not a mapping of parameters: {show_value(given)}"))
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
        default_key = canonical_json(plain(defaults), strict=True) if defaults is not None else None
        reads_claim = default_key is not None and any(
            c["check"] == name and canonical_json(plain(c["params"]), strict=True) == default_key for c in planned)
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


def show_value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."
