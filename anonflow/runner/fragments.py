"""Running an algorithm on a partitioned table: fragments grouped, run on the executor, merged.

An algorithm step fed by a partitioned table (the ``partition`` step,
:mod:`anonflow.steps.partition_step`) runs once per *group* of fragments
(:func:`fragment_groups`): one fragment each, unless a fragment taken as a single class fails
a privacy model the algorithm claims (too few records, too few distinct sensitive values...),
in which case it is merged with a neighbouring fragment (the next or the previous in fragment
order, the smaller of the two) until every group satisfies the models. The groups run as
tasks on the run's executor (:mod:`anonflow.runner.executors`) and their results are merged
into one table in the store (:class:`FragmentRunning`, the run loop's part that does it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..api import Partition, StepContext, sql_ident
from ..canonjson import canonical_json
from ..errors import InputError, RunError
from ..schema import CLASS, FRAGMENT, ROW
from ..steps.partition_step import aggregate_ordered, describe_sizes
from ..store import duckdb_file, ident
from ..table import ColumnDomain, TypedTable
from .executors import Executor, FragmentResult, FragmentTask, WorkFolder, run_all, start_executor


@dataclass
class Grouping:
    """Fragments grouped for one algorithm step: ``groups[g]`` lists the fragment ids run
    together as group ``g`` (in fragment order); ``sizes[g]`` its records."""

    groups: list[list[int]]
    sizes: list[int]
    notes: list[str]

    @property
    def merged(self) -> int:
        return sum(len(g) for g in self.groups if len(g) > 1)


def fragment_sizes(table: TypedTable, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
    got = aggregate_ordered(ctx, f"SELECT {sql_ident(FRAGMENT)}, count(*)::BIGINT AS n FROM t GROUP BY 1", "1", t=table)
    return got.column(0).to_numpy(), got.column(1).to_numpy()


def _claim_checks(algo: Any, params: Mapping[str, Any], registry: Any) -> tuple[list[tuple[Any, dict]], list[str]]:
    checks, skipped = [], []
    for model, given in algo.claims(params).items():
        reg = registry.get("metric", model) if registry.has("metric", model) else None
        if reg is None or reg.obj.category != "privacy" or not getattr(reg.obj, "weighted_partitions", False):
            skipped.append(model)
            continue
        checks.append((reg.obj, dict(given)))
    return checks, skipped


def fragment_groups(algo: Any, params: Mapping[str, Any], table: TypedTable, registry: Any,
                    ctx: StepContext) -> Grouping:
    """Group the fragments of ``table`` so that each group, taken as one class, satisfies every
    privacy model ``algo`` claims for ``params`` (checked through the models' vectorized
    :meth:`~anonflow.api.Metric.partition_holds` on a frequency table of the sensitive
    attributes by fragment, which DuckDB computes). A failing group is merged with its next or
    previous neighbour (the smaller), round after round, until all hold or one group is left."""
    ids, sizes = fragment_sizes(table, ctx)
    checks, skipped = _claim_checks(algo, params, registry)
    notes = []
    if skipped:
        notes.append(f"fragments not checked for {', '.join(skipped)} before the run (no weighted check); "
                     "the algorithm's own check runs on each fragment")
    if not checks or ids.size <= 1:
        return Grouping([[int(i)] for i in ids], [int(s) for s in sizes], notes)
    keep = [c for c in table.typing.sensitive if c in table.columns]
    named = params.get("sensitive")
    if isinstance(named, str) and named in table.columns and named not in keep:
        keep.append(named)
    cols = "".join(f", {sql_ident(c)}" for c in keep)
    freq = aggregate_ordered(ctx, f"SELECT {sql_ident(FRAGMENT)}{cols}, count(*)::BIGINT AS _af_n FROM t GROUP BY ALL",
                      "ALL NULLS LAST", t=table)
    of_row = np.searchsorted(ids, freq.column(0).to_numpy())
    weights = freq.column("_af_n").to_numpy()
    units = TypedTable(freq.drop_columns([FRAGMENT, "_af_n"]), table.typing, {}, table.hierarchies)
    groups: list[list[int]] = [[i] for i in range(ids.size)]  # positions of fragments
    gsizes = [int(s) for s in sizes]
    cache: dict[str, Any] = {}
    first = len(groups)
    while True:
        group_of = np.empty(ids.size, dtype=np.int64)
        for g, members in enumerate(groups):
            group_of[members] = g
        cls = group_of[of_row]
        part = Partition(cls, np.asarray(gsizes, dtype=np.int64), units, cache, weights)
        ok = np.ones(len(groups), dtype=bool)
        for metric, given in checks:
            ok &= np.asarray(metric.partition_holds(part, given), dtype=bool)
        if ok.all() or len(groups) == 1:
            break
        groups, gsizes = merge_neighbours(groups, gsizes, np.flatnonzero(~ok).tolist())
    out = [[int(ids[i]) for i in g] for g in groups]
    if len(groups) < first:
        joined = [g for g in out if len(g) > 1]
        models = ", ".join(m.name for m, _ in checks)
        notes.append(f"{sum(len(g) for g in joined)} fragment(s) too small or too poor for {models} (each taken as "
                     f"one class) were merged with neighbours into {len(joined)} group(s): "
                     + "; ".join("+".join(map(str, g)) for g in joined[:8]) + (" ..." if len(joined) > 8 else ""))
    if not ok.all():
        notes.append(f"even all fragments together fail {', '.join(m.name for m, _ in checks)}; the algorithm "
                     "will say why")
    return Grouping(out, gsizes, notes)


def keep_classes_together(groups: list[list[int]], sizes: list[int], table: TypedTable, other: TypedTable,
                          ctx: StepContext) -> tuple[list[list[int]], list[int], str | None]:
    """Join the groups holding records of one class of ``other`` (a second input with
    ``_class``, e.g. the partition a ``refine`` step improves): a class is never cut by the
    fragments. Returns the groups (in order of their first fragment), their sizes and a note."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    pairs = ctx.sql(f"SELECT DISTINCT x.{sql_ident(CLASS)} AS c, t.{sql_ident(FRAGMENT)} AS f FROM x JOIN t "
                    f"ON x.{sql_ident(ROW)} = t.{sql_ident(ROW)} WHERE x.{sql_ident(CLASS)} IS NOT NULL ORDER BY 1, 2", x=other, t=table)
    if pairs.num_rows == 0:
        return groups, sizes, None
    frags = np.array([f for members in groups for f in members], dtype=np.int64)
    group_of = np.zeros(int(frags.max()) + 1, dtype=np.int64)
    group_of[frags] = np.repeat(np.arange(len(groups)), [len(m) for m in groups])
    c = pairs.column("c").to_numpy()
    g = group_of[pairs.column("f").to_numpy()]
    same = np.flatnonzero(c[1:] == c[:-1])
    if same.size == 0 or np.all(g[same] == g[same + 1]):
        return groups, sizes, None
    n = len(groups)
    graph = coo_matrix((np.ones(same.size), (g[same], g[same + 1])), shape=(n, n))
    count, label = connected_components(graph, directed=False)
    joined: dict[int, list[int]] = {}
    joined_sizes: dict[int, int] = {}
    for i, lab in enumerate(label):
        joined.setdefault(int(lab), []).extend(groups[i])
        joined_sizes[int(lab)] = joined_sizes.get(int(lab), 0) + sizes[i]
    order = sorted(joined, key=lambda lab: min(joined[lab]))
    out = [sorted(joined[lab]) for lab in order]
    note = (f"{n - count} fragment group(s) joined others: records of one class of the second input lie in both "
            "(a class is never cut)")
    return out, [joined_sizes[lab] for lab in order], note


def merge_neighbours(groups: list[list[int]], sizes: list[int], bad: Sequence[int]) -> tuple[list[list[int]],
                                                                                              list[int]]:
    """Merge each group in ``bad`` (indexes into ``groups``) with its smaller neighbour; return
    the new groups and sizes, in fragment order."""
    target = list(range(len(groups)))
    taken = [False] * len(groups)
    for g in sorted(set(bad)):
        if taken[g]:
            continue
        options = [h for h in (g - 1, g + 1) if 0 <= h < len(groups) and not taken[h]]
        if not options:
            continue
        h = min(options, key=lambda x: (sizes[x], x))
        lo, hi = min(g, h), max(g, h)
        target[hi] = lo
        taken[lo] = taken[hi] = True
    out: dict[int, list[int]] = {}
    out_sizes: dict[int, int] = {}
    for g, t in enumerate(target):
        out.setdefault(t, []).extend(groups[g])
        out_sizes[t] = out_sizes.get(t, 0) + sizes[g]
    keys = sorted(out)
    return [sorted(out[k]) for k in keys], [out_sizes[k] for k in keys]


#: distinct notes of fragment groups copied into a partitioned step's notes
NOTES_SHOWN = 3


def _merged_claims(claims: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """What every fragment group claims: a model all of them claim with the same parameters,
    or differing only in a size bound (``k``, ``l``, ``p``: the least holds for all)."""
    out: dict[str, dict[str, Any]] = {}
    for model in claims[0]:
        given = [c.get(model) for c in claims]
        if any(g is None or set(g) != set(given[0]) for g in given):
            continue
        merged: dict[str, Any] = {}
        for key in given[0]:
            values = [g[key] for g in given]
            if all(v == values[0] for v in values):
                merged[key] = values[0]
            elif key in ("k", "l", "p") and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                merged[key] = min(values)
            else:
                break
        else:
            out[model] = merged
    return out


class FragmentRunning:
    """The run loop's handling of partitioned tables (a part of :class:`anonflow.runner.loop.Runner`):
    the executor, the work folders, and an algorithm run per fragment group and merged."""

    store: Any
    registry: Any
    reporter: Any
    executor_spec: Any
    journal: Any
    _executor: Executor | None
    _out_dir: Path

    def _executor_for(self, where: str, journaled: bool = True) -> Executor:
        """The run's executor, started on first use (``journaled``: the folders it makes are
        recorded in the run's journal; a scheduler is reached before the journal exists)."""
        if self._executor is None:
            self._executor = start_executor(self.executor_spec, where=where, **(
                {"journal": self.journal} if journaled else {}))
        return self._executor

    def _close_executor(self, abort: bool = False) -> None:
        """Stop the executor: wait for it, or (``abort``: the run failed or was interrupted)
        kill its workers now."""
        if self._executor is not None:
            try:
                if abort:
                    self._executor.abort()
                else:
                    self._executor.close()
            finally:
                self._executor = None

    def _work_folder(self, node: Any) -> WorkFolder:
        parent = Path(self.executor_spec.work_dir) if self.executor_spec.work_dir else self._out_dir
        if self.journal is not None:
            self.journal.start()  # makes the output folder (with the user's modes) and the journal first
        return WorkFolder(parent, node.name, self.journal)

    def _run_fragments(self, node: Any, table: TypedTable, ctx: StepContext, where: str) -> TypedTable:
        """Run an algorithm on a partitioned table: once per group of fragments on the
        executor (or, for an algorithm that :meth:`~anonflow.api.Algorithm.summarizes`, its
        summary per fragment, then once on the whole table with their sum)."""
        algo = node.plugin.obj
        if not algo.summarizes(node.params) and not algo.per_fragment:
            ctx.note(f"{node.uses} does not run per fragment (its result is one for the whole table): it ran on the "
                     "whole table, here")
            whole = self._whole(table)
            ctx.inputs = [whole, *ctx.inputs[1:]]
            algo.check(node.params, table=whole)
            return algo.run(whole, node.params, ctx)
        executor = self._executor_for(where)
        work = self._work_folder(node)
        t0 = time.perf_counter()
        clock = {"write": 0.0, "run": 0.0, "merge": 0.0}
        try:
            self.store.copy_fragments(table, work.path / "in0")
            if algo.summarizes(node.params):
                return self._run_summarized(node, table, ctx, executor, work, t0)
            for i, other in enumerate(ctx.inputs[1:], 1):
                self.store.copy_fragments(other, work.path / f"in{i}", by=table)
            clock["write"] = time.perf_counter() - t0
            grouping = fragment_groups(algo, node.params, table, self.registry, ctx)
            domain = self._domain(table)
            for line in grouping.notes:
                ctx.note(line)
            groups, sizes = grouping.groups, grouping.sizes
            for other in ctx.inputs[1:]:
                if CLASS in other.columns:  # e.g. refine's partition: its classes stay whole
                    groups, sizes, note = keep_classes_together(groups, sizes, table, other, ctx)
                    if note:
                        ctx.note(note)
            done: dict[tuple[int, ...], FragmentResult] = {}
            issued = 0  # task numbers (and result files) stay unique across rounds
            while True:
                todo = [g for g in groups if tuple(g) not in done]
                tasks = [self._task(node, ctx, work, g, issued + i, domain=domain) for i, g in enumerate(todo)]
                issued += len(tasks)
                advance = self.reporter.progress(sum(len(g) for g in todo), f"{node.name}: fragments")
                t1 = time.perf_counter()
                for g, res in zip(todo, run_all(executor, tasks, advance)):
                    done[tuple(g)] = res
                clock["run"] += time.perf_counter() - t1
                bad = [i for i, g in enumerate(groups) if done[tuple(g)].infeasible]
                if not bad:
                    break
                if len(bad) == len(groups):
                    # no group passes the algorithm's check (a parameter it refuses, or data too
                    # poor even for the largest group): merging cannot help; say why, as unpartitioned
                    first = done[tuple(groups[0])]
                    raise InputError(str(first.infeasible) + ("" if len(groups) == 1 else
                                     f" (in every one of the {len(groups)} fragment groups)"), where=where)
                first = done[tuple(groups[bad[0]])]
                ctx.note(f"{len(bad)} fragment group(s) failed {node.uses}'s check (fragments "
                         f"{'+'.join(map(str, first.fragments))}: {first.infeasible}); merged with a neighbour")
                groups, sizes = merge_neighbours(groups, sizes, bad)
            results = [done[tuple(g)] for g in groups]
            t2 = time.perf_counter()
            out = self._merge_results(node, table, results, ctx, where)
            clock["merge"] = time.perf_counter() - t2
        except BaseException:
            self._close_executor(abort=True)  # no worker writes into the folder while it is removed
            raise
        finally:
            work.remove()
        busy = sum(r.seconds for r in results)
        ctx.note(f"{node.uses} ran on {len(results)} fragment group(s) of {describe_sizes(np.asarray(sizes))} records "
                 f"on {self.executor_spec.describe()}: fragments written in {clock['write']:.2f} s, run in "
                 f"{clock['run']:.2f} s ({busy:.2f} s of work in {len({r.pid for r in results})} process(es)), merged "
                 f"in {clock['merge']:.2f} s")
        return out

    def _domain(self, table: TypedTable) -> dict[str, ColumnDomain]:
        """The quasi-identifiers over the whole table, for its fragments (``TypedTable.domain``):
        a numeric column's range, mean and population deviation, a categorical one's sorted
        distinct values -- computed by DuckDB (one thread: the sums are the same every time)."""
        out: dict[str, ColumnDomain] = {}
        for c in table.typing.quasi:
            if c not in table.columns:
                continue
            q = ident(c)
            typ = table.schema.field(c).type
            numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)
            if table.typing.get(c).type == "continuous" and numeric:
                row = self.store.sql(f"SELECT min({q})::DOUBLE, max({q})::DOUBLE, avg({q}::DOUBLE), "
                                     f"stddev_pop({q}::DOUBLE) FROM t", t=table).to_pylist()[0]
                lo, hi, mean, std = row.values()
                out[c] = ColumnDomain(lo=lo, hi=hi, mean=mean, std=std)
            else:
                values = self.store.sql(f"SELECT DISTINCT {q} AS v FROM t WHERE {q} IS NOT NULL", t=table).column(0)
                values = values.combine_chunks()
                if pa.types.is_dictionary(values.type):
                    values = values.dictionary_decode()
                out[c] = ColumnDomain(values=values.take(pc.array_sort_indices(values)))
        return out

    def _task(self, node: Any, ctx: StepContext, work: WorkFolder, group: list[int], index: int,
              mode: str = "run", domain: dict[str, ColumnDomain] | None = None) -> FragmentTask:
        inputs = []
        for i, t in enumerate(ctx.inputs if mode == "run" else ctx.inputs[:1]):
            files = [f for frag in group for f in work.files(i, frag)]
            inputs.append({"files": files, "typing": t.typing, "claims": t.claims, "hierarchies": t.hierarchies,
                           "domain": (domain or {}) if i == 0 else {}})
        return FragmentTask(step=node.name, algorithm=node.uses, version=node.version, params=dict(node.params),
                            seed=ctx.seed, fragments=list(group), inputs=inputs,
                            out_path=work.result(index, mode),
                            mode=mode, index=index)

    def _merge_results(self, node: Any, table: TypedTable, results: list[FragmentResult], ctx: StepContext,
                       where: str) -> TypedTable:
        """The groups' results as one table in the store: class ids made global (each group's
        offset by the classes before it), the columns the algorithm changed taken from the
        results, the others from the input."""
        first = results[0]
        for res in results[1:]:
            if not res.schema.equals(first.schema) or res.typing != first.typing \
                    or {c: h.hash for c, h in res.hierarchies.items()} != \
                    {c: h.hash for c, h in first.hierarchies.items()}:
                raise RunError(f"algorithm {node.uses!r} gave fragments {res.fragments} another schema, typing or "
                               f"hierarchies than fragments {first.fragments}; its results cannot be merged",
                               where=where)
        changed = [c for c in first.schema.names if any(c in r.columns for r in results)]
        offsets = np.cumsum([0] + [r.classes for r in results[:-1]]).astype(np.int64)
        flags = {f"_af_has{i}": pa.array([c in r.columns for r in results]) for i, c in enumerate(changed)}
        o = pa.table({"_af_file": pa.array([r.path for r in results]), "_af_off": pa.array(offsets), **flags})
        select = []
        for c in first.schema.names:
            q = ident(c)
            if c == ROW:
                select.append(f"t.{q}")
            elif c == CLASS:
                select.append(f"(r.{q} + o._af_off) AS {q}")
            elif c in changed:
                i = changed.index(c)
                whole = all(c in r.columns for r in results)
                select.append(f"r.{q}" if whole else f"CASE WHEN o._af_has{i} THEN r.{q} ELSE t.{q} END AS {q}")
            else:
                select.append(f"t.{q}")
        out = self.store.read_results(f"SELECT {', '.join(select)} FROM t JOIN r ON t.{ident(ROW)} = r.{ident(ROW)} "
                                      "JOIN o ON r.filename = o._af_file", [r.path for r in results], t=table, o=o)
        claims = _merged_claims([r.claims for r in results])
        dropped = sorted(set().union(*[set(r.claims) for r in results]) - set(claims))
        if dropped:
            ctx.note(f"claim(s) {', '.join(dropped)} made by some fragment groups only (or with parameters that "
                     "cannot be combined) dropped")
        # what the groups fitted: a value every group recorded alike is the step's
        fitted: dict[str, list[str]] = {}
        for res in results:
            for name, value in res.fitted.items():
                fitted.setdefault(name, []).append(canonical_json(value, strict=True))
        for name, texts in sorted(fitted.items()):
            if len(texts) == len(results) and len(set(texts)) == 1:
                ctx.record_fitted(name, results[0].fitted[name])
            else:
                ctx.note(f"fitted value {name!r} recorded differently (or not at all) by the fragment groups: not "
                         "recorded for the step")
        # the groups' own notes: each distinct one once, with how many groups made it
        notes: dict[str, list[int]] = {}
        for res in results:
            for line in res.notes:
                notes.setdefault(line, []).append(res.fragments[0])
        for line, firsts in list(notes.items())[:NOTES_SHOWN]:
            who = "every fragment group" if len(firsts) == len(results) else \
                f"{len(firsts)} of {len(results)} fragment groups (the first from fragment {firsts[0]})"
            ctx.note(f"{who}: {line}")
        if len(notes) > NOTES_SHOWN:
            ctx.note(f"{len(notes) - NOTES_SHOWN} other distinct note(s) of fragment groups not shown")
        return TypedTable(None, first.typing, claims, first.hierarchies, stored=out.stored)

    def _whole(self, table: TypedTable) -> TypedTable:
        """The partitioned table without its ``_fragment`` column (a view: nothing is copied)."""
        whole = self.store.derive_table(f"SELECT * EXCLUDE ({ident(FRAGMENT)}) FROM t", view=True, t=table)
        return whole.replace(typing=table.typing, claims=table.claims, hierarchies=table.hierarchies)

    def _run_summarized(self, node: Any, table: TypedTable, ctx: StepContext, executor: Executor,
                        work: WorkFolder, t0: float) -> TypedTable:
        """Each fragment's summary where it lies, summed by DuckDB; then one run on the
        whole table (without its ``_fragment`` column) with the sum as ``ctx.summary``."""
        algo = node.plugin.obj
        ids = [int(i) for i in self.store.sql(f"SELECT DISTINCT {ident(FRAGMENT)} FROM t ORDER BY 1",
                                              t=table).column(0).to_pylist()]
        tasks = [self._task(node, ctx, work, [f], i, mode="summarize") for i, f in enumerate(ids)]
        advance = self.reporter.progress(len(tasks), f"{node.name}: fragment summaries")
        results = run_all(executor, tasks, advance)
        files = [r.path for r in results]
        listed = ", ".join(f"'{duckdb_file(f).replace(chr(39), chr(39) * 2)}'" for f in files)
        summary = self.store.sql(f"SELECT * EXCLUDE (_af_n), sum(_af_n)::BIGINT AS _af_n FROM read_parquet([{listed}]) "
                                 "GROUP BY ALL ORDER BY ALL NULLS LAST")
        ctx.note(f"{node.uses}: summaries of {len(ids)} fragment(s) on {self.executor_spec.describe()} summed into "
                 f"{summary.num_rows:,} rows in {time.perf_counter() - t0:.1f} s")
        whole = self._whole(table)
        ctx.inputs = [whole, *ctx.inputs[1:]]
        ctx.summary = summary
        algo.check(node.params, table=whole)
        return algo.run(whole, node.params, ctx)
