"""Optimal full-domain generalization over a lattice of hierarchy levels (SPEC section 6).

A node is a vector of hierarchy levels, one per quasi-identifier (QI); applying it replaces
every QI value by its ancestor at that level. The search finds every *minimal* node that
satisfies a privacy model (a check plugin implementing ``Metric.partition_holds``) within a
record-suppression limit, then picks the node of least utility loss.

Search (after Flash, Kohlmayer et al. 2012, as in ARX): the nodes are visited level by level
(sum of levels), each level's nodes ordered by ARX's strategy (relative height, mean
relative generalization, then the fraction of distinct values kept). From each node not yet
classified, a greedy path leads upwards through unclassified nodes (always to the best
successor in that order); a binary search on the path checks nodes, and each check tags
the lattice predictively: a satisfying node tags all its generalizations satisfying, a
failing node tags all its specializations failing, and a failing node's unclassified
successors are queued as new path heads. At the end every node is classified, having
checked only a fraction of them. Tagging needs monotonicity: the model must hold for a
class merged from satisfying classes (``Metric.monotone``), and, with suppression, for any
class containing a satisfying class (``Metric.monotone_with_suppression``; true for
k-anonymity and distinct l-diversity, false for (alpha,k)-anonymity). A model that is not
monotone in this sense is checked on every node (but see the loss bound below).

Checking a node never reads the table again: each QI's values are coded once as hierarchy
rows, and each level as integer label codes. The bottom node's classes are the distinct
code tuples; any other node's classes are computed from an already evaluated node below it
(the one with the fewest classes, from a small cache) by mapping each class's label codes
one level up through lookup arrays, combining them into one mixed-radix int64 key and
grouping (a dense bincount when the key space is small, else a sort). Class sizes are
bincounts, and the privacy check is vectorized over classes.

Utility: ``loss``, ``entropy-loss``, ``mi-loss`` and ``generalization-rl`` score a node from
codes alone (the mean width of each QI at each level is precomputed, so a node's loss
without suppression is a sum of d numbers; records of failing classes are suppressed and
count as fully generalized, width 1, on every QI). Without suppression the best node is
the minimal satisfying node of least loss (loss grows along generalization). With
suppression loss is not monotone, so every satisfying node is a candidate. Any other
metric plugin is computed on the materialized output of each minimal satisfying node (or,
with ``candidates: satisfying``, of every satisfying node).

Pruning by the loss bound (with suppression and a built-in loss; after ARX): a node's loss
without suppression, ``bound``, is a lower bound of its loss: a suppressed record counts
w_i * 1 on QI i where it would count w_i * width, and every width is <= 1 and every weight
w_i >= 0 (checked on the utility's widths and weights at run time: a loss that fails this
test is not pruned; the four built-in ones pass -- Iyengar and RL widths are fractions of a
domain, the weights 1/d, entropies, clipped mutual informations and RL domain shares,
normalized). The check of a satisfying node also computes its exact loss. Once one is
known, a node whose bound is at least the least exact loss found so far plus
``BOUND_MARGIN`` (1e-9) is *excluded*: its loss can neither beat that node's nor tie it.
No path starts at an excluded node, and the nodes still unclassified when the search ends
are excluded rather than classified (the bound grows along generalization for hierarchies
whose labels nest, so an excluded node's generalizations are excluded too; correctness
needs only each node's own bound). A binary search may still check an excluded node on a
path leading out of the bound: its failing verdict tags the nodes within the bound below
it, and such nodes, higher up, are cheaper to check than the ones within the bound. Once a
loss is known, a path climbs to the unclassified successor within the bound with the
largest down-set (the product of levels + 1; else to the one with the largest down-set
outside it; ties in ARX's order), so its failing nodes tag as many of the nodes left to
classify as possible. A model that is not monotone is checked node by node in order of the
bound (then lattice order), until the bound excludes the rest.

The choice with suppression visits the satisfying nodes in order of the bound (rounded to
12 decimals), then height, then lattice order, and takes each one's exact loss (from its
check, or computed for a node tagged satisfying) until the bound reaches the best loss
less 1e-12; a node replaces the best only when its loss is more than 1e-12 below it (ties
to the earlier node). Every satisfying node whose bound is below the optimum plus 1e-9 is
classified, and every excluded node's bound is at least the optimum plus 1e-9, so the visit
ends before the first excluded node (an internal error otherwise): the chosen node, its loss
and the published table are exactly those of the search without the bound
(``PRUNE = False``), at a fraction of the checks.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import (CLASS, ROW, Algorithm, InputError, Metric, Param, ParamError, Partition, RunError,
                          StepContext, TypedTable, Typing, mark_generalized, sql_ident, suppression_limit,
                          validate_params)

from .. import __version__
from ..common.columns import grading_of, real_counts, real_distinct, sensitive_column
from ..common.dp_params import dp_settings, privacy_loss_of
from ..common.hierarchy_levels import HierarchyLoss, Levels, need_hierarchies
from .lattice_search import Part, Scorer, Search, Space, Verdict, node_output
from .safepub import check_utility, run_safepub

#: search a frequency table (distinct QI and sensitive combinations with their records)
#: when the model and the utility allow it (off: one row per record, for comparison)
FREQUENCY = True
#: prune the search by the loss bound (with suppression and a built-in loss; module
#: docstring); False gives the search without it (every node classified), for comparison
PRUNE = True
#: the model that makes the lattice run SafePub (generalization/safepub.py)
DP_MODEL = "ed-differential-privacy"


class Lattice(Algorithm):
    name = "lattice"
    version = __version__
    #: records of failing classes are suppressed, at most ``suppression`` of them (its cap)
    suppresses = True
    suppression_param = "suppression"
    description = ("Optimal full-domain generalization (SPEC section 6): every minimal hierarchy-level node "
                   "satisfying a privacy model (Flash-style search with predictive tagging), best by a utility "
                   "metric; optional record suppression.")
    params = (
        Param("model", "str", default="k-anonymity",
              help="privacy check implementing partition_holds (k-anonymity, l-diversity, alpha-k-anonymity, ...)"),
        Param("model_params", "dict", default={}, help="the model's parameters, e.g. {k: 5}"),
        Param("suppression", "float", default=0.0, min=0.0, max=1.0,
              help="largest fraction of records that may be suppressed (records of failing classes)"),
        Param("utility", "str", default="loss",
              help="metric choosing among satisfying nodes: loss, entropy-loss, mi-loss, generalization-rl, or any"),
        Param("utility_params", "dict", default={}, help="parameters of the utility metric, e.g. {label: income}"),
        Param("maximize", "bool", default=False,
              help="for a metric other than the built-in losses: higher is better"),
        Param("candidates", "str", default="minimal", choices=("minimal", "satisfying"),
              help="for a metric other than the built-in losses: score the minimal satisfying nodes, or every "
                   "satisfying node (with suppression a coarser node may suppress fewer records and score better)"),
    )

    #: the registry this lattice is registered in (:meth:`bound`): its privacy models and
    #: utility metrics are looked up there
    registry: Any = None

    def bound(self, registry: Any) -> "Lattice":
        """This lattice, for the registry ``registry`` (``anonflow_register_algorithms``)."""
        lattice = copy.copy(self)
        lattice.registry = registry
        return lattice

    # -- parameters -------------------------------------------------------------------

    def _registry(self) -> Any:
        if self.registry is None:
            raise RunError("lattice: this lattice is not registered in a plugin registry, where its privacy models "
                           "are looked up; use the registered one (registry.get('algorithm', 'lattice').obj)")
        return self.registry

    def _model(self, params: Mapping[str, Any]) -> tuple[Metric, dict[str, Any]]:
        reg = self._registry()
        name = params["model"]
        if not reg.has("metric", name):
            known = [n for n in reg.names("metric") if _offers_partition(reg.get("metric", n).obj)]
            raise InputError(f"lattice: unknown privacy model {name!r}; models the lattice can search: "
                             f"{', '.join(known) or 'none'}")
        obj = reg.get("metric", name).obj
        if obj.category != "privacy" or not _offers_partition(obj):
            known = [n for n in reg.names("metric") if _offers_partition(reg.get("metric", n).obj)]
            raise InputError(f"lattice: metric {name!r} is not a privacy check the lattice can search (it needs "
                             f"partition_holds); models: {', '.join(known) or 'none'}")
        try:
            mparams = validate_params(obj.params, params["model_params"] or {})
        except ParamError as exc:
            raise InputError(f"lattice: model_params of {name!r}: {exc}") from None
        return obj, mparams

    def _utility(self, params: Mapping[str, Any]) -> tuple[Metric, dict[str, Any]]:
        reg = self._registry()
        name = params["utility"]
        if not reg.has("metric", name):
            raise InputError(f"lattice: unknown utility metric {name!r}; e.g. loss, entropy-loss, mi-loss, "
                             "generalization-rl")
        obj = reg.get("metric", name).obj
        try:
            uparams = validate_params(obj.params, params["utility_params"] or {})
        except ParamError as exc:
            raise InputError(f"lattice: utility_params of {name!r}: {exc}") from None
        return obj, uparams

    def references(self, params: Mapping[str, Any]) -> list[str]:
        """The model's parameters of kind ``step`` (delta-presence's and k-map's
        ``population``): the search reads that table, so the step depends on it."""
        reg = self.registry
        name = params.get("model", "k-anonymity")
        given = params.get("model_params") or {}
        if reg is None or not isinstance(name, str) or not reg.has("metric", name) or not isinstance(given, Mapping):
            return []
        return [str(given[p.name]) for p in reg.get("metric", name).obj.params
                if p.kind == "step" and isinstance(given.get(p.name), str)]

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        if params.get("model") == DP_MODEL:  # a guarantee of the mechanism: privacy_loss states it
            return {}
        try:
            _, mparams = self._model(params)
        except InputError:
            return {}
        return {params["model"]: {k: v for k, v in mparams.items() if v is not None}}

    def suppression_cap(self, params: Mapping[str, Any]) -> float:
        # SafePub withholds the records it does not sample and those of classes below k:
        # what the mechanism decides, not a cap to meet
        return 1.0 if params.get("model") == DP_MODEL else super().suppression_cap(params)

    def privacy_loss(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        if params.get("model") != DP_MODEL:
            return None
        return privacy_loss_of(dp_settings(self._model(params)[1]))

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, **tables: TypedTable) -> None:
        _, mparams = self._model(params)
        if params["model"] == DP_MODEL:
            dp_settings(mparams)
            check_utility(params["utility"])
            if table is not None:
                need_hierarchies(table.typing.quasi, table.hierarchies, "lattice")
            return
        utility, uparams = self._utility(params)
        if table is None:
            return
        quasi = table.typing.quasi
        need_hierarchies(quasi, table.hierarchies, "lattice")
        if table.num_rows == 0:
            raise InputError("lattice: the table has no records")
        if isinstance(utility, HierarchyLoss):
            utility.model(table, uparams)

    def describe_plan(self, params: Mapping[str, Any], table: TypedTable) -> list[str]:
        quasi = table.typing.quasi
        shape = [Levels(table.hierarchies[q]).height + 1 for q in quasi]
        size = math.prod(shape)
        _, mparams = self._model(params)
        shown = ", ".join(f"{k}={v}" for k, v in mparams.items() if v is not None)
        limit = suppression_limit(params["suppression"], table.num_rows)
        if params["model"] == DP_MODEL:
            s = dp_settings(mparams, len(quasi))
            return [f"lattice: {size:,} nodes ({' x '.join(map(str, shape))} levels over {', '.join(quasi)})",
                    f"SafePub on {table.num_rows:,} records: ({s['epsilon']:g}, {s['delta']:g})-differential privacy, "
                    f"beta {s['beta']:.6g}, k {s['k']}, {s['steps'] or 0} search steps; scored by {params['utility']}"]
        return [f"lattice: {size:,} nodes ({' x '.join(map(str, shape))} levels over {', '.join(quasi)})",
                f"searches {table.num_rows:,} records for {params['model']} ({shown}), at most {limit:,} "
                f"suppressed; best by {params['utility']}"]

    # -- the run ----------------------------------------------------------------------

    #: one full-domain generalization of the whole table: never a node per fragment
    per_fragment = False

    def summarizes(self, params: Mapping[str, Any]) -> bool:
        """On a partitioned table: each fragment's frequency table where it lies, summed (the
        search needs nothing else) -- when the search runs on the frequency table at all."""
        model, _ = self._model(params)
        if model.name == DP_MODEL:
            return False
        utility, _ = self._utility(params)
        return bool(FREQUENCY and model.weighted_partitions and isinstance(utility, HierarchyLoss))

    def summarize(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> pa.Table:
        _, mparams = self._model(params)
        return ctx.sql(_frequency_query(table, mparams, ordered=False), t=table)

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        t0 = time.perf_counter()
        model, mparams = self._model(params)
        if model.name == DP_MODEL:
            need_hierarchies(table.typing.quasi, table.hierarchies, "lattice")
            return run_safepub(table, params, mparams, ctx, published_typing)
        utility, uparams = self._utility(params)
        quasi = table.typing.quasi
        need_hierarchies(quasi, table.hierarchies, "lattice")
        # a built-in loss with a check that counts through the partition's counts: search the
        # frequency table (each distinct QI and sensitive combination once, with its records),
        # which DuckDB computes, instead of one row per record
        units = _frequency_table(table, model, mparams, ctx) if self.summarizes(params) else None
        if units is not None:
            unit_table, weights = units
            space = Space(unit_table, quasi, weights)
        else:
            space = Space(table, quasi)
        n = space.n
        limit = suppression_limit(params["suppression"], n)
        cache: dict[str, Any] = {}

        population = _population_step(model, mparams)
        if population is not None:
            space.set_population(ctx.table(population), population)

        def holds(part: Part) -> np.ndarray:
            pop = (lambda: space.population_sizes(part)) if space.has_population else None
            partition = Partition(lambda: space.classes(part), part.sizes, space.table, cache, space.weights, pop)
            ok = np.asarray(model.partition_holds(partition, mparams))
            if partition.classes_used:
                space.need_classes()
            if ok.shape != part.sizes.shape or ok.dtype != np.bool_:
                raise RunError(f"privacy model {model.name!r}: partition_holds returned {ok.dtype} of shape "
                               f"{ok.shape}, expected one bool per class ({part.sizes.shape[0]})")
            return ok

        # progress: nodes resolved (checked, or tagged by monotonicity), counted at most every 0.2 s
        advance = ctx.progress(space.size, "lattice nodes")
        shown = [0, time.perf_counter()]

        # with suppression a built-in loss is not monotone: every satisfying node is a candidate,
        # and the search skips the nodes whose loss without suppression (a lower bound) is above
        # the best exact loss it has found (see the module docstring)
        scorer = Scorer(space, utility.model(table, uparams)) \
            if limit > 0 and isinstance(utility, HierarchyLoss) else None
        prune = PRUNE and scorer is not None and scorer.lower
        if scorer is not None and not scorer.lower:
            ctx.note(f"lattice: {utility.name!r} has a weight below 0 or a width above 1, so its loss without "
                     "suppression is no lower bound of its loss; the search is not pruned by it")

        def check(levels: tuple[int, ...]) -> Verdict:
            part = space.partition(levels)
            ok = holds(part)
            failing = int(part.sizes[~ok].sum())
            now = time.perf_counter()
            if now - shown[1] >= 0.2:
                resolved = int(np.count_nonzero(search.flat))
                advance(resolved - shown[0])
                shown[:] = [resolved, now]
            value = scorer.value(part, ok) if prune and failing <= limit else None
            return Verdict(failing <= limit, failing, len(part.sizes), value)

        monotone = bool(model.monotone and (limit == 0 or model.monotone_with_suppression))
        search = Search(space, check, monotone, scorer.bound if prune else None)
        search.run()
        advance(space.size - shown[0])
        checked = len(search.verdicts)
        excluded = int(np.count_nonzero(search.flat == 2))
        t_search = time.perf_counter() - t0
        if not monotone:
            why = "" if not model.monotone else " once records may be suppressed"
            which = f"every one of the {space.size} nodes was checked" if not excluded else \
                f"every node the loss bound did not exclude was checked ({checked} of {space.size})"
            ctx.note(f"lattice: {model.name!r} is not monotone under generalization{why}; {which}")

        sat = search.status == 1
        if not sat.any():
            raise InputError(self._no_node(space, search, model, mparams, params["suppression"], limit, holds,
                                           ctx.step))
        minimal = np.flatnonzero(search.minimal().reshape(-1))

        if isinstance(utility, HierarchyLoss):
            best, value, evaluated = self._best_loss(space, search, scorer or Scorer(space, utility.model(
                table, uparams)), minimal, limit, holds)
        else:
            cand = minimal if params["candidates"] == "minimal" else np.flatnonzero(sat.reshape(-1))
            # ties go to the lower node (fewer levels), then the first in lattice order
            cand = cand[np.lexsort((cand, search.height[cand]))]
            best, value, evaluated = self._best_metric(space, search, cand, holds, table, utility, uparams,
                                                       params["maximize"], ctx)
        levels = search.levels(best)
        part = space.partition(levels)
        ok = holds(part)
        classes = space.classes(part)
        # the published table is written by the store: the generalized QIs and the classes,
        # joined by position to the columns the node leaves as they are, or (frequency table)
        # joined to the records by their QI values
        gen, select = node_output(space, quasi, levels, ok, classes, ok[classes], table.columns)
        if units is None:
            out = ctx.derive(f"SELECT {select}, g.{sql_ident(CLASS)} FROM base t POSITIONAL JOIN gen g",
                             base=table, gen=pa.table(gen))
        else:
            # each record meets exactly one row of the frequency table: the one of its values
            keyed = unit_table.columns
            keys = {f"_af_key{i}": unit_table.column(c) for i, c in enumerate(keyed)}
            on = " AND ".join(f"t.{sql_ident(c)} IS NOT DISTINCT FROM g._af_key{i}" for i, c in enumerate(keyed))
            out = ctx.derive(f"SELECT {select}, g.{sql_ident(CLASS)} FROM base t JOIN gen g ON {on}",
                             ordered=False, base=table, gen=pa.table({**keys, **gen}))
        suppressed = int(part.sizes[~ok].sum())

        if excluded:
            found = (f"{space.size - checked - excluded} by predictive tagging and {excluded} by the loss bound "
                     f"(loss without suppression above the best found); {int(sat.sum())} known to satisfy "
                     f"{model.name}, {len(minimal)} of them minimal")
        else:
            found = (f"{space.size - checked} by predictive tagging; {int(sat.sum())} satisfy {model.name}, "
                     f"{len(minimal)} of them minimal")
        ctx.note(f"lattice: {space.size} nodes ({' x '.join(map(str, space.shape))} levels over "
                 f"{', '.join(quasi)}); checked {checked}, pruned {found}; search {t_search:.2f} s")
        ctx.note(f"lattice: chosen node {space.describe(levels)} with {utility.name} = {value:.6g} "
                 f"({evaluated} node(s) scored); {int(ok.sum())} classes, {suppressed} record(s) suppressed "
                 f"(limit {limit})")
        # the node, for anonflow apply: the release carries it (several levels may hold the same labels)
        ctx.record_fitted("node", {"quasi": list(quasi), "levels": [int(lv) for lv in levels]})
        claims = {model.name: {k: v for k, v in mparams.items() if v is not None}}
        return TypedTable(None, published_typing(table.typing, quasi), claims, table.hierarchies, stored=out.stored)

    # -- applying the published node to new data (anonflow apply) ---------------------

    def apply(self, table: TypedTable, published: TypedTable, params: Mapping[str, Any], ctx: StepContext,
              fitted: Mapping[str, Any] | None = None) -> tuple[TypedTable, dict[str, Any]]:
        """Generalize the new records ``table`` (typed, with the recorded hierarchies) with the
        node the run chose, as it recorded it (``fitted["node"]``: :func:`recorded_levels`,
        checked against the published labels). A release made before anonflow recorded the
        node: each quasi-identifier to the level whose labels its published values are
        (:func:`published_levels`), with a note. A record whose labels are those of a
        published class gets that class's ``_class``; other label tuples get new ids after
        the release's largest, in the order of their labels. Nothing is checked here: the
        caller re-checks the claimed model on the result."""
        quasi = list(table.typing.quasi)
        need_hierarchies(quasi, table.hierarchies, "lattice")
        recorded = (fitted or {}).get("node")
        if recorded is not None:
            levels = recorded_levels(recorded, published, quasi, table.hierarchies)
            source = "recorded"
        else:
            levels = published_levels(published, quasi, table.hierarchies)
            source = "published labels"
            ctx.note("lattice: the release records no node (made before anonflow recorded it): the node was read off "
                     "the published labels")
        data = table.data
        for q in quasi:
            h = table.hierarchies[q]
            h.check_covers(data.column(q), "apply", str(q))
            data = data.set_column(data.column_names.index(q), q, h.generalize(data.column(q), levels[q]))
        drop = [c for c in (CLASS, ROW) if c in data.column_names]
        data = data.drop_columns(drop)
        # each record's class, in DuckDB: the release's class of its label tuple, or a new id
        # after the release's largest, new tuples numbered in the order of their labels
        cols = [f"_q{i}" for i in range(len(quasi))]
        keys = published.data.select(quasi + [CLASS]).group_by(quasi).aggregate([(CLASS, "min")])
        known = pa.table({**{c: keys.column(q) for c, q in zip(cols, quasi)}, "_id": keys.column(f"{CLASS}_min")})
        batch = pa.table({**{c: data.column(q) for c, q in zip(cols, quasi)},
                          "_pos": pa.array(np.arange(data.num_rows, dtype=np.int64))})
        def same(x: str, y: str) -> str:
            return " AND ".join(f"{x}.{c} IS NOT DISTINCT FROM {y}.{c}" for c in cols) or "true"

        label = ", ".join(f"coalesce(CAST({c} AS VARCHAR), '')" for c in cols) or "1"
        sel = ", ".join(cols)
        ids = ctx.sql(f"""
            WITH fresh AS (SELECT DISTINCT {sel} FROM b WHERE NOT EXISTS (SELECT 1 FROM k WHERE {same('b', 'k')})),
                 numbered AS (SELECT {sel}, (SELECT coalesce(max(_id), -1) FROM k)
                                            + row_number() OVER (ORDER BY {label}) AS _id FROM fresh),
                 every AS (SELECT {sel}, _id, true AS _known FROM k
                           UNION ALL SELECT {sel}, _id, false FROM numbered)
            SELECT b._pos, e._id, e._known FROM b JOIN every e ON {same('b', 'e')}
            ORDER BY b._pos""", b=batch, k=known)
        if ids.num_rows != data.num_rows:  # every label tuple has exactly one id
            raise RunError(f"lattice apply: {ids.num_rows} class ids for {data.num_rows} records")
        class_ids = ids.column("_id").to_numpy().astype(np.int64)
        data = data.append_column(CLASS, pa.array(class_ids, type=pa.int64()))
        node = {q: int(levels[q]) for q in quasi}
        used, first = np.unique(class_ids, return_index=True)
        in_release = int(ids.column("_known").to_numpy(zero_copy_only=False)[first].sum())
        fresh = int(used.size) - in_release
        ctx.note(f"lattice: node [{', '.join(f'{q}={l}' for q, l in node.items())}] applied to {data.num_rows} "
                 f"record(s): {used.size} class(es), {in_release} of them published in the release, {fresh} new")
        out = TypedTable(data, published_typing(table.typing, quasi), published.claims, table.hierarchies)
        return out, {"node": node, "node_from": source, "classes": int(used.size),
                     "release_classes": in_release, "new_classes": fresh}

    # -- choosing the node --------------------------------------------------------------

    def _no_node(self, space: Space, search: Search, model: Metric, mparams: Mapping[str, Any],
                 suppression: float, limit: int, holds, step: str) -> str:
        """The one-line error when no node satisfies the model: why (a model parameter no node
        can meet, see :func:`_unreachable`), the least violating node, and what to change."""
        # fewest records in failing classes; ties to the most generalized node (for a monotone
        # model the closest to satisfying), then the first in lattice order
        idx = min(search.verdicts, key=lambda i: (search.verdicts[i].failing, -int(search.grid[:, i].sum()), i))
        v = search.verdicts[idx]
        n = space.n
        shown = ", ".join(f"{k}={val}" for k, val in mparams.items() if val is not None)
        allowed = "with no record suppressed" if limit == 0 else \
            f"with at most {suppression:.4g} of the records ({limit}) suppressed"
        why = _unreachable(space, model, mparams, holds, limit)
        text = f"lattice: no node satisfies {model.name} ({shown}) {allowed}"
        if why:
            text += ": " + "; ".join(why)
        text += (f"; the least violating node {space.describe(search.levels(idx))} leaves {v.failing} of {n} "
                 "records in failing classes")
        if v.failing < n:
            need = min(math.ceil(v.failing / n * 100 - 1e-9) / 100, 1.0)
            while need < 1.0 and suppression_limit(need, n) < v.failing:
                need = min(round(need + 0.01, 2), 1.0)
            text += (f": it would suppress {v.failing} records, the cap allows {limit} (suppression = "
                     f"{suppression:g}); raise it, e.g. --set {step}.suppression={need:g}, or relax the model")
        else:
            text += "; no suppression allowance can help: relax the model"
        return text

    def _best_loss(self, space: Space, search: Search, scorer: Scorer, minimal: np.ndarray, limit: int,
                   holds) -> tuple[int, float, int]:
        """Least-loss satisfying node (loss computed from codes; see module docstring)."""
        bound = scorer.bound
        heights = search.height
        if limit == 0:
            cand = minimal
            order = np.lexsort((cand, heights[cand], np.round(bound[cand], 12)))
            best = int(cand[order[0]])
            return best, float(bound[best]), len(cand)
        # every satisfying node in order of its bound, scored exactly until the bound reaches the
        # best: a node excluded by the search's bound always lies past that point
        flat = search.flat
        cand = np.flatnonzero((flat == 1) | (flat == 2))
        order = cand[np.lexsort((cand, heights[cand], np.round(bound[cand], 12)))]
        best, best_value, evaluated = -1, np.inf, 0
        for idx in order:
            idx = int(idx)
            if bound[idx] >= best_value - 1e-12:
                break
            if flat[idx] == 2:
                raise RunError(f"lattice: internal error: node {space.describe(search.levels(idx))}, excluded by "
                               f"its loss bound {bound[idx]:.17g}, is needed by the choice (best {best_value:.17g})")
            v = search.verdicts.get(idx)
            if v is not None and v.value is not None:
                value = v.value
            else:
                part = space.partition(search.levels(idx))
                value = scorer.value(part, holds(part))
                evaluated += 1
            if value < best_value - 1e-12:
                best, best_value = idx, value
        return best, best_value, evaluated

    def _best_metric(self, space: Space, search: Search, candidates: np.ndarray, holds, table: TypedTable,
                     utility: Metric, uparams: Mapping[str, Any], maximize: bool,
                     ctx: StepContext) -> tuple[int, float, int]:
        """Materialize each candidate node and score it with ``utility`` (the first best wins)."""
        best, best_value = -1, None
        for idx in candidates:
            levels = search.levels(int(idx))
            part = space.partition(levels)
            ok = holds(part)
            classes = space.classes(part)
            keep = pa.array(ok[classes])
            data = table.data
            for q, arr in zip(space.quasi, space.published(levels)):
                data = data.set_column(data.column_names.index(q), q, arr)
            new_id = np.cumsum(ok) - 1
            data = data.append_column(CLASS, pa.array(new_id[classes], type=pa.int64()))
            anonymized = table.replace(data=data.filter(keep), typing=published_typing(table.typing, space.quasi))
            # as an evaluate step with [original, anonymized] does: every metric gets the original
            original = table.replace(data=table.data.filter(keep))
            node_ctx = dataclasses.replace(ctx, suppressed=int(space.n - part.sizes[ok].sum()))
            try:
                result = utility.compute(original, anonymized, uparams, node_ctx)
            except InputError:
                raise
            except Exception as exc:  # a third party's crash: say whose
                raise RunError(f"lattice: utility metric {utility.name!r} failed on node {space.describe(levels)}: "
                               f"{type(exc).__name__}: {exc}") from exc
            if utility.name not in result:
                raise RunError(f"lattice: utility metric {utility.name!r} returned no value named {utility.name!r}")
            # a metric that counts suppressed records (ctx.suppressed) is compared on that value,
            # so a node cannot win by suppressing the records it would represent badly
            value = float(result.get(f"{utility.name}.with_suppressed", result[utility.name]))
            # values equal up to rounding tie (the earlier candidate, the lower node, keeps it): two
            # nodes of exactly equal value can come out a few ulps apart from different summations
            slack = 1e-12 * max(1.0, abs(best_value)) if best_value is not None else 0.0
            better = best_value is None or (value > best_value + slack if maximize else value < best_value - slack)
            if better:
                best, best_value = int(idx), value
        return best, float(best_value), len(candidates)


def recorded_levels(recorded: Any, published: TypedTable, quasi: list[str],
                    hierarchies: Mapping[str, Any]) -> dict[str, int]:
    """The node a run recorded (``{"quasi": [names], "levels": [level per name]}``), per
    quasi-identifier: it must name exactly ``quasi``, each level must be one of its
    hierarchy, and the published values must be labels of that level (else the hierarchy
    is not the release's, or the node is not its table's); one-line errors."""
    try:
        names = [str(q) for q in recorded["quasi"]]
        levels = [int(lv) for lv in recorded["levels"]]
        ok = len(names) == len(levels) == len(set(names)) and all(
            isinstance(lv, int) and not isinstance(lv, bool) for lv in recorded["levels"])
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError("lattice: the release's recorded node is not {quasi, levels} of equal length")
    if sorted(names) != sorted(quasi):
        raise InputError(f"lattice: the release's recorded node is over {', '.join(names)}, not over the "
                         f"quasi-identifiers {', '.join(quasi)}")
    node = dict(zip(names, levels))
    out: dict[str, int] = {}
    for q in quasi:
        h, lv = hierarchies[q], node[q]
        if not 0 <= lv <= h.height:
            raise InputError(f"lattice: the release's recorded node has level {lv} for {q!r}, whose hierarchy has "
                             f"levels 0..{h.height}")
        if q not in published.columns:
            raise InputError(f"the release's published table has no column {q!r} (a quasi-identifier)")
        values = pa.chunked_array([published.data.column(q)]).combine_chunks()
        present = set(v for v in values.unique().to_pylist() if v is not None)
        stray = sorted(present - set(h.level(lv).to_pylist()), key=str)
        if stray:
            raise InputError(f"lattice: the published value {stray[0]!r} of {q!r} is not a label of the recorded "
                             f"level {lv} of its hierarchy: the hierarchy or the node is not the release's")
        out[q] = lv
    return out


def published_levels(published: TypedTable, quasi: list[str], hierarchies: Mapping[str, Any]) -> dict[str, int]:
    """The node of a published lattice table: for each quasi-identifier, the level of its
    hierarchy whose labels its published values are. For a release made before anonflow
    recorded the node (:func:`recorded_levels` reads a recorded one), it is read off the data: the levels whose labels
    include every published value are the candidates; when several are, they must
    generalize every value of the hierarchy alike (levels repeating one another), else the
    node cannot be told and the error says so (one line). A published value that is a label
    of no level: the hierarchy is not the release's."""
    levels: dict[str, int] = {}
    for q in quasi:
        h = hierarchies[q]
        values = pa.chunked_array([published.data.column(q)]).combine_chunks() if q in published.columns else None
        if values is None:
            raise InputError(f"the release's published table has no column {q!r} (a quasi-identifier)")
        present = set(v for v in values.unique().to_pylist() if v is not None)
        candidates = [lv for lv in range(h.height + 1) if present <= set(h.level(lv).to_pylist())]
        if not candidates:
            level_sets = [set(h.level(lv).to_pylist()) for lv in range(h.height + 1)]
            stray = sorted(v for v in present if not any(v in s for s in level_sets))
            what = (f"the published value {stray[0]!r} is a label of no level" if stray else
                    "no single level holds all its published values")
            raise InputError(f"lattice: the hierarchy of {q!r} is not the one the release was made with: {what}")
        first = h.level(candidates[0])
        differ = [lv for lv in candidates[1:] if not h.level(lv).equals(first)]
        if differ:
            raise InputError(f"lattice: cannot tell the node's level of {q!r} from the published values: levels "
                             f"{candidates[0]} and {differ[0]} of its hierarchy both hold them and generalize other "
                             "values differently")
        levels[q] = candidates[0]
    return levels


def published_typing(typing: Typing, quasi: list[str]) -> Typing:
    """The typing of a published node: each quasi-identifier holds labels of its hierarchy
    (``options["generalized"] = {"kind": "hierarchy"}``, :mod:`anonflow.generalization`),
    its role and type kept."""
    for q in quasi:
        typing = mark_generalized(typing, q, "hierarchy")
    return typing


def _frequency_query(table: TypedTable, mparams: Mapping[str, Any], ordered: bool = True) -> str:
    """The query of the frequency table over ``t``: the quasi-identifiers and the sensitive
    attributes (those typed, and one the model names), with ``_af_n`` records each."""
    keep = list(table.typing.quasi) + [c for c in table.typing.sensitive if c not in table.typing.quasi]
    named = mparams.get("sensitive")
    if isinstance(named, str) and named in table.columns and named not in keep:
        keep.append(named)
    cols = ", ".join(sql_ident(c) for c in keep)
    return f"SELECT {cols}, count(*)::BIGINT AS _af_n FROM t GROUP BY ALL" + (" ORDER BY ALL NULLS LAST" if ordered else "")


def _frequency_table(table: TypedTable, model: Metric, mparams: Mapping[str, Any],
                     ctx: StepContext) -> tuple[TypedTable, np.ndarray]:
    """The records as a frequency table: each distinct combination of the quasi-identifiers
    and the sensitive attributes (those typed, and one the model names) once, in sorted order,
    with its number of records (DuckDB groups them where they are stored). On a partitioned
    table the engine has summed the fragments' frequency tables (:meth:`Lattice.summarize`)
    into ``ctx.summary``: the same table."""
    freq = ctx.summary if ctx.summary is not None else ctx.sql(_frequency_query(table, mparams), t=table)
    weights = freq.column("_af_n").to_numpy()
    units = TypedTable(freq.drop_columns(["_af_n"]), table.typing, {}, table.hierarchies)
    return units, weights


def _unreachable(space: Space, model: Metric, mparams: Mapping[str, Any], holds, limit: int) -> list[str]:
    """Why no node can satisfy the model, as far as it can be told from the data and the top
    node (every QI at its hierarchy's top level) -- each class of any node lies inside one
    class of the top node. Reads the usual parameters: ``k`` (class size), ``l`` / ``p``
    (distinct sensitive values per class), ``alpha`` and a grading's alpha_i (largest share of
    a value). Vectorized: one partition of the top node and one of the whole table."""
    n = space.n
    table = space.table
    top_levels = tuple(int(h) for h in space.heights)
    top = space.partition(top_levels)
    where = f"the top node {space.describe(top_levels)}"
    out: list[str] = []
    k = mparams.get("k")
    if isinstance(k, int) and not isinstance(k, bool) and not space.has_population:  # k-map: population counts
        if k > n:
            out.append(f"k = {k} is larger than the number of records ({n})")
        elif int(top.sizes.max()) < k:
            out.append(f"k = {k}, but the largest class of {where} has {int(top.sizes.max())} records "
                       "(a hierarchy does not generalize to one value)")
    try:
        s = sensitive_column(table, mparams.get("sensitive"), model.name) if table.typing.sensitive or \
            mparams.get("sensitive") else None
        if s is not None:
            out += _unreachable_sensitive(space, model, mparams, limit, s, top, where)
    except InputError:  # a column the model would reject anyway: its own check says so
        pass
    if not out:
        ok = holds(top)
        failing = int(top.sizes[~ok].sum())
        if failing and model.monotone_with_suppression:
            out.append(f"{where} leaves {failing} records in failing classes, and no finer node leaves fewer")
    return out


def _unreachable_sensitive(space: Space, model: Metric, mparams: Mapping[str, Any], limit: int, s: str, top: Part,
                           where: str) -> list[str]:
    """:func:`_unreachable` for the parameters on the sensitive attribute ``s``: ``l`` / ``p``,
    ``alpha`` and a grading's alpha_i (a missing value is no value, as the models count)."""
    n = space.n
    table = space.table
    single = len(top.sizes) == 1
    out: list[str] = []
    cache: dict[str, Any] = {}
    whole = Partition(np.zeros(table.num_rows, dtype=np.int64), np.array([n], dtype=np.int64), table, cache,
                      space.weights)
    distinct = int(real_distinct(whole, s)[0])  # a missing value is no value
    for key in ("l", "p"):
        want = mparams.get(key)
        if not isinstance(want, int) or isinstance(want, bool):
            continue
        if want > distinct:
            out.append(f"{key} = {want}, but {s!r} has only {distinct} distinct value(s) in the whole table")
        elif not single:
            most = int(real_distinct(Partition(lambda: space.classes(top), top.sizes, table, cache, space.weights),
                                         s).max())
            if most < want:
                out.append(f"{key} = {want}, but the classes of {where} hold at most {most} distinct value(s) "
                           f"of {s!r}")
    counts, real, values = real_counts(whole, s)
    counts = counts[0].astype(np.float64)
    m = int(real[0])  # the records with a real value: a value's share is over them
    names = [repr(v) for v in values]
    bound = None
    alpha = mparams.get("alpha")
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha > 0:
        bound = np.full(len(values), float(alpha))
    elif model.name == "alpha-i-k-anonymity":
        try:
            grading = grading_of(table, s, model.name)
            levels = grading.levels_of(pa.array(values, pa.string()))
        except InputError:
            levels = np.zeros(0, dtype=np.int64)
        if levels.size and (levels > 0).all():
            alphas = grading.alphas()
            if (mparams.get("per") or "value") == "value":
                bound = alphas[levels]
            else:  # per level: a level's values count together
                counts = np.bincount(levels, weights=counts, minlength=grading.size + 1)[1:]
                bound = alphas[1:]
                names = [f"level {i}" for i in range(1, grading.size + 1)]
    if bound is not None and m:
        if alpha is not None and math.ceil(1.0 / alpha - 1e-9) > distinct:
            out.append(f"alpha = {alpha:g} needs at least {math.ceil(1.0 / alpha - 1e-9)} distinct values of "
                       f"{s!r} in a class, but the whole table has {distinct}")
        else:
            # a value above its bound in the whole table is above it in some class of every
            # node: at least (c - a n) / (1 - a) records must go for the rest to satisfy it
            excess = np.where(bound < 1.0, (counts - bound * m) / np.maximum(1.0 - bound, 1e-12), 0.0)
            j = int(np.argmax(excess))
            least = int(math.ceil(excess[j] - 1e-9))
            if least > limit:
                out.append(f"{names[j]} is {counts[j] / m:.1%} of the records{'' if m == n else ' with a value'}, "
                           f"above its alpha {bound[j]:g}: every node must suppress at least {least} records")
    return out


def _population_step(model: Metric, mparams: Mapping[str, Any]) -> str | None:
    """The population table the model names (a parameter ``population`` of kind ``step``),
    or None: the search then gives its partitions population counts."""
    for p in model.params:
        if p.name == "population" and p.kind == "step" and isinstance(mparams.get(p.name), str):
            return str(mparams[p.name])
    return None


def _offers_partition(obj: Metric) -> bool:
    return type(obj).partition_holds is not Metric.partition_holds


PLUGINS = [Lattice()]
