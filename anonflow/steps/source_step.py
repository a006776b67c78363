"""Sources: the nodes that bring records from outside into the store (:class:`SourceStep`).

A source is declared under ``sources:`` (not by ``uses:``), named in messages as ``source
'x'``, run only when a step reads it, and first in the plan. Its fingerprint is over the
content it reads: a file's sha256 (read again every run), an in-memory table's content hash,
or, for a PostgreSQL table, the content hash of the records as read (so it is read every run).
"""

from __future__ import annotations

import time
from typing import Any

from ..api import file_sha256
from ..errors import InputError
from ..lineage import canonical_json
from .step import SourceRun, Step


class SourceStep(Step):
    kind = "source"
    noun = "source"
    stage = 0
    only_when_read = True
    loads = True
    #: served from the store when its content hash is known before reading (not a PostgreSQL table)
    cacheable = True
    preparation = True
    redone_by_apply = True
    description = "Records read from a file, a database table or memory into the store."
    min_inputs = max_inputs = 0

    def load(self, run: SourceRun) -> Any:
        node, spec, where, rec, run_id, use_cache, t0 = (run.node, run.spec, run.where, run.rec, run.run_id,
                                                         run.use_cache, run.t0)
        src = node.source
        remote = src.format == "postgres"  # a server's table: its content is known once read, every run
        if src.in_memory:  # a table handed over in Python: its name and content hash, no path
            digest = str(src.sha256)
            origin = f"memory:{src.name}"
        else:
            try:
                digest = file_sha256(src.path) if not remote and (src.format != "duckdb" or src.path) else ""
            except FileNotFoundError:
                raise InputError(f"file not found: {src.path}", where=where) from None
            origin = src.describe() if remote else str(src.path or src.table)
        if remote:  # its sha256: the content hash of the records as read (anonflow.postgres)
            try:
                art = run.store.load_source(src, run_id=run_id, file_hash="")
            except InputError as exc:
                raise InputError(exc.message, where=spec.where(exc.where or "")) from None
            digest = art.hash
        fingerprint = run.fingerprint([digest, canonical_json(src.options), src.table])
        if src.in_memory:
            rec.update(params={"path": None, "table": None, "in_memory": src.name}, fingerprint=fingerprint,
                       inputs=[{"name": origin, "sha256": digest}])
        else:
            rec.update(params={"path": str(src.path), "table": src.table, **src.options}, fingerprint=fingerprint,
                       inputs=[{"name": src.describe() if remote else str(src.path), "sha256": digest}])
        cached = run.store.cached_step(fingerprint) if use_cache and digest and not remote else None
        if remote:
            rec["status"] = "succeeded"
        elif cached:
            art = run.store.artifact(cached["output_table"])
            rec.update(status="cached", cached_from=cached["run_id"])
        else:
            try:
                art = run.store.load_source(src, run_id=run_id, file_hash=digest)
            except InputError as exc:
                raise InputError(exc.message, where=spec.where(exc.where or "")) from None
            rec["status"] = "succeeded"
        rec.update(output_table=art.table, output_hash=art.hash, rows=art.rows,
                   seconds=time.perf_counter() - t0)
        run.store.record_step(run_id, rec, lineage=[(origin, art.table)])
        return art
