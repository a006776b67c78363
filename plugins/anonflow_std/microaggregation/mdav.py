"""Microaggregation algorithms: the MDAV family (SPEC section 8) and partition refinement.

``mdav``, ``v-mdav``, ``grav`` and ``v-grav`` share one implementation: two loops
(:func:`~anonflow_std.microaggregation.kernels.mdav_partition`, :func:`~anonflow_std.microaggregation.kernels.vmdav_partition`)
and a pluggable similarity (:class:`~anonflow_std.microaggregation.kernels.Euclidean` or
:class:`~anonflow_std.microaggregation.grey_similarity.Grey`).  ``refine`` improves any given partition by
local search (:mod:`anonflow_std.microaggregation.refine`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, ROW, Algorithm, InputError, Param, StepContext, TypedTable

from .. import __version__
from ..common.columns import continuous_quasi, replace_columns, standardization, zscores
from .grey_similarity import Grey
from .kernels import mdav_partition, vmdav_partition
from .leaf_index import Euclidean
from .refine import refine_partition


def publish_group_means(table: TypedTable, columns: list[str], X: np.ndarray, labels: np.ndarray,
                        ctx: StepContext | None = None) -> TypedTable:
    """Replace each column by its group mean (original units) and add the ``_class`` column.
    A table in the store stays there: the means and classes are joined to it by position."""
    counts = np.bincount(labels)
    new = {name: pa.array((np.bincount(labels, weights=X[:, j], minlength=counts.size) / counts)[labels],
                          type=pa.float64()) for j, name in enumerate(columns)}
    return replace_columns(table, new, pa.array(labels, type=pa.int64()), ctx)


K = Param("k", "int", min=2, help="minimum group size")
STANDARDIZE = Param("standardize", "bool", default=True,
                    help="z-score the QIs (population std) before clustering")
GAMMA = Param("gamma", "float", default=0.2, min=0,
              help="gain factor of the extension test (V-MDAV: d_in < gamma*d_out; V-GRAV: gamma*b_in > b_out)")
STOP = Param("stop", "str", default="k", choices=("k", "2k"),
             help="form groups while >= k records remain (SPEC section 8) or while >= 2k remain (seed 003)")
ZETA = Param("zeta", "float", default=1.8, above=0,
             help="distinguishing coefficient of the balanced adjacent degree")


class _Microaggregation(Algorithm):
    """Common frame: numeric QIs, z-scores, a partition, group means published."""

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        return {"k-anonymity": {"k": params["k"]}}

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        continuous_quasi(table, self.name)
        if params["k"] > table.num_rows:
            raise InputError(f"parameter 'k' = {params['k']} is larger than the table ({table.num_rows} records)")

    def partition(self, Z: np.ndarray, params: Mapping[str, Any], report: Any, ctx: StepContext) -> np.ndarray:
        raise NotImplementedError

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        quasi = continuous_quasi(table, self.name)
        X = table.numeric(quasi)
        Z = X
        if params["standardize"]:
            Z, constant = zscores(X, quasi, table.domain)
            if constant:
                ctx.note(f"constant column(s) {', '.join(constant)} carry no distance and were ignored for grouping")
            # the z-scores' means and population deviations over the whole table, for anonflow apply
            mean, std = standardization(X, quasi, table.domain)
            ctx.record_fitted("standardization", {"quasi": list(quasi), "mean": [float(v) for v in mean],
                                                  "std": [float(v) for v in std]})
        advance = ctx.progress(table.num_rows, self.name)
        done = [0]

        def report(assigned: int) -> None:
            advance(assigned - done[0])
            done[0] = assigned

        labels = self.partition(np.ascontiguousarray(Z), params, report, ctx)
        report(table.num_rows)
        sizes = np.bincount(labels)
        ctx.note(f"{sizes.size} groups of {int(sizes.min())}..{int(sizes.max())} records")
        return publish_group_means(table, quasi, X, labels, ctx)


    def apply(self, table: TypedTable, published: TypedTable, params: Mapping[str, Any], ctx: StepContext,
              fitted: Mapping[str, Any] | None = None) -> tuple[TypedTable, dict[str, Any]]:
        """Assign each new record of ``table`` to the nearest published group of the release
        ``published`` and publish that group's centroid (its published values, ``_class``
        kept): :func:`nearest_groups`, on z-scores by the run's own standardization (the
        original table's means and population deviations, ``fitted["standardization"]`` as
        :meth:`run` recorded it). A release made before anonflow recorded it: the published
        table's means and deviations, with a note. Nothing is checked here: the caller
        re-checks the claimed model (each group used must hold at least k new records)."""
        quasi = continuous_quasi(table, self.name)
        groups, centroids = published_centroids(published, quasi)
        X = table.numeric(quasi)
        source = None
        if params.get("standardize", True):
            mean, std, source = applied_standardization(published, quasi, (fitted or {}).get("standardization"))
            if source != "recorded":
                ctx.note(f"{self.name}: the release records no standardization (made before anonflow recorded it): "
                         "z-scores by the published table's means and deviations")
        else:
            mean, std = np.zeros(len(quasi)), np.ones(len(quasi))
        nearest = nearest_groups(X, centroids, mean, std)
        data = table.data.drop_columns([c for c in (CLASS, ROW) if c in table.data.column_names])
        for j, name in enumerate(quasi):
            data = data.set_column(data.column_names.index(name), name,
                                   pa.array(centroids[nearest, j], type=pa.float64()))
        data = data.append_column(CLASS, pa.array(groups[nearest], type=pa.int64()))
        used, counts = np.unique(groups[nearest], return_counts=True)
        ctx.note(f"{self.name}: {table.num_rows} new record(s) assigned to {used.size} of the release's {groups.size} "
                 f"groups (nearest centroid, Euclidean on z-scores)")
        out = TypedTable(data, published.typing, published.claims)
        return out, {"groups": int(groups.size), "groups_used": int(used.size),
                     "records_per_group_used": {"min": int(counts.min()) if counts.size else 0,
                                                "max": int(counts.max()) if counts.size else 0},
                     "standardized": bool(params.get("standardize", True)),
                     **({"standardization": source} if source else {})}


def applied_standardization(published: TypedTable, quasi: list[str],
                            recorded: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """The means and deviations to z-score new records by: the ones the run recorded
    (``{"quasi", "mean", "std"}``, checked to name exactly ``quasi`` with finite values;
    returned in ``quasi``'s order), ``"recorded"``; or, when none is recorded, the published
    table's, ``"published table"``."""
    if recorded is None:
        P = published.numeric(quasi)
        return P.mean(axis=0), P.std(axis=0), "published table"
    try:
        names = [str(q) for q in recorded["quasi"]]
        mean = np.asarray(recorded["mean"], dtype=np.float64)
        std = np.asarray(recorded["std"], dtype=np.float64)
        ok = len(names) == mean.size == std.size and np.isfinite(mean).all() and np.isfinite(std).all() \
            and (std >= 0).all()
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError("the release's recorded standardization is not {quasi, mean, std} of equal length with "
                         "finite values")
    if sorted(names) != sorted(quasi):
        raise InputError(f"the release's recorded standardization is over {', '.join(names)}, not over the "
                         f"quasi-identifiers {', '.join(quasi)}")
    order = [names.index(q) for q in quasi]
    return mean[order], std[order], "recorded"


def published_centroids(published: TypedTable, quasi: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The release's groups (``_class`` ids, ascending) and their centroids (one row each,
    the published values of ``quasi``), checked: every record of a group publishes the
    same values."""
    if CLASS not in published.columns:
        raise InputError("the release's published table has no _class column: not a microaggregated table")
    missing = [q for q in quasi if q not in published.columns]
    if missing:
        raise InputError(f"the release's published table has no column {missing[0]!r} (a quasi-identifier)")
    cls = np.asarray(published.data.column(CLASS).to_numpy(zero_copy_only=False))
    P = published.numeric(quasi)
    groups, first, inverse = np.unique(cls, return_index=True, return_inverse=True)
    centroids = P[first]
    if not np.array_equal(centroids[inverse.reshape(-1)], P, equal_nan=True):
        raise InputError("the release's groups do not each publish one centroid (records of one _class hold "
                         "different values): not a microaggregated table")
    return groups.astype(np.int64), centroids


def nearest_groups(X: np.ndarray, centroids: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Per row of ``X``, the index of the nearest row of ``centroids``: squared Euclidean
    distance on z-scores ``(x - mean) / std`` (SPEC section 8; a constant column, std 0,
    carries no distance), ties to the lower index. Computed in blocks of rows."""
    safe = np.where(std == 0, 1.0, std)
    w = np.where(std == 0, 0.0, 1.0)
    C = (centroids - mean) / safe * w
    out = np.empty(X.shape[0], dtype=np.int64)
    block = max(1, (1 << 24) // max(1, C.shape[0] * C.shape[1]))  # ~128 MB of differences at a time
    for start in range(0, X.shape[0], block):
        Z = (X[start:start + block] - mean) / safe * w
        d = ((Z[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
        out[start:start + block] = np.argmin(d, axis=1)
    return out


class Mdav(_Microaggregation):
    name = "mdav"
    version = __version__
    description = "MDAV microaggregation: fixed-size groups of k on z-scored numeric QIs, group means published."
    params = (
        Param("k", "int", min=2, help="minimum group size (groups have k records, the last k..2k-1)"),
        STANDARDIZE,
    )

    def partition(self, Z, params, report, ctx):
        return mdav_partition(Z, params["k"], progress=report)


class Grav(_Microaggregation):
    name = "grav"
    version = __version__
    description = ("GRAV: MDAV with the balanced adjacent degree of grey relational analysis in place of "
                   "the Euclidean distance (seed 003); group means published.")
    params = (
        Param("k", "int", min=2, help="minimum group size (groups have k records, the last k..2k-1)"),
        ZETA,
        STANDARDIZE,
    )

    def partition(self, Z, params, report, ctx):
        return mdav_partition(Z, params["k"], progress=report, similarity=Grey(params["zeta"]))


class _Variable(_Microaggregation):
    """V-MDAV's loop; subclasses choose the similarity."""

    def similarity(self, params: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def partition(self, Z, params, report, ctx):
        sim = self.similarity(params)
        k = params["k"]
        labels = vmdav_partition(Z, k, params["gamma"], stop=params["stop"], similarity=sim, progress=report)
        zeta = getattr(sim, "zeta", None)
        if zeta is not None and params["gamma"] <= zeta / (1 + zeta):
            ctx.note(f"gamma = {params['gamma']:g} <= zeta/(1+zeta) = {zeta / (1 + zeta):.4f}: since "
                     "zeta/(1+zeta) <= B <= 1, gamma*b_in > b_out never holds and no group was extended")
        big = int((np.bincount(labels) > 2 * k - 1).sum())
        if big:
            ctx.note(f"{big} group(s) exceed 2k-1 = {2 * k - 1} records after taking leftovers")
        return labels


class VMdav(_Variable):
    name = "v-mdav"
    version = __version__
    description = ("V-MDAV microaggregation (Solanas & Martinez-Balleste 2006): variable-size groups of "
                   "k..2k-1 on z-scored numeric QIs, group means published.")
    params = (
        Param("k", "int", min=2, help="minimum group size (groups have k..2k-1 records; leftovers may add up to k-1)"),
        GAMMA,
        STOP,
        STANDARDIZE,
    )

    def similarity(self, params):
        return Euclidean()


class VGrav(_Variable):
    name = "v-grav"
    version = __version__
    description = ("V-GRAV (seed 003): V-MDAV with the balanced adjacent degree of grey relational analysis "
                   "in place of the Euclidean distance; group means published.")
    params = (
        Param("k", "int", min=2, help="minimum group size (groups have k..2k-1 records; leftovers may add up to k-1)"),
        ZETA,
        GAMMA,
        STOP,
        STANDARDIZE,
    )

    def similarity(self, params):
        return Grey(params["zeta"])


class Refine(Algorithm):
    name = "refine"
    version = __version__
    description = ("Improve a microaggregation partition by local search (moves and swaps of records, then "
                   "seeded kicks), keeping group sizes in [k, 2k-1]; group means published.")
    inputs = 2
    params = (
        Param("k", "int", default=None, min=1, nullable=True,
              help="minimum group size to keep (default: the smallest group of the given partition)"),
        Param("neighbours", "int", default=8, min=1,
              help="candidate groups per record: those with the nearest centroids"),
        Param("rounds", "int", default=100, min=0, help="at most this many descent rounds (each visits every record)"),
        Param("kicks", "int", default=1000, min=0,
              help="perturbations of two neighbouring groups tried after the descent (iterated local search)"),
        Param("seconds", "float", default=60.0, min=0, help="time limit (the search stops early when reached)"),
        Param("standardize", "bool", default=True, help="z-score the QIs (population std), as sse-il does"),
    )

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        # the k actually kept is only known from the partition; run() puts it in the output's claims
        return {}

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        continuous_quasi(table, self.name)

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:

        if len(ctx.inputs) != 2:
            raise InputError("refine takes two inputs: [original typed table, a partition with _class]")
        original, given = ctx.inputs
        quasi = continuous_quasi(original, self.name)
        if CLASS not in given.columns:
            raise InputError("refine: the second input has no _class column; give it the output of a "
                             "microaggregation step, e.g. input: [typed, grouped]")
        rows, given_rows = original.rows(), given.rows()
        if rows.size != given_rows.size or not np.array_equal(np.sort(rows), np.sort(given_rows)):
            raise InputError(f"refine: the two inputs hold different records ({rows.size} vs {given_rows.size}); "
                             "the partition must cover every record of the original table")
        cls = given.data.column(CLASS)
        if cls.null_count:
            raise InputError("refine: the partition has records without a class (suppressed records)")
        # each original record's class, matched through _row
        classes = np.empty(rows.size, dtype=np.int64)
        classes[np.argsort(rows, kind="stable")] = cls.to_numpy()[np.argsort(given_rows, kind="stable")]
        sizes = np.unique(classes, return_counts=True)[1]
        k = params["k"] if params["k"] is not None else int(sizes.min())
        if sizes.min() < k:
            raise InputError(f"refine: parameter 'k' = {k}, but the given partition has a group of "
                             f"{int(sizes.min())} record(s); every group must have at least k")
        X = original.numeric(quasi)
        Z = X
        if params["standardize"]:
            Z, constant = zscores(X, quasi, original.domain)
            if constant:
                ctx.note(f"constant column(s) {', '.join(constant)} carry no distance and were ignored")
        result = refine_partition(Z, classes, k, ctx.rng, neighbours=params["neighbours"], rounds=params["rounds"],
                                  kicks=params["kicks"], seconds=params["seconds"])
        moved = int((result.labels != np.unique(classes, return_inverse=True)[1].reshape(-1)).sum())
        sst = float((Z - Z.mean(axis=0)).ravel() @ (Z - Z.mean(axis=0)).ravel()) or 1.0
        ctx.note(f"k = {k}: SSE {result.sse_before:.6g} -> {result.sse_after:.6g} (IL "
                 f"{100 * result.sse_before / sst:.3f} -> {100 * result.sse_after / sst:.3f} %) after "
                 f"{result.rounds} descent round(s) and {result.kicks} kick(s), {result.kicks_kept} kept; "
                 f"{moved} record(s) changed group")
        if result.stopped_by == "seconds":
            ctx.note(f"stopped by the time limit ({params['seconds']:g} s): the result depends on the machine's "
                     "speed; raise 'seconds' or lower 'rounds'/'kicks' for a reproducible output")
        out = publish_group_means(original, quasi, X, result.labels, ctx)
        return out.replace(claims={"k-anonymity": {"k": k}})


PLUGINS = [Mdav(), VMdav(), Grav(), VGrav(), Refine()]
