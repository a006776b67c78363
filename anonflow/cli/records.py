"""The commands that read the store and the registry: ``runs``, ``lineage``, ``report``,
``hierarchy show``, ``purge``, ``plugins`` and ``schema``. Parse, ask the store, print."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from .. import __version__
from ..api import atomic_write
from ..codehash import engine_digest, short
from ..errors import InputError, StoreError
from ..params import suggest
from ..registry import get_registry
from ..store import KEEP
from ..session import Session
from ..workflow.reference import json_schema_text
from .shared import (DEFAULT_DB, display_path, echo_json, guard, overrides_text, printable, release_publisher,
                     rows_text, size_text, step_uses)



@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the registry as JSON.")
@guard
def plugins(as_json: bool) -> None:
    """List every registered plugin with its kind, version, distribution and code digest
    (the sha256 of its package's files, the first 12 digits here: a changed plugin is never
    served from the step cache, even without a version bump)."""
    registry = get_registry()
    if as_json:
        echo_json([r.to_json() for r in registry])
        return
    click.echo(f"anonflow {__version__}, code {short(engine_digest())}")
    for r in registry:
        click.echo(f"{r.kind:<10} {r.name:<22} {r.version:<8} {r.distribution} {r.distribution_version} "
                   f"code {short(r.code)}  {r.obj.description}")
        for p in r.obj.params:
            click.echo(f"{'':<33}{p.describe()}" + (f" - {p.help}" if p.help else ""))



@click.command()
@click.argument("run_id", required=False)
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("--limit", default=20, show_default=True, help="How many runs to list.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guard
def runs(run_id: str | None, db: str, limit: int, as_json: bool) -> None:
    """List recorded runs, or show one run (steps, parameters, metrics, outputs). RUN_ID is a
    run id, a prefix of one, or 'latest' (the newest run)."""
    session = Session(db)
    if run_id is None:
        rows, h, pending = session.runs(limit)
        if as_json:
            echo_json(rows)
            return
        if not rows:
            click.echo(f"no runs recorded in {db}")
        for r in rows:
            took = (r["finished_at"] - r["started_at"]).total_seconds() if r["finished_at"] else None
            data = (f"holds {r['held_tables']} table(s), {r['held_records']} records" if r["held_tables"]
                    else "holds no source or intermediate table")
            if r["purged_tables"]:
                data += f" ({r['purged_tables']} purged)"
            click.echo(f"{r['run_id']}  {r['status']:<9} {r['workflow']:<24} seed={r['seed']}"
                       + (f"  {took:.2f}s" if took is not None else "")
                       + f"  {data}"
                       + (f"  --set {overrides_text(r['overrides'], ' --set ')}" if r["overrides"] else "")
                       + (f"  error: {r['error']}" if r["error"] else "")
                       + (f"  cleaned up after it: {'; '.join(r['cleaned'])}" if r.get("cleaned") else ""))
        if pending is not None:
            click.echo(f"an interrupted purge of {db} (started {pending.get('started_at') or 'at an unknown time'}, "
                       f"{len(pending.get('tables') or [])} table(s)) is pending: the file may still hold the "
                       "records it was removing; the next run or 'anonflow purge' on this store finishes it")
        size = f", a file of {size_text(h['bytes'])}" if h["bytes"] is not None else ""
        click.echo(f"confidential data in {db}: {h['tables']} source or intermediate table(s), {h['rows']} "
                   f"records{size}; published tables: {h['published_tables']}"
                   + (" ('anonflow purge --all' removes them, keeping the lineage)" if h["tables"] else ""))
        return
    detail = session.run_record(run_id)
    run_rec = detail["run"]
    rid = run_rec["run_id"]
    if as_json:
        echo_json(detail)
        return
    click.echo(f"run {rid}: {run_rec['workflow']} ({run_rec['workflow_path']}) {run_rec['status']}")
    click.echo(f"  seed {run_rec['seed']}, workflow sha256 {run_rec['workflow_hash'][:16]}..., "
               f"started {run_rec['started_at']}")
    if run_rec["overrides"]:
        click.echo("  overrides: --set " + overrides_text(run_rec["overrides"], " --set "))
    if run_rec["error"]:
        click.echo(f"  error: {run_rec['error']}")
    for line in run_rec.get("cleaned") or []:
        click.echo(f"  cleaned up after it: {line}")
    for s in detail["steps"]:
        cached = f" (reused from {s['cached_from']})" if s["cached_from"] else ""
        click.echo(f"  {s['position'] + 1:>2}. {s['step']} [{step_uses(s)}] {s['status']}{cached}")
        if s["kind"] != "source":
            click.echo(f"      params: {json.dumps(s['params'], sort_keys=True, default=str)}")
        for i in s["inputs"] or []:
            click.echo(f"      input: {i.get('name')} {i.get('table', '')} {(i.get('hash') or i.get('sha256', ''))[:16]}")
        if s["output_table"]:
            click.echo(f"      output: {s['output_table']} ({s['rows']} rows) hash {s['output_hash'][:16]}...")
        for column, what in sorted(((s["summary"] or {}).get("perturbs") or {}).items()):
            click.echo(f"      perturbs {column}: {json.dumps(what, sort_keys=True)}")
        if (s["summary"] or {}).get("privacy_loss"):  # the differential privacy it spent (anonflow budget)
            click.echo(f"      privacy loss: {json.dumps(s['summary']['privacy_loss'], sort_keys=True)}")
        for note in (s["summary"] or {}).get("notes", []):
            click.echo(f"      note: {note}")
        if s["error"]:
            click.echo(f"      error: {s['error']}")
    for key, value in detail["metrics"].items():
        click.echo(f"  metric {key} = {value:.6g}")
    for out in detail["outputs"]:
        click.echo(f"  output {display_path(out['path'])} ({rows_text(out['rows'])}sha256 {out['sha256']})")



@click.command()
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("--all", "everything", is_flag=True, help="Purge the tables of every run.")
@click.option("--run", "run_ids", multiple=True, metavar="ID",
              help="Purge the tables this run used (repeatable; an id prefix is enough), even where later runs "
                   "used them too.")
@click.option("--older-than", "older", default=None, metavar="AGE",
              help="Purge the tables of runs started more than AGE ago (30d, 12h, 90m, 2w); tables a later run "
                   "used are kept.")
@click.option("--keep", type=click.Choice(KEEP), default="published", show_default=True,
              help="Keep the published (anonymized) tables, or purge them too.")
@click.option("--dry-run", is_flag=True, help="Say what would be purged; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guard
def purge(db: str, everything: bool, run_ids: tuple[str, ...], older: str | None, keep: str, dry_run: bool,
          as_json: bool) -> None:
    """Remove the records of sources and intermediate tables from the store, keep the lineage.

    The store holds the original microdata: every source and every intermediate table. purge
    drops the data tables of the runs chosen (all of them but the published ones, by default),
    keeps every lineage record and content hash (so 'anonflow lineage' still traces a
    published file to its sources' sha256, and 'anonflow verify --rerun' reproduces a release
    from the source files), then rewrites the store into a fresh file: dropped tables' bytes
    stay in a DuckDB file after CHECKPOINT and VACUUM."""
    done = Session(db).purge(everything=everything, runs=list(run_ids) if run_ids else None, older_than=older,
                             keep=keep, dry_run=dry_run)
    if as_json:
        echo_json(done)
        return
    verb = "would purge" if dry_run else "purged"
    click.echo(f"{verb} {len(done['tables'])} table(s), {done['rows']} records, of {len(done['runs'])} run(s) "
               f"from {db}")
    for name in done["tables"]:
        click.echo(f"  {name}")
    if done["kept_published"]:
        click.echo(f"kept {len(done['kept_published'])} published table(s)")
    if done["kept_for_later_runs"]:
        click.echo(f"kept {len(done['kept_for_later_runs'])} table(s) that later runs used")
    if not dry_run:
        if done.get("redacted"):
            click.echo(f"removed {done['redacted']} recorded error message(s) and note(s) of those runs (they could "
                       "quote original values)")
        click.echo(f"rewrote the store into a fresh file: {size_text(done['bytes_before'] or 0)} -> "
                   f"{size_text(done['bytes_after'] or 0)}; lineage and hashes kept")



@click.command()
@click.argument("target")
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("--run", "run_id", default=None,
              help="Look the step up in this run (an id, a prefix, or latest; default: the latest run with that step).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guard
def lineage(target: str, db: str, run_id: str | None, as_json: bool) -> None:
    """Show what produced TARGET (a step name, a store table, or a published file), from what,
    with which parameters, back to the source files."""
    chain = Session(db).lineage(target, run_id)
    if as_json:
        echo_json(chain)
        return
    for depth, s in chain:
        pad = "  " * depth
        head = f"{pad}{s['step']} [{step_uses(s)}] run {s['run_id']}"
        if s.get("cached_from"):
            head += f" (reused from {s['cached_from']})"
        click.echo(head)
        if s["kind"] == "source":
            for i in s["inputs"] or []:
                what = "read" if s["uses"] == "postgres" else "file"  # a server's table or query
                click.echo(f"{pad}  {what} {i['name']} sha256 {i['sha256']}")
        else:
            click.echo(f"{pad}  params {json.dumps(s['params'], sort_keys=True, default=str)}")
        if s.get("output_table"):
            click.echo(f"{pad}  -> {s['output_table']} ({s['rows']} rows, hash {s['output_hash'][:16]}...)")
        for out in s.get("files", []):
            click.echo(f"{pad}  -> {display_path(out['path'])} (sha256 {out['sha256'][:16]}...)")
        for key, value in s.get("metrics", {}).items():
            click.echo(f"{pad}  {key} = {value:.6g}")



@click.command()
@click.argument("run_id")
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the page here (default: standard output).")
@click.option("--overwrite", is_flag=True, help="Replace an existing file at -o (never the store or the run's inputs).")
@guard
def report(run_id: str, db: str, output: Path | None, overwrite: bool) -> None:
    """Write the HTML report of a recorded run: the same page a release holds (privacy checks,
    class sizes, information loss, metrics, parameter sweep, lineage). RUN_ID is a run id, a
    prefix of one, or 'latest' (the newest run)."""
    publisher = release_publisher()
    info, page = Session(db).report(run_id, publisher.report)
    rid = info.run["run_id"]
    if output is None:
        click.echo(page, nl=False)
        return
    _check_report_target(output, db, info, overwrite)
    atomic_write(output, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    click.echo(f"report of run {rid} written to {output}", err=True)



def _check_report_target(output: Path, db: str, info: Any, overwrite: bool) -> None:
    """``report -o`` never writes over the store or a file the run read (its workflow file, a
    source), and over any other existing file only with ``--overwrite``."""
    target = os.path.realpath(output)
    inputs = {os.path.realpath(p) for p in (db, f"{db}.wal", info.run.get("workflow_path") or "")
              if p} | {os.path.realpath(s["path"]) for s in info.sources if s.get("path")}
    if target in inputs:
        raise InputError(f"-o {output} is the store or a file run {info.run['run_id']} read; write the report "
                         "elsewhere")
    if (output.exists() or output.is_symlink()) and not overwrite:
        raise InputError(f"-o {output} exists; anonflow does not write over a file unless told to: add --overwrite, "
                         "or choose another path")



@click.group()
def hierarchy() -> None:
    """Inspect generalization hierarchies."""


@hierarchy.command("show")
@click.argument("target")
@click.argument("column", required=False)
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("--run", "run_id", default=None,
              help="Look the step up in this run (an id, a prefix, or latest; default: the latest run with that step).")
@click.option("--limit", default=50, show_default=True, help="How many values to print (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guard
def hierarchy_show(target: str, column: str | None, db: str, run_id: str | None, limit: int, as_json: bool) -> None:
    """Print the hierarchy of COLUMN attached to TARGET (a step name or a store table);
    without COLUMN, list the columns that have one."""
    hs = Session(db).hierarchies(target, run_id)
    if hs is None:
        raise StoreError(f"{target!r} produced no table")
    if column is None:
        if as_json:
            echo_json({c: h.describe() for c, h in hs.items()})
            return
        if not hs:
            click.echo(f"{target}: no hierarchies (add a hierarchy step)")
        for c, h in hs.items():
            d = h.describe()
            click.echo(f"{c:<20} {d['builder']:<10} levels 0..{d['height']}  distinct per level: "
                       + " / ".join(map(str, d["distinct_per_level"])))
        return
    if column not in hs:
        raise StoreError(f"{target!r} has no hierarchy for {column!r}{suggest(column, hs)}; "
                         f"it has: {', '.join(hs) or 'none'}")
    h = hs[column]
    rows = h.table.to_pylist()
    if as_json:
        echo_json({**h.describe(), "rows": rows})
        return
    shown = [{k: printable(v) for k, v in r.items()} for r in (rows if limit <= 0 else rows[:limit])]
    widths = [max(len(f"level{i}"), *(len(r[f"level{i}"]) for r in shown)) for i in range(h.height + 1)]
    click.echo("  ".join(f"level{i}".ljust(w) for i, w in enumerate(widths)))
    for r in shown:
        click.echo("  ".join(r[f"level{i}"].ljust(w) for i, w in enumerate(widths)))
    if len(shown) < len(rows):
        click.echo(f"... {len(rows) - len(shown)} more (--limit 0 shows all)")



@click.command()
@guard
def schema() -> None:
    """Print the JSON Schema of workflow files (the file anonflow ships as
    anonflow/schemas/workflow.schema.json), for editors: with yaml-language-server, a first
    line '# yaml-language-server: $schema=PATH' in a workflow file makes it checked as you type."""
    click.echo(json_schema_text(), nl=False)
