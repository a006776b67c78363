"""Metrics over the classes of a published table (seed 000, SPEC sections 3 and 4).

* ``avg-il`` (utility) -- AVG-IL(Q) = mean over classes of IL(G) / (|G| |QI|), eq. 17-18,
  with IL(G) = sum of the SPEC section 1 distances of G's *original* records to G's
  centroid (mean, convex median, frequency vector, medoid), computed from the original table
  and the classes of the anonymized one with :mod:`anonflow.kernels`.
* ``avg-ent`` (utility) -- AVG-Ent(Q) = mean over classes of Ent(G) = -sum p_s log2 p_s of the
  sensitive attribute, eq. 19 (DuckDB SQL).
* ``cavg`` (utility) -- CAVG = (n / |Q|) / k, eq. 20 (DuckDB SQL).
* ``l-diversity`` (privacy) -- distinct l-diversity, SPEC section 3 (DuckDB SQL).
* ``p-sensitive-k-anonymity`` (privacy) -- >= k records and >= p distinct sensitive values
  per class, SPEC section 3 (DuckDB SQL).

**Classes.** ``by: class`` groups records by ``_class`` (the algorithm's classes; null =
suppressed, left out), ``by: values`` by the published quasi-identifier values (what an
attacker sees: classes publishing the same values are one). The default is ``class`` when
the table has ``_class``, else ``values``. For the two privacy checks ``class`` is the
stricter reading: merging classes never lowers a class size or a count of distinct values.

Both privacy checks also implement :meth:`~anonflow.api.Metric.partition_holds`, so a
``lattice`` step can search for the least-loss generalization satisfying them.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, ROW, InputError, Metric, Param, StepContext, TypedTable
from anonflow.kernels.distance import il_by_class
from anonflow.kernels.encode import encode

from . import __version__
from .alphak import flagged_counts_sql, published_part, sensitive_column, table_counts_sql
from .common import missing_marker, real_distinct
from .metrics import sql_ident

BY = Param("by", "str", default=None, nullable=True, choices=("class", "values"),
           help="classes: records sharing _class (default when present) or sharing the published QI values")
SENSITIVE = Param("sensitive", "str", default=None, nullable=True,
                  help="the sensitive attribute (default: the only one typed)")


def _by(table: TypedTable, params: Mapping[str, Any], metric: str) -> str:
    by = params.get("by") or ("class" if CLASS in table.columns else "values")
    if by == "class" and CLASS not in table.columns:
        raise InputError(f"{metric} by class needs the _class column of an algorithm's output")
    if by == "values" and not table.typing.quasi:
        raise InputError(f"{metric} by values needs quasi-identifiers in the typing of its input")
    return by


def _counts_sql(table: TypedTable, data: pa.Table, sensitive: str, by: str) -> str:
    """``(cls, value, c, n, miss, r)`` per class and sensitive value (see :func:`table_counts_sql`
    and :func:`flagged_counts_sql`): ``miss`` flags the typing's missing-value marker, ``r`` is
    the class's records with a real value."""
    columns = data.column_names if by == "class" else [c for c in data.column_names if c != CLASS]
    return flagged_counts_sql(table_counts_sql(columns, table.typing.quasi, sensitive), missing_marker(table))


def _published(table: TypedTable, by: str) -> pa.Table:
    data = published_part(table)
    return data if by == "class" else data.drop_columns([c for c in (ROW, CLASS) if c in data.column_names])


def _class_sizes_sql(table: TypedTable, by: str) -> str:
    if by == "class":
        return f"SELECT count(*) AS n FROM published GROUP BY {sql_ident(CLASS)}"
    return f"SELECT count(*) AS n FROM published GROUP BY {', '.join(sql_ident(q) for q in table.typing.quasi)}"


def _claimed(table: TypedTable, key: str) -> Any:
    """A parameter from the algorithm's claims: ``k`` from k-anonymity or p-sensitive
    k-anonymity, ``p`` from p-sensitive k-anonymity, ``l`` from l-diversity (else p)."""
    claims = table.claims
    if key == "k":
        return claims.get("k-anonymity", {}).get("k", claims.get("p-sensitive-k-anonymity", {}).get("k"))
    if key == "p":
        return claims.get("p-sensitive-k-anonymity", {}).get("p")
    return claims.get("l-diversity", {}).get("l", claims.get("p-sensitive-k-anonymity", {}).get("p"))


def _missing_out(out: dict[str, float], metric: str, row: Mapping[str, Any], s: str, ctx: StepContext) -> None:
    """Report the records whose sensitive value is missing: they count as no distinct value."""
    if row["missing"]:
        out[f"{metric}.missing_sensitive"] = float(row["missing"])
        ctx.note(f"{metric}: {row['missing']} record(s) have a missing {s} value; it counts as no distinct value")


def _worst_note(ctx: StepContext, metric: str, row: Mapping[str, Any], what: str) -> None:
    if row.get("worst_class") is not None:
        ctx.note(f"{metric}: worst class {row['worst_class']} ({what})")


class AvgIl(Metric):
    name = "avg-il"
    version = __version__
    description = ("AVG-IL (seed 000 eq. 17-18): mean over classes of IL(G) / (|G| |QI|), IL of the original records "
                   "to their class centroid by the SPEC section 1 distances.")
    category = "utility"
    requires_original = True
    params = (BY,)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        by = _by(anonymized, params, self.name)
        quasi = original.typing.quasi
        if not quasi:
            raise InputError("avg-il needs the quasi-identifiers typed in the original table")
        data = published_part(anonymized)
        if by == "class":
            keys = data.column(CLASS).to_numpy(zero_copy_only=False)
        else:
            # number the distinct published QI combinations (in SQL: one dense_rank)
            order = ", ".join(sql_ident(q) for q in anonymized.typing.quasi)
            ranked = ctx.sql(f"SELECT {sql_ident(ROW)} AS r, dense_rank() OVER (ORDER BY {order}) - 1 AS c "
                             f"FROM published ORDER BY {sql_ident(ROW)}", published=data)
            data = pa.table({ROW: ranked.column("r"), CLASS: ranked.column("c")})
            keys = data.column(CLASS).to_numpy(zero_copy_only=False)
        rows = data.column(ROW).to_numpy(zero_copy_only=False)
        orig_rows = original.rows()
        order = np.argsort(rows, kind="stable")
        at = np.searchsorted(rows[order], orig_rows)
        found = (at < rows.shape[0]) & (rows[order][np.minimum(at, rows.shape[0] - 1)] == orig_rows)
        if not found.all():
            missing = int(orig_rows[~found][0])
            raise InputError(f"avg-il: record _row = {missing} of the original table is not in the anonymized one")
        if rows.shape[0] != orig_rows.shape[0]:
            raise InputError("avg-il: the anonymized table holds records that are not in the original one")
        _, labels = np.unique(keys[order][at], return_inverse=True)
        labels = labels.ravel().astype(np.int64)
        g = int(labels.max()) + 1 if labels.size else 0
        il = il_by_class(encode(original, quasi), labels, g)
        sizes = np.bincount(labels, minlength=g)
        per_class = il / (sizes * len(quasi))
        return {"avg-il": float(per_class.mean()) if g else 0.0,
                "avg-il.max": float(per_class.max()) if g else 0.0,
                "avg-il.total": float(il.sum()),
                "avg-il.per_record": float(il.sum() / (labels.size * len(quasi))) if labels.size else 0.0,
                "avg-il.classes": float(g)}


class AvgEnt(Metric):
    name = "avg-ent"
    version = __version__
    description = "AVG-Ent (seed 000 eq. 19): mean over classes of the entropy (bits) of the sensitive attribute."
    category = "utility"
    requires_original = False
    params = (BY, SENSITIVE)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        s = sensitive_column(anonymized, params["sensitive"], self.name)
        by = _by(anonymized, params, self.name)
        data = _published(anonymized, by)
        row = ctx.sql(
            f"WITH counts AS ({_counts_sql(anonymized, data, s, by)}), "
            "ent AS (SELECT cls, coalesce(-sum((c / r) * log2(c / r)) FILTER (WHERE NOT miss), 0) AS e, "
            "coalesce(sum(c) FILTER (WHERE miss), 0) AS m FROM counts GROUP BY cls) "
            "SELECT avg(e) AS mean, min(e) AS least, max(e) AS most, count(*) AS classes, sum(m) AS missing FROM ent",
            published=data).to_pylist()[0]
        out = {"avg-ent": float(row["mean"] or 0.0), "avg-ent.min": float(row["least"] or 0.0),
               "avg-ent.max": float(row["most"] or 0.0), "avg-ent.classes": float(row["classes"] or 0)}
        if row["missing"]:  # entropy over the real values only: a missing value adds none
            out["avg-ent.missing_sensitive"] = float(row["missing"])
        return out


class Cavg(Metric):
    name = "cavg"
    version = __version__
    description = "CAVG (seed 000 eq. 20, LeFevre et al.): (records / classes) / k; 1 is the ideal."
    category = "utility"
    requires_original = False
    params = (Param("k", "int", default=None, nullable=True, min=1,
                    help="the k of the model (default: the k the algorithm claims)"), BY)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        k = params["k"] if params["k"] is not None else _claimed(anonymized, "k")
        if k is None:
            raise InputError("cavg needs 'k' (no algorithm claims one for this table)")
        by = _by(anonymized, params, self.name)
        data = _published(anonymized, by)
        row = ctx.sql(f"SELECT count(*) AS classes, coalesce(sum(n), 0) AS records FROM ({_class_sizes_sql(anonymized, by)})",
                      published=data).to_pylist()[0]
        classes, records = int(row["classes"]), int(row["records"])
        value = records / classes / k if classes else 0.0
        return {"cavg": float(value), "cavg.classes": float(classes), "cavg.records": float(records),
                "cavg.k": float(k)}


def _diversity_report(ctx: StepContext, table: TypedTable, data: pa.Table, s: str, by: str,
                      k: int | None, p: int | None) -> dict[str, Any]:
    """Per class: size n and distinct *real* sensitive values d (the missing-value marker is
    not one). Returns the number of classes, the smallest n and d, the classes with n < k or
    d < p, the records with a missing value, and the worst class (least d, then least n, then
    lowest class number)."""
    query = f"""
        WITH counts AS ({_counts_sql(table, data, s, by)}),
        per AS (SELECT cls, any_value(n) AS n, count(*) FILTER (WHERE NOT miss) AS d,
                       coalesce(sum(c) FILTER (WHERE miss), 0) AS m FROM counts GROUP BY cls)
        SELECT (SELECT count(*) FROM per) AS classes, (SELECT min(n) FROM per) AS smallest,
               (SELECT min(d) FROM per) AS least, (SELECT coalesce(sum(m), 0) FROM per) AS missing,
               (SELECT count(*) FROM per WHERE n < ? OR d < ?) AS violating,
               w.cls AS worst_class, w.n AS worst_size, w.d AS worst_distinct
        FROM (SELECT 1) dummy LEFT JOIN (SELECT * FROM per ORDER BY d, n, cls LIMIT 1) w ON true
    """
    return ctx.sql(query, [int(k or 0), int(p or 0)], published=data).to_pylist()[0]


class LDiversity(Metric):
    name = "l-diversity"
    version = __version__
    description = ("Distinct l-diversity (SPEC section 3): the least number of distinct sensitive values in a class, "
                   "in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("l", "int", default=None, nullable=True, min=1,
                    help="required distinct values per class (default: the claimed l, else the claimed p)"),
              BY, SENSITIVE)
    #: merging classes, or adding records to one, never lowers its number of distinct values.
    monotone = True
    monotone_with_suppression = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        s = sensitive_column(anonymized, params["sensitive"], self.name)
        by = _by(anonymized, params, self.name)
        l = params["l"] if params["l"] is not None else _claimed(anonymized, "l")
        row = _diversity_report(ctx, anonymized, _published(anonymized, by), s, by, None, l)
        out = {"l-diversity": float(row["least"] or 0), "l-diversity.classes": float(row["classes"] or 0)}
        _missing_out(out, self.name, row, s, ctx)
        if row["worst_class"] is not None and by == "class":
            out["l-diversity.worst_class"] = float(row["worst_class"])
        if l is not None:
            out.update({"l-diversity.l": float(l), "l-diversity.violating_classes": float(row["violating"]),
                        "l-diversity.holds": float(row["violating"] == 0)})
            if row["violating"]:
                _worst_note(ctx, self.name, row, f"{row['worst_distinct']} distinct {s} value(s), l = {l}")
        return out

    #: counts through sizes, counts(), distinct() and codes() only (see Metric)
    weighted_partitions = True

    def partition_holds(self, partition: Any, params: Mapping[str, Any]) -> np.ndarray:
        l = params.get("l")
        if l is None:
            raise InputError("l-diversity needs l, e.g. model_params: {l: 3}")
        s = sensitive_column(partition.table, params.get("sensitive"), self.name)
        return real_distinct(partition, s) >= l


class PSensitiveKAnonymity(Metric):
    name = "p-sensitive-k-anonymity"
    version = __version__
    description = ("p-sensitive k-anonymity (SPEC section 3): every class has >= k records and >= p distinct sensitive "
                   "values, in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("k", "int", default=None, nullable=True, min=1, help="class size (default: the claimed k)"),
              Param("p", "int", default=None, nullable=True, min=1,
                    help="distinct sensitive values per class (default: the claimed p)"),
              BY, SENSITIVE)
    monotone = True
    monotone_with_suppression = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        s = sensitive_column(anonymized, params["sensitive"], self.name)
        by = _by(anonymized, params, self.name)
        k = params["k"] if params["k"] is not None else _claimed(anonymized, "k")
        p = params["p"] if params["p"] is not None else _claimed(anonymized, "p")
        if k is None or p is None:
            raise InputError("p-sensitive-k-anonymity needs 'k' and 'p' (no algorithm claims them for this table)")
        row = _diversity_report(ctx, anonymized, _published(anonymized, by), s, by, k, p)
        n = self.name
        out = {n: float(row["least"] or 0), f"{n}.smallest_class": float(row["smallest"] or 0),
               f"{n}.classes": float(row["classes"] or 0), f"{n}.k": float(k), f"{n}.p": float(p),
               f"{n}.violating_classes": float(row["violating"]), f"{n}.holds": float(row["violating"] == 0)}
        if row["worst_class"] is not None and by == "class":
            out[f"{n}.worst_class"] = float(row["worst_class"])
        _missing_out(out, n, row, s, ctx)
        if row["violating"]:
            _worst_note(ctx, n, row, f"{row['worst_size']} record(s), {row['worst_distinct']} distinct {s} value(s); "
                                     f"k = {k}, p = {p}")
        return out

    #: counts through sizes, counts(), distinct() and codes() only (see Metric)
    weighted_partitions = True

    def partition_holds(self, partition: Any, params: Mapping[str, Any]) -> np.ndarray:
        k, p = params.get("k"), params.get("p")
        if k is None or p is None:
            raise InputError("p-sensitive-k-anonymity needs k and p, e.g. model_params: {k: 10, p: 5}")
        s = sensitive_column(partition.table, params.get("sensitive"), self.name)
        return (np.asarray(partition.sizes) >= k) & (real_distinct(partition, s) >= p)


PLUGINS = [AvgIl(), AvgEnt(), Cavg(), LDiversity(), PSensitiveKAnonymity()]
