"""t-closeness (Li, Li and Venkatasubramanian 2007; ARX ``EqualDistanceTCloseness``,
``OrderedDistanceTCloseness``, ``HierarchicalDistanceTCloseness``; pycanon ``t_closeness``).

Every class's distribution P of the sensitive attribute is within Earth Mover's Distance t of
the distribution Q of the whole table the check is given (the published records; in the
lattice, the records it keeps, see below). Over the m distinct real values of the table
(the typing's missing-value marker ``?`` is no value; a class with no real value fails):

* ``distance: equal`` -- every two values at ground distance 1:
  D = 1/2 sum_i |p_i - q_i| (ARX computes it as 1/2 (1 + sum_{i in P} (|p_i - q_i| - q_i))).
* ``distance: ordered`` -- values in order v_1 < ... < v_m at ground distance |i - j| / (m - 1):
  D = 1/(m - 1) sum_{i=1..m} |sum_{j<=i} (p_j - q_j)| (0 when m = 1). The order: an ordinal
  attribute's declared ``order``, else the numeric order of a continuous one; a nominal
  attribute has none and is refused.
* ``distance: hierarchical`` -- ground distance level(LCA) / H in the sensitive attribute's
  hierarchy (``table.hierarchies``, height H). As ARX computes it: every node N at level
  L = 1..H has children (its labels at level L - 1); a child's *extra* is the sum of
  (q_i - p_i) over the values under it; pos(N) / neg(N) sum the positive extras and minus the
  negative ones; D = sum_N (L / H) min(pos(N), neg(N)). A node is its label at its level.

The headline ``t-closeness`` is the largest distance over the classes; ``.holds`` is
D <= t (+ 1e-9) for every class.

Suppression. The distance is to the distribution of the records *published*. With record
suppression the lattice cannot know which classes will be published before it checks them,
so :meth:`TCloseness.partition_holds` finds them: it checks every class against the
distribution of the classes still kept, drops the failing ones, and repeats until none
fails (at most one round per class, each vectorized; without suppression one round decides
the node: any failing class fails it). Every class it keeps is then within t of the
distribution of the kept records -- exactly what :meth:`TCloseness.compute` checks on the
published table. ARX instead measures every class against the input's distribution,
suppressed records included.

Monotone without suppression: D(., Q) is convex in P for the three distances (for the
hierarchical one, given a hierarchy with a single root, where ARX's formula is the EMD), so
a class merged from classes within t stays within t. Not monotone with suppression.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import InputError, Metric, Param, Partition, StepContext, TypedTable
from anonflow_std.common.columns import missing_marker, sensitive_column
from anonflow_std.privacy.published_classes import BY, EPS, SENSITIVE, published_classes, real_matrix
from anonflow_std.common.wildcard import refuse_null_qis

__version__ = "0.1.0"

DISTANCES = ("equal", "ordered", "hierarchical")


def value_order(table: TypedTable, s: str, values: list[str], plugin: str) -> np.ndarray:
    """Each value's position in the order of the sensitive attribute ``s`` (``values`` as
    text): an ordinal attribute's declared ``order``, else numeric order for a continuous one."""
    attr = table.typing.get(s) if s in table.typing else None
    if attr is not None and attr.order:
        pos = {str(v): i for i, v in enumerate(attr.order)}
        missing = [v for v in values if v not in pos]
        if missing:
            raise InputError(f"{plugin}: value {missing[0]!r} of {s!r} is not in its declared order")
        return np.array([pos[v] for v in values], dtype=np.float64)
    if attr is not None and attr.type == "continuous":
        try:
            return np.array([float(v) for v in values], dtype=np.float64)
        except ValueError as exc:
            raise InputError(f"{plugin}: {s!r} is typed continuous but holds a non-number ({exc})") from None
    raise InputError(f"{plugin} with distance: ordered needs an order of {s!r}: type it ordinal with an 'order', or "
                     "continuous; for a nominal attribute use distance: equal or hierarchical")


def hierarchy_levels(table: TypedTable, s: str, values: list[str], plugin: str) -> tuple[list[np.ndarray], int]:
    """For each level 0..H of the hierarchy of ``s``, the code of each value's ancestor there
    (codes number the distinct labels of that level), and H."""
    h = table.hierarchies.get(s) if table.hierarchies else None
    if h is None:
        raise InputError(f"{plugin} with distance: hierarchical needs a hierarchy of {s!r}; "
                         "build one in a hierarchy step")
    rows = h.codes(pa.array(values, pa.string()))
    if (rows < 0).any():
        bad = values[int(np.flatnonzero(rows < 0)[0])]
        raise InputError(f"{plugin}: the hierarchy of {s!r} has no row for the value {bad!r}")
    levels = []
    for i in range(h.height + 1):
        labels = h.level(i).to_pylist()
        chosen = [labels[r] for r in rows.tolist()]
        _, codes = np.unique(np.array(chosen, dtype=object).astype(str), return_inverse=True)
        levels.append(codes.reshape(-1).astype(np.int64))
    return levels, h.height


def emd(p: np.ndarray, q: np.ndarray, distance: str, order: np.ndarray | None = None,
        levels: list[np.ndarray] | None = None, height: int = 0) -> np.ndarray:
    """The EMD of each row of ``p`` (``(n_classes, m)`` distributions) to ``q`` (``(m,)``)."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    m = q.shape[0]
    if distance == "equal":
        return 0.5 * np.abs(p - q).sum(axis=1)
    if distance == "ordered":
        if m <= 1:
            return np.zeros(p.shape[0])
        idx = np.argsort(order, kind="stable")
        return np.abs(np.cumsum((p - q)[:, idx], axis=1)).sum(axis=1) / (m - 1)
    d = q - p   # extras at the leaves (ARX: p_global - q_class)
    cost = np.zeros(p.shape[0])
    for L in range(1, height + 1):
        child, parent = levels[L - 1], levels[L]
        nchild = int(child.max()) + 1 if child.size else 0
        net = np.zeros((p.shape[0], nchild))
        np.add.at(net.T, child, d.T)                       # net[:, x] = sum of d over values under child x
        # each child's parent (a function, the hierarchy is validated)
        cp = np.zeros(nchild, dtype=np.int64)
        cp[child] = parent
        nparent = int(parent.max()) + 1
        pos = np.zeros((p.shape[0], nparent))
        neg = np.zeros((p.shape[0], nparent))
        np.add.at(pos.T, cp, np.maximum(net, 0.0).T)
        np.add.at(neg.T, cp, np.maximum(-net, 0.0).T)
        cost += (L / height) * np.minimum(pos, neg).sum(axis=1)
    return cost


class TCloseness(Metric):
    name = "t-closeness"
    version = __version__
    description = ("t-closeness: every class's sensitive-value distribution is within Earth Mover's Distance t of the "
                   "published table's (equal, ordered or hierarchical ground distance), in DuckDB SQL.")
    category = "privacy"
    requires_original = False
    params = (Param("t", "float", default=None, nullable=True, min=0.0, max=1.0,
                    help="largest EMD of a class to the whole table (default: the claimed t)"),
              Param("distance", "str", default="equal", choices=DISTANCES,
                    help="ground distance: equal, ordered (ordinal / continuous) or hierarchical (the SA's hierarchy)"),
              BY, SENSITIVE)
    monotone = True
    monotone_with_suppression = False
    weighted_partitions = True

    def check(self, params: Mapping[str, Any], **tables: Any) -> None:
        table = tables.get("anonymized") if tables.get("anonymized") is not None else tables.get("typed")
        if table is None:
            return
        s = sensitive_column(table, params.get("sensitive"), self.name)
        if params.get("distance") == "ordered":
            attr = table.typing.get(s) if s in table.typing else None
            if attr is None or not (attr.order or attr.type == "continuous"):
                value_order(table, s, [], self.name)   # raises the message
        if params.get("distance") == "hierarchical" and not (table.hierarchies and s in table.hierarchies):
            hierarchy_levels(table, s, [], self.name)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        refuse_null_qis(ctx, anonymized, self.name)
        s = sensitive_column(anonymized, params.get("sensitive"), self.name)
        t = params.get("t") if params.get("t") is not None else anonymized.claims.get(self.name, {}).get("t")
        distance = params.get("distance") or "equal"
        classed = published_classes(anonymized, params, self.name, ctx, s)
        marker = missing_marker(anonymized)
        base = ("WITH cv AS (SELECT cls, value, count(*)::DOUBLE AS c FROM classed WHERE value IS DISTINCT FROM $m "
                "GROUP BY cls, value), "
                "r AS (SELECT cls, sum(c) AS r FROM cv GROUP BY cls), "
                "g AS (SELECT value, sum(c) / (SELECT sum(c) FROM cv) AS q FROM cv GROUP BY value), "
                "p AS (SELECT cv.cls, cv.value, cv.c / r.r AS p FROM cv JOIN r ON cv.cls = r.cls), "
                "grid AS (SELECT r.cls, g.value, g.q, coalesce(p.p, 0) AS p FROM r CROSS JOIN g "
                "LEFT JOIN p ON p.cls = r.cls AND p.value = g.value), ")
        tables: dict[str, Any] = {"classed": classed}
        values = [v for v in ctx.sql("SELECT DISTINCT value FROM classed WHERE value IS DISTINCT FROM $m "
                                     "ORDER BY value", {"m": marker}, classed=classed).column(0).to_pylist()]
        if distance == "equal":
            per = "dist AS (SELECT cls, 0.5 * sum(abs(p - q)) AS d FROM grid GROUP BY cls)"
        elif distance == "ordered":
            tables["ord"] = pa.table({"value": pa.array(values, pa.string()),
                                      "pos": pa.array(value_order(anonymized, s, values, self.name))})
            per = ("cum AS (SELECT grid.cls, sum(p - q) OVER (PARTITION BY grid.cls ORDER BY o.pos "
                   "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS f "
                   "FROM grid JOIN ord o ON grid.value = o.value), "
                   "dist AS (SELECT cls, CASE WHEN (SELECT count(*) FROM g) > 1 THEN sum(abs(f)) / "
                   "((SELECT count(*) FROM g) - 1) ELSE 0 END AS d FROM cum GROUP BY cls)")
        else:
            levels, height = hierarchy_levels(anonymized, s, values, self.name)
            rows = [(v, L, int(levels[L - 1][i]), int(levels[L][i]))
                    for L in range(1, height + 1) for i, v in enumerate(values)]
            tables["tree"] = pa.table({"value": pa.array([r[0] for r in rows], pa.string()),
                                       "lvl": pa.array([r[1] for r in rows], pa.int64()),
                                       "child": pa.array([r[2] for r in rows], pa.int64()),
                                       "parent": pa.array([r[3] for r in rows], pa.int64())})
            per = ("net AS (SELECT grid.cls, t.lvl, t.child, any_value(t.parent) AS parent, sum(q - p) AS e "
                   "FROM grid JOIN tree t ON grid.value = t.value GROUP BY grid.cls, t.lvl, t.child), "
                   "node AS (SELECT cls, lvl, parent, sum(greatest(e, 0)) AS pos, sum(greatest(-e, 0)) AS neg "
                   "FROM net GROUP BY cls, lvl, parent), "
                   f"dist AS (SELECT r.cls, coalesce(sum(node.lvl / {float(height)!r} * least(node.pos, node.neg)), 0) "
                   "AS d FROM r LEFT JOIN node ON r.cls = node.cls GROUP BY r.cls)")
        query = (base + per + ", allc AS (SELECT DISTINCT cls FROM classed) "
                 "SELECT count(*) AS classes, max(d) AS worst, count(*) FILTER (WHERE d IS NULL) AS no_value, "
                 "count(*) FILTER (WHERE d IS NULL OR d > $t + $eps) AS violating, "
                 "(SELECT count(*) FROM classed WHERE value IS NOT DISTINCT FROM $m) AS missing "
                 "FROM allc LEFT JOIN dist ON allc.cls = dist.cls")
        row = ctx.sql(query, {"m": marker, "t": float(t if t is not None else 1.0), "eps": EPS},
                      **tables).to_pylist()[0]
        n = self.name
        out = {n: float(row["worst"] or 0.0), f"{n}.classes": float(row["classes"] or 0),
               f"{n}.values": float(len(values))}
        if row["missing"]:
            out[f"{n}.missing_sensitive"] = float(row["missing"])
        if row["no_value"]:
            out[f"{n}.classes_without_value"] = float(row["no_value"])
        if t is not None:
            out.update({f"{n}.t": float(t), f"{n}.violating_classes": float(row["violating"] or 0),
                        f"{n}.holds": float((row["violating"] or 0) == 0)})
        return out

    def partition_holds(self, partition: Partition, params: Mapping[str, Any]) -> np.ndarray:
        t = params.get("t")
        if t is None:
            raise InputError("t-closeness needs t, e.g. model_params: {t: 0.2}")
        distance = params.get("distance") or "equal"
        s = sensitive_column(partition.table, params.get("sensitive"), self.name)
        counts, real, values = real_matrix(partition, s)
        order = value_order(partition.table, s, values, self.name) if distance == "ordered" else None
        levels, height = hierarchy_levels(partition.table, s, values, self.name) \
            if distance == "hierarchical" else (None, 0)
        keep = real > 0
        p = counts / np.where(real > 0, real, 1.0)[:, None]
        while keep.any():
            total = counts[keep].sum(axis=0)
            present = total > 0                      # the values the kept records hold
            q = total[present] / total.sum()
            sub_levels = [lv[present] for lv in levels] if levels is not None else None
            d = emd(p[:, present], q, distance, order[present] if order is not None else None, sub_levels, height)
            new = keep & (d <= float(t) + EPS)
            if (new == keep).all():
                break
            keep = new
        return keep


PLUGINS = [TCloseness()]
