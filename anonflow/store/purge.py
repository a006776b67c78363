"""Purge (retention): which of the store's data tables hold confidential records, and purging them.

The store keeps every source table and every intermediate table: the original microdata.
:func:`plan_purge` decides which data tables a purge removes, :func:`purge` removes them and
rewrites the store into a fresh file (dropped tables' bytes stay in a DuckDB file after
CHECKPOINT and VACUUM), :func:`held` says what a store holds.

What a purge keeps: every lineage record (runs, step runs with their parameters, inputs and
output hashes, metrics, published files with their sha256) and every table's record in
``af_tables`` (its content hash, rows, typing), marked ``purged_at``. So ``anonflow lineage``
still traces a published file to its sources' sha256, and ``anonflow verify --rerun``
reproduces a release from the source files. A step whose output was purged is not served from
the cache: the next run computes it anew (and the store holds it again).

The words, as the CLI uses them:

* a run **uses** a table when one of its steps wrote it, read it (an input, or a table a
  parameter names), or created it (a hierarchy's table); a table used also uses the tables a
  view of it reads and its hierarchies' tables;
* a **published** table is the input of a publish step of a successful run, with the table
  a view of it reads (the records are the published ones); not its hierarchies, which list
  the original values of the quasi-identifiers (a hierarchy built from the data lists every
  distinct value): they are purged with the originals, and a kept table whose hierarchies were
  purged is not served from the cache (the next run computes it, and them, again);
* **confidential** data: every held table that is not published: sources and intermediate
  steps.

Selections: ``all`` (every run), ``runs`` (these runs: their tables go even if a later run
used them too; that run computes them anew when needed), ``before`` (runs started before a
time: a table a later run used too is kept). ``keep``: ``published`` (the default) or
``none``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from ..errors import InputError, StoreError
from .facade import Store

KEEP = ("published", "none")
#: seconds per unit of an age (``30d``)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str, what: str = "--older-than") -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w``, ``45s``: a timedelta (InputError naming ``what``)."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text if isinstance(text, str) else "")
    if not m:
        raise InputError(f"{what} {text!r}: expected a number and a unit, such as 30d, 12h, 90m or 2w "
                         "(s, m, h, d, w)")
    return timedelta(seconds=int(m.group(1)) * _AGE_UNITS[m.group(2)])


@dataclass
class PurgePlan:
    selection: dict[str, Any]
    runs: list[str]
    #: data tables and views to drop (af_tables names and the af_raw_* tables under sources)
    objects: list[str] = field(default_factory=list)
    #: af_tables names whose records go (marked purged)
    tables: list[str] = field(default_factory=list)
    #: records removed, each distinct content once
    rows: int = 0
    #: held tables the selection used that are kept: published (keep: published), or used by a later run
    kept_published: list[str] = field(default_factory=list)
    kept_later: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"selection": self.selection, "runs": self.runs, "tables": self.tables, "rows": self.rows,
                "kept_published": self.kept_published, "kept_for_later_runs": self.kept_later}


class _Graph:
    """The store's tables, what each run used, and what each table needs."""

    def __init__(self, store: Store) -> None:
        self.objects = store.data_objects()
        self.records = {r["name"]: r for r in store.table_records()}
        self.held = {n for n, r in self.records.items() if r["purged_at"] is None and n in self.objects}
        self.uses: dict[str, set[str]] = {}
        self.started: dict[str, datetime] = {}
        self.published: set[str] = set()
        for s in store.step_tables():
            used = self.uses.setdefault(s["run_id"], set())
            self.started[s["run_id"]] = s["started_at"]
            named = [s["output_table"], *(i.get("table") for i in s["inputs"] or []),
                     *(r.get("table") for r in (s["summary"] or {}).get("references") or [])]
            used.update(n for n in named if n)
            if s["kind"] == "publish" and s["status"] in ("succeeded", "cached") and s["run_status"] == "succeeded":
                self.published.update(i["table"] for i in s["inputs"] or [] if i.get("table"))
        for name, rec in self.records.items():
            if rec["created_run"]:
                self.uses.setdefault(rec["created_run"], set()).add(name)
        for run in store.runs(limit=1 << 62):
            self.started.setdefault(run["run_id"], run["started_at"])
            self.uses.setdefault(run["run_id"], set())

    def closure(self, names: Iterable[str], *, hierarchies: bool = True) -> set[str]:
        """``names`` with every data object they need: the tables a view reads, and (with
        ``hierarchies``) their hierarchies' tables."""
        out: set[str] = set()
        todo = [n for n in names if n]
        while todo:
            n = todo.pop()
            if n in out:
                continue
            out.add(n)
            todo.extend(self.objects.get(n, ("", set()))[1])
            if hierarchies:
                todo.extend((self.records.get(n) or {}).get("hierarchies") or [])
        return out

    def published_closure(self) -> set[str]:
        """The published tables and the tables their views read; not their hierarchies (a
        hierarchy built from the data lists the original values: it goes with the originals)."""
        return self.closure(self.published, hierarchies=False)

    def rows(self, names: Iterable[str]) -> int:
        seen: dict[str, int] = {}
        for n in names:
            rec = self.records.get(n)
            if rec is not None:
                seen[rec["data_hash"]] = int(rec["rows"])
        return sum(seen.values())


def plan_purge(store: Store, *, runs: Iterable[str] | None = None, before: datetime | None = None,
               everything: bool = False, keep: str = "published") -> PurgePlan:
    """What a purge of this selection removes (nothing is changed)."""
    if keep not in KEEP:
        raise InputError(f"keep must be one of {', '.join(KEEP)}, got {keep!r}")
    chosen = [everything, runs is not None, before is not None]
    if sum(chosen) != 1:
        raise InputError("say what to purge: every run (--all), a run (--run ID), or runs older than an age "
                         "(--older-than AGE); one of them")
    graph = _Graph(store)
    if everything:
        selected = sorted(graph.uses)
        selection: dict[str, Any] = {"all": True}
    elif runs is not None:
        selected = sorted({store.run(r)["run_id"] for r in runs})
        selection = {"runs": selected}
    else:
        assert before is not None
        selected = sorted(r for r, t in graph.started.items() if t < before)
        selection = {"before": before.isoformat()}
    selection["keep"] = keep
    if everything:
        candidates = set(graph.objects)
    else:
        candidates = graph.closure(n for r in selected for n in graph.uses.get(r, ()))
    published = graph.published_closure() if keep == "published" else set()
    later: set[str] = set()
    if before is not None:
        later = graph.closure(n for r, used in graph.uses.items() if r not in selected for n in used)
    kept = published | later
    drop = sorted(n for n in candidates - kept if n in graph.objects and (n in graph.held or n not in graph.records))
    tables = [n for n in drop if n in graph.records]
    return PurgePlan(selection, selected, drop, tables, graph.rows(tables),
                     kept_published=sorted((candidates & published & graph.held) - later),
                     kept_later=sorted(candidates & later & graph.held))


def purge(store: Store, plan: PurgePlan, *, rewrite: bool = True) -> dict[str, Any]:
    """Remove what ``plan`` names, rewrite the store into a fresh file (always: tables dropped
    earlier, such as a step's scratch table, left their bytes too), and record the purge in
    ``af_purges``. Returns the plan's JSON with the file's size before and after."""
    if rewrite:
        store.refuse_other_names()  # the zeros would land in every other name of the file
    before = store.file_size()
    journal = {**plan.to_json(), "objects": plan.objects}
    if rewrite:  # an interrupted purge is finished by the next writable open (Store._finish_interrupted_purge)
        store.begin_purge(journal)
    if plan.objects:
        store.drop_data(plan.objects, plan.tables)
    redacted = store.redact_free_text(plan.runs)
    if rewrite:  # even with nothing to drop: tables dropped before (a scratch table, an interrupted purge) left bytes
        store.rewrite()
    after = store.file_size()
    store.record_purge(plan.selection, plan.tables, plan.rows, before, after)
    if rewrite:
        store.end_purge()
    return {**plan.to_json(), "bytes_before": before, "bytes_after": after, "redacted": redacted}


def held(store: Store) -> dict[str, Any]:
    """What confidential data the store holds: in all, and for each run (the held tables it
    used that are not published)."""
    graph = _Graph(store)
    public = graph.published_closure()
    confidential = {n for n in graph.held if n not in public}
    per_run = {}
    for run, used in graph.uses.items():
        mine = graph.closure(used) & graph.records.keys()
        per_run[run] = {"tables": len(mine & confidential), "rows": graph.rows(mine & confidential),
                        "purged": len({n for n in mine if graph.records[n]["purged_at"] is not None})}
    return {"tables": len(confidential), "rows": graph.rows(confidential),
            "published_tables": len(public & graph.held), "bytes": store.file_size(), "runs": per_run}


def purge_file(db: str | os.PathLike[str], *, everything: bool = False, runs: Iterable[str] | None = None,
               older_than: str | timedelta | None = None, keep: str = "published",
               dry_run: bool = False) -> dict[str, Any]:
    """``anonflow purge`` and ``anonflow.purge()``: plan and (unless ``dry_run``) carry out a
    purge of the store file ``db``. Only an anonflow store is purged: the file is first opened
    read-only and its schema checked, so a DuckDB file of the user's is never rewritten.
    Returns the plan's JSON, with the sizes before and after and ``dry_run``."""
    db = os.fspath(db)
    if not os.path.exists(db):
        raise StoreError(f"no anonflow store at {db} (pass --db)")
    before = None
    if older_than is not None:
        age = parse_age(older_than, "older_than") if isinstance(older_than, str) else older_than
        before = datetime.now(timezone.utc) - age
    Store(db, read_only=True).close()  # an anonflow store, of a schema this version reads
    with Store(db, read_only=dry_run) as store:  # a dry run changes nothing (not even a pending purge)
        plan = plan_purge(store, runs=list(runs) if runs is not None else None, before=before,
                          everything=everything, keep=keep)
        done = plan.to_json() if dry_run else purge(store, plan)
    return {**done, "dry_run": dry_run}
