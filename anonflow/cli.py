"""The ``anonflow`` command line. Nothing imports this module.

Errors are one line on stderr (``Error: <where>: <what>``) with exit code 2 for invalid
input or workflows and 1 for failed runs; ``--debug`` (or ``ANONFLOW_DEBUG=1``) re-raises
with the traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import click

from . import __version__
from .runner.plan import build_plan
from .errors import AnonflowError
from .plugins import get_registry
from .spec import RETAIN, load_workflow
from .retention import KEEP
from .store import DatabaseError, Store

DEFAULT_DB = "anonflow.duckdb"


class CLIError(click.ClickException):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn anonflow errors into one-line messages with the right exit code."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        debug = bool(ctx.find_root().params.get("debug")) or bool(os.environ.get("ANONFLOW_DEBUG"))
        as_json = bool(ctx.params.get("as_json"))
        try:
            with _warnings_as_lines():
                return fn(*args, **kwargs)
        except AnonflowError as exc:
            if debug:
                raise
            message = str(exc)
            run_id = getattr(exc, "run_id", None)
            if run_id:
                message += f" (run {run_id} recorded as failed)"
            if as_json:
                _json_failure(exc.message, exc.where, exc.exit_code, type(exc).__name__, run_id,
                              getattr(exc, "steps", None))
            raise CLIError(message, exc.exit_code) from None
        except KeyboardInterrupt:
            if as_json:
                _json_failure("interrupted", None, 130, "KeyboardInterrupt", None, None)
            raise CLIError("interrupted", 130) from None
        except DatabaseError as exc:  # the store failed under us: damaged, truncated, disk full
            if debug:
                raise
            from .store import damaged

            db = ctx.params.get("db") or DEFAULT_DB
            message = damaged(Path(str(db)), exc)
            if as_json:
                _json_failure(message, None, 1, "StoreError", None, None)
            raise CLIError(message, 1) from None
    return wrapper


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """anonflow's warnings (:class:`AnonflowWarning`: a store open to other users, say) as
    one line each on stderr, every time they are raised."""
    import warnings

    from .errors import AnonflowWarning

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if issubclass(category, AnonflowWarning):
            click.echo(f"anonflow: warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", AnonflowWarning)
        shown = warnings.showwarning
        warnings.showwarning = show
        yield


def _json_failure(error: str, where: str | None, exit_code: int, kind: str, run_id: str | None,
                  steps: list | None) -> None:
    """With ``--json``, a failure still prints one JSON object on stdout (the one-line message
    goes to stderr as always): ``{"status": "failed", "error", "where", "kind", "exit_code",
    "run_id", "steps"}`` -- ``run_id`` when the run was recorded, ``steps`` those that ran."""
    out: dict[str, Any] = {"status": "failed", "error": error, "where": where or None, "kind": kind,
                           "exit_code": exit_code, "run_id": run_id}
    if steps is not None:
        out["steps"] = steps
    _echo_json(out)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def _printable(value: Any) -> str:
    """``value`` as text a terminal shows and does not obey: control characters (ESC, CR, BEL
    from a hostile data or hierarchy file) are written as escapes."""
    text = str(value)
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _overrides_text(overrides: list, sep: str = " ") -> str:
    """A run's ``--set`` overrides as the options that repeat it (values as YAML flow text,
    shell-quoted where needed): ``grouped.k=10 --set 'anon.model_params={l: 3}'``."""
    import shlex

    import yaml

    out = []
    for step, param, value in overrides:
        text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 30).strip()
        if text.endswith("\n..."):  # a plain scalar: drop YAML's end-of-document marker
            text = text[:-4].rstrip()
        out.append(_printable(shlex.quote(f"{step}.{param}={text}")))
    return sep.join(out)


def _rows_text(rows: int | None) -> str:
    """``"1080 rows, "`` for a published table; nothing for a file that is not one (rows None)."""
    return "" if rows is None else f"{rows} rows, "


def _step_uses(s: dict[str, Any]) -> str:
    """What ran a recorded step, for ``runs`` and ``lineage``: ``typing: anonflow 0.1.0``,
    ``publish: csv 0.1.0 (anonflow-std, code 1a2b3c4d5e6f)``, ``evaluate: k-anonymity 0.1.0,
    sse-il 0.1.0 (...)``. The plugins the step itself names come first; the metrics an
    algorithm's claims were checked with are listed after a ``checked with``."""
    plugins = s.get("plugins") or []
    own = {"algorithm": "algorithm", "publish": "publisher", "evaluate": "metric", "hierarchy": "hierarchy"}
    main = [p for p in plugins if p.get("kind") == own.get(s["kind"])]
    if s["kind"] == "algorithm":
        main = [p for p in main if p.get("name") == s["uses"]] or main
    rest = [p for p in plugins if p not in main]

    def show(ps: list[dict[str, Any]]) -> str:
        by: dict[tuple[str, str], list[str]] = {}
        for p in ps:
            by.setdefault((str(p.get("distribution")), str(p.get("code") or "")[:12]), []).append(
                f"{p.get('name')} {p.get('version')}")
        return "; ".join(f"{', '.join(names)} ({dist}, code {code or '-'})" for (dist, code), names in by.items())

    if not main:
        text = f"{s['kind']}: {s['uses']} {s['plugin_version']}" if s["kind"] == "source" else \
            (f"{s['kind']}: anonflow {s['plugin_version']}" if s["uses"] == s["kind"] else
             f"{s['kind']}: {s['uses']} (anonflow {s['plugin_version']})") if s["kind"] != "algorithm" else \
            f"{s['kind']}: {s['uses']} {s['plugin_version']}"
    else:
        text = f"{s['kind']}: {show(main)}"
    if rest:
        text += f"; checked with {show(rest)}" if s["kind"] == "algorithm" else f"; also {show(rest)}"
    return text


def _display_path(path: str) -> str:
    if "://" in path:  # a database's table (postgresql://user@host:port/db#schema.table), not a file
        return path
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="anonflow")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
def main(debug: bool) -> None:
    """anonflow: declarative, audited anonymization of tabular microdata."""


# -- run ---------------------------------------------------------------------------------

class _Progress:
    """Step lines and progress bars on stderr when it is a terminal; quiet otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def step_started(self, node, position, total):
        if self.enabled:
            click.echo(f"[{position + 1}/{total}] {node.name} ({node.uses}) ...", err=True)

    def step_finished(self, node, status, seconds):
        if self.enabled:
            click.echo(f"      {status} in {seconds:.2f}s", err=True)

    def progress(self, total: int, label: str = ""):
        if not self.enabled or total <= 0:
            return lambda n=1: None
        bar = click.progressbar(length=total, label=f"      {label}", file=sys.stderr, show_eta=True, show_pos=True)
        bar.__enter__()
        state = {"done": 0}

        def advance(n: int = 1) -> None:
            state["done"] += n
            bar.update(n)
            if state["done"] >= total:
                bar.__exit__(None, None, None)
        return advance


@main.command()
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
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST",
              help="A host that is not this machine which PostgreSQL sources and sinks may reach (repeatable); "
                   "a workflow file never allows one on its own (docs/egress.md).")
@_guard
def run(workflow: Path, db: str, seed: int | None, overrides: tuple[str, ...], out_dir: Path | None,
        as_json: bool, no_cache: bool, memory: str | None, threads: int | None, temp_dir: Path | None,
        executor: str | None, work_dir: Path | None, retain: str | None, allow_hosts: tuple[str, ...]) -> None:
    """Validate and run a workflow file."""
    from . import egress

    with egress.use(egress.for_user(allow_hosts)):
        _run(workflow, db, seed, overrides, out_dir, as_json, no_cache, memory, threads, temp_dir, executor, work_dir,
             retain)


def _run(workflow: Path, db: str, seed: int | None, overrides: tuple[str, ...], out_dir: Path | None,
         as_json: bool, no_cache: bool, memory: str | None, threads: int | None, temp_dir: Path | None,
         executor: str | None, work_dir: Path | None, retain: str | None) -> None:
    from .executor_spec import ExecutorSpec, parse_executor
    from .runner import Runner
    from .spec import Resources, check_memory

    spec = load_workflow(workflow, overrides, seed)
    resources = Resources(check_memory(memory, "--memory") if memory is not None else None, threads,
                          temp_dir.resolve() if temp_dir is not None else None)
    chosen = parse_executor(executor, "--executor") if executor is not None else None
    if work_dir is not None:
        base = chosen or spec.executor
        chosen = ExecutorSpec(base.kind, base.workers, base.address, str(work_dir.resolve()))
    registry = get_registry()
    plan = build_plan(spec, registry)
    with Store(db) as store:
        reporter = _Progress(enabled=sys.stderr.isatty() and not as_json)
        result = Runner(store, registry, reporter, resources=resources, executor=chosen).run(
            spec, use_cache=not no_cache, output_dir=out_dir, plan=plan, retain=retain)
        held = None if result.purged is not None or as_json else _held_line(store)
    if as_json:
        _echo_json(result.to_json())
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
            click.echo(f"  {_display_path(out['path'])}  ({_rows_text(out['rows'])}sha256 {out['sha256'][:16]}...)")
    if result.purged is not None:
        click.echo(f"retain: {result.purged['retain']}: purged {result.purged['tables']} table(s) of this run "
                   f"({result.purged['rows']} records); lineage and hashes kept")
    elif held:
        click.echo(held)


def _held_line(store: Store) -> str | None:
    """One line on the confidential data a store holds (None if it holds none)."""
    from .retention import held

    h = held(store)
    if not h["tables"]:
        return None
    return (f"the store {store.path} holds {h['tables']} table(s) of original or intermediate records "
            f"({h['rows']} records in all): 'anonflow purge --all' removes them and keeps the lineage (or set "
            "retain: published in the workflow)")


# -- plan --------------------------------------------------------------------------------

@main.command()
@click.argument("workflow", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=None, help="Override the workflow's seed.")
@click.option("--set", "overrides", multiple=True, metavar="STEP.PARAM=VALUE", help="Override a step parameter.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--no-preview", is_flag=True,
              help="Only validate the graph and parameters; do not run the preparation steps on the data.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST",
              help="A host that is not this machine which PostgreSQL sources and sinks may reach (repeatable); "
                   "a workflow file never allows one on its own (docs/egress.md).")
@_guard
def plan(workflow: Path, seed: int | None, overrides: tuple[str, ...], as_json: bool, no_preview: bool,
         allow_hosts: tuple[str, ...]) -> None:
    """Validate a workflow file and print its steps in execution order.

    The preparation steps (typing, filter, sample, hierarchy, partition) run on the data in
    memory to preview the typing, the hierarchies, the fragments and what each algorithm will
    face; nothing is stored
    or published (--no-preview skips this)."""
    from . import egress
    from .runner.plan import plan_json, preview

    with egress.use(egress.for_user(allow_hosts)) as policy:
        spec = load_workflow(workflow, overrides, seed)
        registry = get_registry()
        p = build_plan(spec, registry)
        egress.check_plan(p, registry, policy)  # what a run would reach, refused as a run would refuse it
        previews = {} if no_preview else preview(p, registry)
    typings = {n: v for n, v in previews.items() if "typing" in v}
    if as_json:
        _echo_json(plan_json(p, previews))
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


# -- plugins -----------------------------------------------------------------------------

@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the registry as JSON.")
@_guard
def plugins(as_json: bool) -> None:
    """List every registered plugin with its kind, version, distribution and code digest
    (the sha256 of its package's files, the first 12 digits here: a changed plugin is never
    served from the step cache, even without a version bump)."""
    from .codehash import engine_digest, short

    registry = get_registry()
    if as_json:
        _echo_json([r.to_json() for r in registry])
        return
    click.echo(f"anonflow {__version__}, code {short(engine_digest())}")
    for r in registry:
        click.echo(f"{r.kind:<10} {r.name:<22} {r.version:<8} {r.distribution} {r.distribution_version} "
                   f"code {short(r.code)}  {r.obj.description}")
        for p in r.obj.params:
            click.echo(f"{'':<33}{p.describe()}" + (f" - {p.help}" if p.help else ""))


# -- runs and lineage --------------------------------------------------------------------

@main.command()
@click.argument("run_id", required=False)
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("--limit", default=20, show_default=True, help="How many runs to list.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def runs(run_id: str | None, db: str, limit: int, as_json: bool) -> None:
    """List recorded runs, or show one run (steps, parameters, metrics, outputs). RUN_ID is a
    run id, a prefix of one, or 'latest' (the newest run)."""
    from .retention import held

    with Store(db, read_only=True) as store:
        if run_id is None:
            rows = store.runs(limit)
            h = held(store)
            for r in rows:  # the confidential data (sources, intermediate tables) each run left in the store
                mine = h["runs"].get(r["run_id"], {})
                r["held_tables"], r["held_records"] = mine.get("tables", 0), mine.get("rows", 0)
                r["purged_tables"] = mine.get("purged", 0)
            if as_json:
                _echo_json(rows)
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
                           + (f"  --set {_overrides_text(r['overrides'], ' --set ')}" if r["overrides"] else "")
                           + (f"  error: {r['error']}" if r["error"] else "")
                           + (f"  cleaned up after it: {'; '.join(r['cleaned'])}" if r.get("cleaned") else ""))
            pending = store.pending_purge()
            if pending is not None:
                click.echo(f"an interrupted purge of {db} (started {pending.get('started_at') or 'at an unknown time'}, "
                           f"{len(pending.get('tables') or [])} table(s)) is pending: the file may still hold the "
                           "records it was removing; the next run or 'anonflow purge' on this store finishes it")
            size = f", a file of {_size_text(h['bytes'])}" if h["bytes"] is not None else ""
            click.echo(f"confidential data in {db}: {h['tables']} source or intermediate table(s), {h['rows']} "
                       f"records{size}; published tables: {h['published_tables']}"
                       + (" ('anonflow purge --all' removes them, keeping the lineage)" if h["tables"] else ""))
            return
        run_rec = store.run(run_id)
        rid = run_rec["run_id"]
        detail = {"run": run_rec, "steps": store.steps(rid), "metrics": store.metrics(rid),
                  "outputs": store.outputs(rid)}
        if as_json:
            _echo_json(detail)
            return
        click.echo(f"run {rid}: {run_rec['workflow']} ({run_rec['workflow_path']}) {run_rec['status']}")
        click.echo(f"  seed {run_rec['seed']}, workflow sha256 {run_rec['workflow_hash'][:16]}..., "
                   f"started {run_rec['started_at']}")
        if run_rec["overrides"]:
            click.echo("  overrides: --set " + _overrides_text(run_rec["overrides"], " --set "))
        if run_rec["error"]:
            click.echo(f"  error: {run_rec['error']}")
        for line in run_rec.get("cleaned") or []:
            click.echo(f"  cleaned up after it: {line}")
        for s in detail["steps"]:
            cached = f" (reused from {s['cached_from']})" if s["cached_from"] else ""
            click.echo(f"  {s['position'] + 1:>2}. {s['step']} [{_step_uses(s)}] {s['status']}{cached}")
            if s["kind"] != "source":
                click.echo(f"      params: {json.dumps(s['params'], sort_keys=True, default=str)}")
            for i in s["inputs"] or []:
                click.echo(f"      input: {i.get('name')} {i.get('table', '')} {(i.get('hash') or i.get('sha256', ''))[:16]}")
            if s["output_table"]:
                click.echo(f"      output: {s['output_table']} ({s['rows']} rows) hash {s['output_hash'][:16]}...")
            for note in (s["summary"] or {}).get("notes", []):
                click.echo(f"      note: {note}")
            if s["error"]:
                click.echo(f"      error: {s['error']}")
        for key, value in detail["metrics"].items():
            click.echo(f"  metric {key} = {value:.6g}")
        for out in detail["outputs"]:
            click.echo(f"  output {_display_path(out['path'])} ({_rows_text(out['rows'])}sha256 {out['sha256']})")


def _size_text(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"  # pragma: no cover


@main.command()
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
@_guard
def purge(db: str, everything: bool, run_ids: tuple[str, ...], older: str | None, keep: str, dry_run: bool,
          as_json: bool) -> None:
    """Remove the records of sources and intermediate tables from the store, keep the lineage.

    The store holds the original microdata: every source and every intermediate table. purge
    drops the data tables of the runs chosen (all of them but the published ones, by default),
    keeps every lineage record and content hash (so 'anonflow lineage' still traces a
    published file to its sources' sha256, and 'anonflow verify --rerun' reproduces a release
    from the source files), then rewrites the store into a fresh file: dropped tables' bytes
    stay in a DuckDB file after CHECKPOINT and VACUUM."""
    from .retention import purge_file

    done = purge_file(db, everything=everything, runs=list(run_ids) if run_ids else None, older_than=older,
                      keep=keep, dry_run=dry_run)
    if as_json:
        _echo_json(done)
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
        click.echo(f"rewrote the store into a fresh file: {_size_text(done['bytes_before'] or 0)} -> "
                   f"{_size_text(done['bytes_after'] or 0)}; lineage and hashes kept")


@main.command()
@click.argument("target")
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("--run", "run_id", default=None,
              help="Look the step up in this run (an id, a prefix, or latest; default: the latest run with that step).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def lineage(target: str, db: str, run_id: str | None, as_json: bool) -> None:
    """Show what produced TARGET (a step name, a store table, or a published file), from what,
    with which parameters, back to the source files."""
    from .lineage import trace

    with Store(db, read_only=True) as store:
        chain = trace(store, target, run_id)
    if as_json:
        _echo_json(chain)
        return
    for depth, s in chain:
        pad = "  " * depth
        head = f"{pad}{s['step']} [{_step_uses(s)}] run {s['run_id']}"
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
            click.echo(f"{pad}  -> {_display_path(out['path'])} (sha256 {out['sha256'][:16]}...)")
        for key, value in s.get("metrics", {}).items():
            click.echo(f"{pad}  {key} = {value:.6g}")


# -- releases ----------------------------------------------------------------------------

def _release_publisher(name: str = "release") -> Any:
    from .errors import InputError

    reg = get_registry().get("publisher", name)
    if not hasattr(reg.obj, "verify") or not hasattr(reg.obj, "report"):
        raise InputError(f"publisher {name!r} ({reg.distribution} {reg.version}) does not write releases")
    return reg.obj


@main.command()
@click.argument("release", type=click.Path(path_type=Path))
@click.option("--rerun", is_flag=True, help="Also re-run the recorded workflow and compare every hash.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Store to record the re-run in (default: a scratch store, removed afterwards).")
@click.option("--sources", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder the sources' recorded paths are relative to (the workflow file's folder; default: "
                   "the folder above the release's output folder, if it holds them all); a file missing there, "
                   "or a source recorded by absolute path, is looked for by its file name in it.")
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Public key file (KEY.pub from 'anonflow keygen KEY'): check the release's signature with it.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST",
              help="With --rerun: a host the re-run may read a PostgreSQL source from, and offer your credentials "
                   "(PGPASSWORD, .pgpass) to (repeatable); the manifest never chooses one (docs/egress.md).")
@_guard
def verify(release: Path, rerun: bool, db: Path | None, sources: Path | None, key: Path | None,
           as_json: bool, allow_hosts: tuple[str, ...]) -> None:
    """Check a release directory: file hashes against its manifest, each CSV against its
    Parquet partner, the signature (--key), the privacy checks re-run on the published files
    alone, and (--rerun) a confined re-run of the recorded workflow. Exit 0 only if everything
    holds; otherwise each difference is named and the exit code is 1."""
    import json as _json

    from .errors import InputError

    import stat as _stat

    name = "release"  # which publisher verifies: named by the manifest, read only if it is a regular file
    in_memory: list[str] = []  # sources given in Python (anonflow.Workflow / run(sources=...)): no file to re-run
    try:
        if _stat.S_ISREG(os.lstat(release / "manifest.json").st_mode):
            fd = os.open(release / "manifest.json", os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, encoding="utf-8") as fh:
                recorded = _json.loads(fh.read())
            name = (recorded.get("publisher") or {}).get("name", "release")
            in_memory = [str(s.get("name")) for s in recorded.get("sources") or []
                         if isinstance(s, dict) and s.get("format") == "arrow"]
    except (OSError, ValueError, AttributeError, RecursionError):
        name, in_memory = "release", []
    if not release.is_dir():
        raise InputError(f"{release} is not a directory (expected a release directory)")
    publisher = _release_publisher(name)
    refused = rerun and bool(in_memory)
    if refused:  # the checks that need no re-run still run; the re-run is refused in one line
        rerun = False
    from . import egress

    with egress.use(egress.for_rerun(allow_hosts)):  # someone else's workflow: external sinks are not replayed
        result = (publisher.verify(release, rerun=rerun, db=db, sources=sources, key=key) if key is not None else
                  publisher.verify(release, rerun=rerun, db=db, sources=sources))
    if refused:
        what = ", ".join(repr(n) for n in in_memory)
        were = f"sources {what} were in-memory tables" if len(in_memory) > 1 else f"source {what} was an in-memory table"
        result["findings"].append({"ok": False, "what": "re-run", "detail": (
            f"not attempted: {were} given in Python (recorded by its content hash only), which neither the release nor "
            "--sources DIR can supply; 'anonflow verify' without --rerun checks the release's files, hashes and "
            "privacy claims, and re-running the workflow in Python on the same table reproduces it")})
        result["ok"] = False
        result["rerun"] = {"verdict": "not-attempted"}
    if as_json:
        _echo_json(result)
    else:
        for item in result["findings"]:
            if not item["ok"] or item.get("show"):
                click.echo(f"{'ok  ' if item['ok'] else 'FAIL'}  {item['what']}: {item['detail']}")
        bad = sum(not i["ok"] for i in result["findings"])
        if result["ok"]:
            same_tables = (result.get("rerun") or {}).get("verdict") == "same-tables-different-code"
            skipped = (result.get("rerun") or {}).get("not_replayed") or []
            click.echo(f"release {release} verified: {len(result['findings'])} checks hold"
                       + ((", the re-run with other versions or code publishes the same tables" if same_tables else
                           ", the re-run reproduces it byte for byte") if rerun else "")
                       + (f" (step{'s' if len(skipped) > 1 else ''} {', '.join(skipped)} not replayed: "
                          "it writes outside the re-run's scratch folder)" if rerun and skipped else ""))
        else:
            click.echo(f"release {release} does NOT verify: {bad} of {len(result['findings'])} checks failed")
    if not result["ok"]:
        raise SystemExit(1)


@main.command("apply", short_help="Publish new records as a release published its table.")
@click.argument("release", type=click.Path(path_type=Path))
@click.argument("new_data", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), default=None, metavar="OUT",
              help="Folder to write (it must not exist, or be empty; default: RELEASE-applied beside the release).")
@click.option("--hierarchies", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Folder holding the hierarchy (and grading) files the release was made with, found by their "
                   "recorded sha256 (default: beside the workflow, the folder above the release's output folder).")
@click.option("--suppression", type=click.FloatRange(0.0, 1.0), default=None, metavar="FRACTION",
              help="Largest fraction of the new records that may be withheld (the records of classes failing a "
                   "claimed model), in [0, 1]; default: the algorithm step's recorded cap.")
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Public key file (KEY.pub from 'anonflow keygen KEY'): the release's signature must verify "
                   "under it.")
@click.option("--json", "as_json", is_flag=True, help="Print the application's record as JSON.")
@_guard
def apply_cmd(release: Path, new_data: Path, out: Path | None, hierarchies: Path | None, suppression: float | None,
              key: Path | None, as_json: bool) -> None:
    """Publish NEW_DATA (a CSV or Parquet file with the original columns) as the
    release directory RELEASE published its table, without searching again: the
    recorded preparation (typing, hierarchies), then the algorithm's recorded result
    -- the lattice node it chose, or each record assigned to the nearest published
    group on z-scores by the original table's standardization (microaggregation).

    A release that 'anonflow verify RELEASE [--key KEY]' would fail is refused
    (exit 2); with --key its signature must verify. The release's checks (those
    verify runs) are re-run on the new batch alone; when one would not hold,
    nothing is written (exit 1). The output folder (never inside RELEASE) holds the
    data files and application.json. See docs/releases.md, "Applying a release to
    new data"."""
    from .errors import InputError

    if not release.is_dir():
        raise InputError(f"{release} is not a directory (expected a release directory)")
    publisher = _release_publisher()
    if not hasattr(publisher, "apply"):
        raise InputError("the installed release publisher cannot apply releases to new data")
    result = (publisher.apply(release, new_data, out, hierarchies=hierarchies, suppression=suppression, key=key)
              if key is not None else publisher.apply(release, new_data, out, hierarchies=hierarchies,
                                                      suppression=suppression))
    if as_json:
        _echo_json(result)
        return
    applied = result.get("applied") or {}
    if "node" in applied:
        what = "node [" + ", ".join(f"{q}={lv}" for q, lv in applied["node"].items()) + "]"
    else:
        what = f"{applied.get('groups_used')} of the release's {applied.get('groups')} groups"
    sup = result["suppression"]
    for line in result.get("notes") or []:
        click.echo(f"note: {line}")
    click.echo(result["signature_sentence"])
    click.echo(f"applied {release} to {new_data}: {result['files'][0]['rows']} record(s) published with {what}"
               + (f", {sup['withheld']} withheld" if sup["withheld"] else "")
               + f"; checked on the new batch alone: {result['checked_sentence']}")
    click.echo(f"written to {result['out']}")


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@_guard
def keygen(path: Path) -> None:
    """Write a new Ed25519 key pair for signed releases: PATH (the private key, PEM, mode 0600)
    and PATH.pub (the public key, for 'anonflow verify --key'). Never overwrites a file."""
    from .errors import InputError

    if not path.name or str(path).endswith(os.sep) or path.is_dir():
        raise InputError(f"keygen: {str(path) or repr('')} names no file; give the private key's file name, "
                         "e.g. anonflow keygen release.key")
    publisher = _release_publisher()
    if not hasattr(publisher, "keygen"):
        raise InputError("the installed release publisher cannot sign releases")
    try:
        pub, fingerprint = publisher.keygen(path)
    except OSError as exc:  # a folder not writable, a name too long, a read-only file system
        raise InputError(f"keygen: cannot write {exc.filename or path}: {exc.strerror or exc}") from None
    click.echo(f"private key {path} (keep it secret; give it to the release publisher's 'sign')")
    click.echo(f"public key  {pub} (sha256 {fingerprint}; give it to 'anonflow verify --key')")


@main.command()
@click.argument("run_id")
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the page here (default: standard output).")
@click.option("--overwrite", is_flag=True, help="Replace an existing file at -o (never the store or the run's inputs).")
@_guard
def report(run_id: str, db: str, output: Path | None, overwrite: bool) -> None:
    """Write the HTML report of a recorded run: the same page a release holds (privacy checks,
    class sizes, information loss, metrics, parameter sweep, lineage). RUN_ID is a run id, a
    prefix of one, or 'latest' (the newest run)."""
    from .api import atomic_write
    from .runner import load_run_info

    publisher = _release_publisher()
    with Store(db, read_only=True) as store:
        rid = store.run(run_id)["run_id"]
        steps = store.steps(rid)
        rel = next((s for s in steps if s["kind"] == "publish" and (s["params"] or {}).get("publisher") == "release"),
                   None)
        current = None
        if rel is not None:
            current = {k: rel[k] for k in ("step", "kind", "uses", "plugin_version", "params", "seed", "fingerprint",
                                           "inputs", "position")}
        info = load_run_info(store, rid, upto=rel["position"] if rel else None, current=current)
        page = publisher.report(info)
    if output is None:
        click.echo(page, nl=False)
        return
    _check_report_target(output, db, info, overwrite)
    atomic_write(output, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    click.echo(f"report of run {rid} written to {output}", err=True)


def _check_report_target(output: Path, db: str, info: Any, overwrite: bool) -> None:
    """``report -o`` never writes over the store or a file the run read (its workflow file, a
    source), and over any other existing file only with ``--overwrite``."""
    from .errors import InputError

    target = os.path.realpath(output)
    inputs = {os.path.realpath(p) for p in (db, f"{db}.wal", info.run.get("workflow_path") or "")
              if p} | {os.path.realpath(s["path"]) for s in info.sources if s.get("path")}
    if target in inputs:
        raise InputError(f"-o {output} is the store or a file run {info.run['run_id']} read; write the report "
                         "elsewhere")
    if (output.exists() or output.is_symlink()) and not overwrite:
        raise InputError(f"-o {output} exists; anonflow does not write over a file unless told to: add --overwrite, "
                         "or choose another path")


@main.group()
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
@_guard
def hierarchy_show(target: str, column: str | None, db: str, run_id: str | None, limit: int, as_json: bool) -> None:
    """Print the hierarchy of COLUMN attached to TARGET (a step name or a store table);
    without COLUMN, list the columns that have one."""
    from .errors import StoreError
    from .lineage import _resolve

    with Store(db, read_only=True) as store:
        table_name = target if store.artifact(target) else (_resolve(store, target, run_id).get("output_table"))
        if not table_name:
            raise StoreError(f"{target!r} produced no table")
        table = store.get(table_name)
    hs = table.hierarchies
    if column is None:
        if as_json:
            _echo_json({c: h.describe() for c, h in hs.items()})
            return
        if not hs:
            click.echo(f"{target}: no hierarchies (add a hierarchy step)")
        for c, h in hs.items():
            d = h.describe()
            click.echo(f"{c:<20} {d['builder']:<10} levels 0..{d['height']}  distinct per level: "
                       + " / ".join(map(str, d["distinct_per_level"])))
        return
    if column not in hs:
        from .params import suggest

        raise StoreError(f"{target!r} has no hierarchy for {column!r}{suggest(column, hs)}; "
                         f"it has: {', '.join(hs) or 'none'}")
    h = hs[column]
    rows = h.table.to_pylist()
    if as_json:
        _echo_json({**h.describe(), "rows": rows})
        return
    shown = [{k: _printable(v) for k, v in r.items()} for r in (rows if limit <= 0 else rows[:limit])]
    widths = [max(len(f"level{i}"), *(len(r[f"level{i}"]) for r in shown)) for i in range(h.height + 1)]
    click.echo("  ".join(f"level{i}".ljust(w) for i, w in enumerate(widths)))
    for r in shown:
        click.echo("  ".join(r[f"level{i}"].ljust(w) for i, w in enumerate(widths)))
    if len(shown) < len(rows):
        click.echo(f"... {len(rows) - len(shown)} more (--limit 0 shows all)")


@main.command()
@_guard
def schema() -> None:
    """Print the JSON Schema of workflow files (the file anonflow ships as
    anonflow/schemas/workflow.schema.json), for editors: with yaml-language-server, a first
    line '# yaml-language-server: $schema=PATH' in a workflow file makes it checked as you type."""
    from .workflow_schema import json_schema_text

    click.echo(json_schema_text(), nl=False)


from .scaffold import new_plugin  # noqa: E402  (anonflow new-plugin NAME)

main.add_command(new_plugin)


if __name__ == "__main__":  # pragma: no cover
    main()
