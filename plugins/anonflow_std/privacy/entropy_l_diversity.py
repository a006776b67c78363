"""Entropy l-diversity (Machanavajjhala et al. 2007; ARX ``EntropyLDiversity`` with the
Shannon estimator; pycanon ``entropy_l_diversity``).

A class E satisfies it when the entropy of its sensitive values, in **natural logarithms**,

    H(E) = -sum_s p(E, s) ln p(E, s) = ln r - (1 / r) sum_s c_s ln c_s      (p = c_s / r)

is at least ln(l) (c_s: the class's records with value s, r: its records with a real value;
the typing's missing-value marker ``?`` is no value, and a class with no real value fails).
The headline ``entropy-l-diversity`` is the achieved l, exp(min_E H(E)) (a real number;
pycanon reports it rounded down to an integer). Checked in DuckDB SQL, and on a lattice
``Partition`` by :meth:`EntropyLDiversity.partition_holds`.

Monotone: the entropy is concave, so a class merged from classes with H >= ln l has
H >= ln l too. Not monotone with suppression: a class that contains a satisfying class may
fail ({a, b} holds for l = 2; {a, b, a, a} does not).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, InputError, Metric, Param, Partition, StepContext, TypedTable
from anonflow.hierarchy import value_keys
from anonflow_std.common import missing_marker, real_counts
from anonflow_std.privacy.wildcard import refuse_null_qis

__version__ = "0.1.0"

# -- helpers (copied into each privacy-model module: plugin modules import only anonflow.* and
#    anonflow_std.common) ------------------------------------------------------------------

#: slack on floating-point comparisons, the same in SQL and in ``partition_holds``
EPS = 1e-9

BY = Param("by", "str", default=None, nullable=True, choices=("values", "class"),
           help="classes: records sharing the published QI values (default: what an attacker sees), or sharing _class")
SENSITIVE = Param("sensitive", "str", default=None, nullable=True,
                  help="the sensitive attribute (default: the only one typed)")


def _sensitive(table: TypedTable, given: str | None, plugin: str) -> str:
    sens = table.typing.sensitive
    if given is not None:
        if given not in table.columns:
            raise InputError(f"{plugin}: parameter 'sensitive' = {given!r} is not a column of the table")
        return given
    if len(sens) == 1:
        return sens[0]
    if not sens:
        raise InputError(f"{plugin} needs a sensitive attribute; name it under 'sensitive' in the typing step")
    raise InputError(f"{plugin} works on one sensitive attribute, but the typing names {len(sens)} "
                     f"({', '.join(sens)}); choose one with the parameter 'sensitive'")


def _classed(table: TypedTable, params: Mapping[str, Any], plugin: str, ctx: StepContext,
             sensitive: str | None = None) -> pa.Table:
    """The published records (a null ``_class`` is suppressed: left out) as an Arrow table
    ``(cls BIGINT, value VARCHAR)``: ``cls`` numbers the classes -- records sharing the published
    QI values (``by: values``, the default) or ``_class`` (``by: class``) -- and ``value`` is the
    sensitive value as the text a hierarchy lists it by (``value`` is left out without
    ``sensitive``)."""
    by = params.get("by") or "values"
    if by == "class" and CLASS not in table.columns:
        raise InputError(f"{plugin} by class needs the _class column of an algorithm's output")
    quasi = list(table.typing.quasi)
    if by == "values" and not quasi:
        raise InputError(f"{plugin} needs quasi-identifiers in the typing of its input")
    keys = [CLASS] if by == "class" else quasi
    cols = {f"_k{i}": table.column(c) for i, c in enumerate(keys)}
    if CLASS in table.columns:
        cols["_c"] = table.column(CLASS)
    if sensitive is not None:
        cols["_v"] = value_keys(table.column(sensitive))
    data = pa.table(cols)
    order = ", ".join(f"_k{i}" for i in range(len(keys)))
    where = "WHERE _c IS NOT NULL" if "_c" in cols else ""
    value = ", _v AS value" if sensitive is not None else ""
    return ctx.sql(f"SELECT (dense_rank() OVER (ORDER BY {order}) - 1)::BIGINT AS cls{value} FROM d {where}", d=data)


def _real_matrix(partition: Partition, s: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(counts, real, values)`` of the real values of ``s`` per class (the typing's missing
    marker is no value), as float64."""
    counts, real, values = real_counts(partition, s)
    return counts.astype(np.float64), real.astype(np.float64), values


def entropy_per_class(counts: np.ndarray, real: np.ndarray) -> np.ndarray:
    """H(E) in nats per class from an ``(n_classes, m)`` count matrix and each class's real
    records (``-inf`` for a class with no real value)."""
    c = np.asarray(counts, dtype=np.float64)
    r = np.asarray(real, dtype=np.float64)
    clogc = np.where(c > 0, c * np.log(np.where(c > 0, c, 1.0)), 0.0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.log(np.where(r > 0, r, 1.0)) - clogc / np.where(r > 0, r, 1.0)
    return np.where(r > 0, h, -np.inf)


class EntropyLDiversity(Metric):
    name = "entropy-l-diversity"
    version = __version__
    description = ("Entropy l-diversity: every class's entropy of the sensitive attribute (natural log) is at least "
                   "ln(l); reports exp(least entropy), in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("l", "float", default=None, nullable=True, min=1.0,
                    help="required entropy l: each class's entropy (nats) >= ln(l) (default: the claimed l)"),
              BY, SENSITIVE)
    monotone = True
    monotone_with_suppression = False
    weighted_partitions = True

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name)
        s = _sensitive(anonymized, params.get("sensitive"), self.name)
        l = params.get("l")
        if l is None:
            l = anonymized.claims.get(self.name, {}).get("l")
        classed = _classed(anonymized, params, self.name, ctx, s)
        marker = missing_marker(anonymized)
        row = ctx.sql(
            "WITH cv AS (SELECT cls, value, count(*)::DOUBLE AS c, (value IS NOT DISTINCT FROM ?) AS miss "
            "FROM classed GROUP BY cls, value), "
            "per AS (SELECT cls, sum(c) FILTER (WHERE NOT miss) AS r, coalesce(sum(c) FILTER (WHERE miss), 0) AS m, "
            "sum(c * ln(c)) FILTER (WHERE NOT miss) AS clogc FROM cv GROUP BY cls), "
            "ent AS (SELECT cls, m, CASE WHEN r > 0 THEN ln(r) - clogc / r END AS h FROM per) "
            "SELECT count(*) AS classes, min(h) AS least, count(*) FILTER (WHERE h IS NULL) AS no_value, "
            "count(*) FILTER (WHERE h IS NULL OR h < ln(?) - ?) AS violating, sum(m) AS missing, "
            "arg_min(cls, coalesce(h, -1e308)) AS worst FROM ent",
            [marker, float(l or 1.0), EPS], classed=classed).to_pylist()[0]
        n = self.name
        least = row["least"]
        achieved = 0.0 if row["no_value"] or least is None else float(math.exp(least))
        out = {n: achieved, f"{n}.min_entropy": float(least) if least is not None and not row["no_value"] else 0.0,
               f"{n}.classes": float(row["classes"] or 0)}
        if row["missing"]:
            out[f"{n}.missing_sensitive"] = float(row["missing"])
        if row["no_value"]:
            out[f"{n}.classes_without_value"] = float(row["no_value"])
        if l is not None:
            out.update({f"{n}.l": float(l), f"{n}.violating_classes": float(row["violating"] or 0),
                        f"{n}.holds": float((row["violating"] or 0) == 0)})
        return out

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        l = params.get("l")
        if l is None:
            raise InputError("entropy-l-diversity needs l, e.g. model_params: {l: 3}")
        s = _sensitive(partition.table, params.get("sensitive"), self.name)
        counts, real, _ = _real_matrix(partition, s)
        return entropy_per_class(counts, real) >= math.log(float(l)) - EPS


PLUGINS = [EntropyLDiversity()]
