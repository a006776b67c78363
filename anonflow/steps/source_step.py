"""Sources: the nodes that bring records from outside into the store (:class:`SourceStep`).

A source is declared under ``sources:`` (not by ``uses:``), named in messages as ``source
'x'``, run only when a step reads it, and first in the plan. Its fingerprint is over the
content it reads: a file's sha256 (read again every run), an in-memory table's content hash,
or, for a PostgreSQL table, the content hash of the records as read (so it is read every run).
"""

from __future__ import annotations

import time
from typing import Any

from ..canonjson import canonical_json
from ..errors import InputError
from ..sources import kind_of, load_source
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
        kind = kind_of(src)  # what the run records of it, and how it is read (anonflow.sources)
        remote = kind.remote  # a server's table: its content is known once read, every run
        try:
            digest = kind.content_hash(src)
        except InputError as exc:
            raise InputError(exc.message, where=where) from None
        origin = kind.origin(src)
        if remote:  # its sha256: the content hash of the records as read
            try:
                art = load_source(run.store, src, run_id=run_id)
            except InputError as exc:
                raise InputError(exc.message, where=spec.where(exc.where or "")) from None
            digest = art.hash
        fingerprint = run.fingerprint([digest, canonical_json(src.options), src.table])
        params, input_name = kind.recorded(src)
        rec.update(params=params, fingerprint=fingerprint, inputs=[{"name": input_name, "sha256": digest}])
        cached = run.store.cached_step(fingerprint) if use_cache and digest and not remote else None
        if remote:
            rec["status"] = "succeeded"
        elif cached:
            art = run.store.artifact(cached["output_table"])
            rec.update(status="cached", cached_from=cached["run_id"])
        else:
            try:
                art = load_source(run.store, src, run_id=run_id)
            except InputError as exc:
                raise InputError(exc.message, where=spec.where(exc.where or "")) from None
            rec["status"] = "succeeded"
        rec.update(output_table=art.table, output_hash=art.hash, rows=art.rows,
                   seconds=time.perf_counter() - t0)
        run.store.record_step(run_id, rec, lineage=[(origin, art.table)])
        return art
