"""``k-anonymity`` (privacy check): the smallest class, by published QI values or by
``_class`` (DuckDB SQL), and, for the ``lattice`` search, the same check on a
:class:`~anonflow.api.Partition` (``partition_holds``).

A published quasi-identifier holding nulls (suppressed cells, e.g. ``local-suppression``'s
output) is counted with the nulls as wildcards (``.wildcard``; docs/algorithms.md, "Suppressed
cells as wildcards"): the k achieved is the smallest compatible count. Without a null the
plain ``GROUP BY`` runs, as always. A lattice partition never holds a null: the lattice
suppresses whole records."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import CLASS, InputError, Metric, Param, Partition, StepContext, TypedTable, sql_ident

from .. import __version__
from ..common.wildcard import COUNT, key_counts, null_records


class KAnonymity(Metric):
    name = "k-anonymity"
    version = __version__
    description = ("Smallest equivalence class over the published QI values (or, by: class, over class ids, "
                   "with the QI values' figure beside it as .by_qi_values), computed in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (
        Param("k", "int", default=None, min=1, nullable=True,
              help="required class size (default: the k the algorithm claims)"),
        Param("by", "str", default=None, nullable=True, choices=("values", "class"),
              help="classes are records sharing published QI values (default), or sharing _class "
                   "(lossy-join output publishes exact QIs with a class id; its claim says so)"),
    )

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        quasi = anonymized.typing.quasi
        if not quasi:
            raise InputError("k-anonymity needs quasi-identifiers in the typing of its input")
        claim = anonymized.claims.get("k-anonymity", {})
        k = params["k"] if params["k"] is not None else claim.get("k")
        by = params["by"] or claim.get("by", "values")
        if by == "class":
            if CLASS not in anonymized.columns:
                raise InputError("k-anonymity by class needs the _class column of an algorithm's output")
            published, group = anonymized, sql_ident(CLASS)
        else:
            published, group = anonymized, ", ".join(sql_ident(c) for c in quasi)
        nulls = null_records(ctx, anonymized, quasi)
        if by == "values" and nulls:
            return self._wildcards(anonymized, quasi, k, nulls, ctx)
        row = ctx.sql(
            f"WITH classes AS (SELECT count(*) AS n FROM published GROUP BY {group}) "
            "SELECT min(n), count(*), count(*) FILTER (WHERE n < ?) FROM classes",
            [k or 0], published=published).to_pylist()[0]
        smallest, classes, violating = row.values()
        out = {"k-anonymity": float(smallest or 0), "k-anonymity.classes": float(classes)}
        if by == "class":
            # counted by class id, k is a claim about the class structure (what a lossy join
            # guarantees), not about what an attacker sees: report the QI values' k beside it
            values = anonymized
            if nulls:  # suppressed cells are wildcards
                fk = key_counts(ctx, values, quasi).column(COUNT).to_numpy(zero_copy_only=False)
                vk = int(fk.min()) if fk.size else 0
            else:
                vk = ctx.sql(f"SELECT min(n) AS k FROM (SELECT count(*) AS n FROM published GROUP BY "
                             f"{', '.join(sql_ident(c) for c in quasi)})", published=values).to_pylist()[0]["k"]
            out["k-anonymity.by_qi_values"] = float(vk or 0)
        if k is not None:
            out.update({"k-anonymity.k": float(k), "k-anonymity.violating_classes": float(violating),
                        "k-anonymity.holds": float(violating == 0)})
        return out

    def _wildcards(self, table: TypedTable, quasi: list[str], k: int | None, nulls: int,
                   ctx: StepContext) -> dict[str, float]:
        """Published QIs with nulls: suppressed cells match any value (sdcMicro's ``fk``); the
        smallest compatible count is the k achieved, ``.classes`` the distinct published keys
        (nulls included), ``.violating_classes`` the keys whose compatible count is below k."""
        keys = key_counts(ctx, table, quasi)
        fk = keys.column(COUNT).to_numpy(zero_copy_only=False)
        out = {"k-anonymity": float(fk.min()) if fk.size else 0.0, "k-anonymity.classes": float(fk.size),
               "k-anonymity.null_records": float(nulls)}
        if k is not None:
            violating = int((fk < k).sum())
            out.update({"k-anonymity.k": float(k), "k-anonymity.violating_classes": float(violating),
                        "k-anonymity.holds": float(violating == 0)})
        return out

    #: merging classes never shrinks one, so both hold (SPEC section 6).
    monotone = True
    monotone_with_suppression = True

    #: counts through sizes, counts(), distinct() and codes() only (see Metric)
    weighted_partitions = True

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        k = params.get("k")
        if k is None:
            raise InputError("k-anonymity needs k, e.g. model_params: {k: 5}")
        return partition.sizes >= k


PLUGINS = [KAnonymity()]
