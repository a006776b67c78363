"""Canonical JSON text: the bytes every hash anonflow records over JSON data is taken over
(step fingerprints, a release's digests). A foundation module: the plugin API offers it."""

from __future__ import annotations

import json
from typing import Any


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
