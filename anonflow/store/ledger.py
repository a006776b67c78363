"""Lineage: tracing what produced an artifact, back to the source files
(:func:`trace`), and the canonical JSON text behind the hashes lineage records
(:func:`canonical_json`: step fingerprints, a release's digests)."""

from __future__ import annotations

import json
import os
from typing import Any

from .errors import StoreError
from .store import Store


def canonical_json(value: Any, *, strict: bool = False) -> str:
    """``value`` as canonical JSON text: keys sorted, no whitespace. Every hash anonflow
    records over JSON data is taken over these bytes, so both forms are fixed (a change would
    change recorded fingerprints and the digests of existing releases):

    * default: non-ASCII characters escaped (``\\u00e9``), NaN and infinities written as
      ``NaN``/``Infinity``, and a value JSON cannot hold written as its ``str()``. Step
      fingerprints (the runner) and parameters shown on a report page use it.
    * ``strict=True``: strict JSON, as a release's manifest is: text written as it is (UTF-8
      once encoded), and NaN, infinities or a value JSON cannot hold refused (``ValueError``,
      ``TypeError``). A release's field digests, its Parquet metadata, and comparisons of
      recorded values use it.

    (:func:`anonflow.table.canonical` is another thing: a table in canonical row order.)"""
    if strict:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def trace(store: Store, target: str, run_id: str | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Return ``(depth, step record)`` pairs: the producer of ``target`` first, then its inputs'
    producers, depth-first. ``target`` is a step name, a store table name or a published file."""
    start = _resolve(store, target, run_id)
    out: list[tuple[int, dict[str, Any]]] = []
    seen: set[tuple[str, str]] = set()

    def visit(rec: dict[str, Any], depth: int) -> None:
        key = (rec["run_id"], rec["step"])
        if key in seen:
            return
        seen.add(key)
        rec = dict(rec)
        rec["files"] = [o for o in store.outputs(rec["run_id"]) if o["step"] == rec["step"]]
        prefix = f"{rec['step']}."
        rec["metrics"] = {k[len(prefix):]: v for k, v in store.metrics(rec["run_id"]).items() if k.startswith(prefix)}
        out.append((depth, rec))
        for inp in [*(rec.get("inputs") or []), *((rec.get("summary") or {}).get("references") or [])]:
            parent = store.step_in_run(rec["run_id"], inp["name"]) if "table" in inp else None
            if parent is not None:
                visit(parent, depth + 1)

    visit(start, 0)
    return out


def _resolve(store: Store, target: str, run_id: str | None) -> dict[str, Any]:
    if run_id is not None:
        rid = store.run(run_id)["run_id"]
        rec = store.step_in_run(rid, target)
        if rec is None:
            raise StoreError(f"run {rid} has no step {target!r}")
        return rec
    rec = store.find_producer(target)
    if rec is None and os.path.exists(target):
        rec = store.find_producer(os.path.abspath(target))
    if rec is None:
        latest = store.latest_run_with_step(target)
        if latest is not None:
            rec = store.step_in_run(latest, target)
    if rec is None:
        raise StoreError(f"nothing in {store.path} is called {target!r}: give a step name, a table name "
                         "(t_...) or the path of a published file")
    return rec
