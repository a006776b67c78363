"""``anonflow run`` and ``anonflow plan``: parse, call the :class:`~anonflow.session.Session`,
print."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .. import egress
from ..runner.plan import plan_json
from ..session import Session
from ..session import TerminalProgress as _Progress
from ..workflow.model import RETAIN
from .shared import DEFAULT_DB, display_path, echo_json, guard, rows_text

ALLOW_HOST_HELP = ("A host that is not this machine which PostgreSQL sources and sinks may reach (repeatable); "
                   "a workflow file never allows one on its own (docs/egress.md).")


@click.command()
@click.argument("workflow", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=None, help="Override the workflow's seed.")
@click.option("--set", "overrides", multiple=True, metavar="STEP.PARAM=VALUE",
              help="Override a step parameter (repeatable); VALUE is read as YAML.")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder: every published path lies inside it (default: out/ beside the workflow file).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the run's results.")
@click.option("--no-cache", is_flag=True, help="Re-run every step even if an identical one succeeded before.")
@click.option("--memory", default=None, metavar="SIZE",
              help="DuckDB's memory limit, e.g. 2GB (beyond it, it spills to disk); overrides resources.memory.")
@click.option("--threads", type=click.IntRange(min=1, max=1024), default=None,
              help="DuckDB's threads; overrides resources.threads.")
@click.option("--temp-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder DuckDB spills to (anonflow makes an owner-only folder inside, removed at the end).")
@click.option("--executor", default=None, metavar="local|processes:N|dask[:N|:ADDRESS]",
              help="Where the fragments of a partitioned table run: in this process (local), N worker processes, "
                   "a Dask LocalCluster of N workers, or the Dask scheduler at ADDRESS (tcp://host:port); "
                   "overrides the workflow's executor.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder the fragments travel through (the workers must see it; default: inside the output folder).")
@click.option("--retain", type=click.Choice(RETAIN), default=None,
              help="What the store keeps of this run's tables once it ends: all; published (sources and "
                   "intermediate tables are purged, the store rewritten); none. Overrides the workflow's retain:.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST", help=ALLOW_HOST_HELP)
@guard
def run(workflow: Path, db: str, seed: int | None, overrides: tuple[str, ...], out_dir: Path | None,
        as_json: bool, no_cache: bool, memory: str | None, threads: int | None, temp_dir: Path | None,
        executor: str | None, work_dir: Path | None, retain: str | None, allow_hosts: tuple[str, ...]) -> None:
    """Validate and run a workflow file."""
    with egress.use(egress.for_user(allow_hosts)):
        session = Session(db, reporter=_Progress(enabled=sys.stderr.isatty() and not as_json))
        spec = session.load(workflow, overrides, seed)
        resources, chosen = session.settings(
            memory=memory, threads=threads, temp_dir=temp_dir.resolve() if temp_dir is not None else None,
            executor=executor, work_dir=work_dir.resolve() if work_dir is not None else None, spec=spec,
            names={"memory": "--memory", "threads": "--threads", "executor": "--executor"})
        plan = session.plan(spec)
        with session.open_store() as store:
            result = session.run(spec, plan=plan, store=store, use_cache=not no_cache, output_dir=out_dir,
                                 retain=retain, resources=resources, executor=chosen)
            held_now = None if result.purged is not None or as_json else session.held_line(store)
    if as_json:
        echo_json(result.to_json())
        return
    click.echo(f"run {result.run_id}: {spec.name} {result.status} (store: {db})")
    width = max([12, *(len(s["uses"]) for s in result.steps)])
    for s in result.steps:
        extra = f", {s['rows']} rows" if s.get("rows") is not None else ""
        if s.get("suppressed") is not None:
            extra += f", {s['suppressed']} suppressed"
        click.echo(f"  {s['step']:<16} {s['uses']:<{width}} {s['status']:<9} {s['seconds']:.2f}s{extra}")
        for note in s.get("notes") or []:
            click.echo(f"  {'':<16} note: {note}")
    if result.metrics:
        click.echo("metrics:")
        for key, value in result.metrics.items():
            click.echo(f"  {key:<40} {value:.6g}")
    if result.outputs:
        click.echo("outputs:")
        for out in result.outputs:
            click.echo(f"  {display_path(out['path'])}  ({rows_text(out['rows'])}sha256 {out['sha256'][:16]}...)")
    if result.purged is not None:
        click.echo(f"retain: {result.purged['retain']}: purged {result.purged['tables']} table(s) of this run "
                   f"({result.purged['rows']} records); lineage and hashes kept")
    elif held_now:
        click.echo(held_now)


@click.command()
@click.argument("workflow", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=None, help="Override the workflow's seed.")
@click.option("--set", "overrides", multiple=True, metavar="STEP.PARAM=VALUE", help="Override a step parameter.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--no-preview", is_flag=True,
              help="Only validate the graph and parameters; do not run the preparation steps on the data.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST", help=ALLOW_HOST_HELP)
@guard
def plan(workflow: Path, seed: int | None, overrides: tuple[str, ...], as_json: bool, no_preview: bool,
         allow_hosts: tuple[str, ...]) -> None:
    """Validate a workflow file and print its steps in execution order.

    The preparation steps (typing, filter, sample, hierarchy, partition) run on the data in
    memory to preview the typing, the hierarchies, the fragments and what each algorithm will
    face; nothing is stored
    or published (--no-preview skips this)."""
    with egress.use(egress.for_user(allow_hosts)) as policy:
        session = Session()
        spec = session.load(workflow, overrides, seed)
        p = session.plan(spec, policy=policy)  # what a run would reach, refused as a run would refuse it
        previews = {} if no_preview else session.preview(p)
    typings = {n: v for n, v in previews.items() if "typing" in v}
    if as_json:
        echo_json(plan_json(p, previews))
        return
    click.echo(f"workflow {spec.name} (seed {spec.seed}): {len(p.order)} nodes, valid")
    for i, node in enumerate(p.steps(), start=1):
        if node.kind == "source":
            cols = len(node.columns) - 1 if node.columns else "?"
            click.echo(f"{i:>3}. {node.name}  [source {node.uses}] {node.source.describe()} ({cols} columns)")
            continue
        src = ", ".join(node.inputs)
        click.echo(f"{i:>3}. {node.name}  [{node.kind}: {node.uses} {node.version}] <- {src}")
        if node.name in typings:
            t = typings[node.name]
            for a in t["typing"].attributes:
                kind = f"{a.role} {a.type}" if a.type else a.role
                how = f" ({a.source})" if a.type else ""
                extra = ""
                if a.order:
                    extra = f" order {' < '.join(a.order)}"
                if "grading" in a.options:
                    extra = f" graded in {len(a.options['grading']['levels'])} levels"
                click.echo(f"       {a.name}: {kind}{how}{extra}")
            if t["summary"].get("columns_dropped"):
                click.echo(f"       dropped: {', '.join(t['summary']['columns_dropped'])}")
            for note in t["notes"]:
                click.echo(f"       note: {note}")
            continue
        if "hierarchies" not in previews.get(node.name, {}):  # a previewed hierarchy step's notes say it all
            for key, value in node.params.items():
                click.echo(f"       {key} = {json.dumps(value, default=str)}")
        for note in previews.get(node.name, {}).get("notes", []):
            click.echo(f"       {note}")
