"""Hierarchy levels as integer codes and the loss model of full-domain generalization
(SPEC sections 5-6): per quasi-identifier, the leaves each published (level, label) node
covers and its width, weighted into one loss -- what the lattice search scores nodes with
(:meth:`HierarchyLoss.model`) and what the loss metrics of :mod:`anonflow_std.utility.hierarchy_loss`
(``loss``, ``entropy-loss``, ``mi-loss``, ``generalization-rl``) compute, as described there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import (CLASS, Attribute, Hierarchy, InputError, Metric, StepContext, TypedTable, lookup, sql_ident,
                          value_codes, value_keys)

from .columns import aligned, entropy
from .generalized import Domain, Generalized, attribute_loss
from .qi_space import infer_resolution


# -- hierarchies as integer codes ------------------------------------------------------


class Levels:
    """A hierarchy's labels as integer codes, level by level.

    Labels are compared as text: two nodes of one level with the same label are one
    published value. ``codes[l][j]`` is the label code at level ``l`` of hierarchy row ``j``
    (row = a level-0 value), ``labels[l]`` the label texts in code order."""

    def __init__(self, hierarchy: Hierarchy) -> None:
        self.hierarchy = hierarchy
        self.column = hierarchy.column
        self.height = hierarchy.height
        self.codes: list[np.ndarray] = []
        self.labels: list[pa.Array] = []
        for level in range(self.height + 1):
            enc = pc.dictionary_encode(hierarchy.level(level))
            self.codes.append(enc.indices.to_numpy(zero_copy_only=False).astype(np.int64))
            self.labels.append(enc.dictionary)
        self.cards = [len(lab) for lab in self.labels]
        self.n_leaves = hierarchy.table.num_rows

    def rows(self, values: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Each value's hierarchy row; an InputError names the first value not listed."""
        rows = self.hierarchy.codes(values)
        if rows.size and rows.min() < 0:
            keys = value_keys(values)
            first = int(np.flatnonzero(rows < 0)[0])
            missing = pc.unique(pc.filter(keys, pa.array(rows < 0))).to_pylist()
            raise InputError(f"hierarchy of {self.column!r} has no row for the value {keys[first].as_py()!r} of the "
                             f"data ({len(missing)} value(s) missing)")
        return rows

    def up(self, a: int, b: int) -> np.ndarray:
        """Label code at level ``b`` of each label code of level ``a`` (a <= b)."""
        out = np.zeros(self.cards[a], dtype=np.int64)
        out[self.codes[a]] = self.codes[b]
        return out

    def leaves(self, level: int) -> np.ndarray:
        """Number of leaves covered by each label of ``level``."""
        return np.bincount(self.codes[level], minlength=self.cards[level])

    def positions(self, attr: Attribute | None) -> np.ndarray | None:
        """Leaf positions of an ordered attribute (continuous: the numbers; ordinal: the
        ranks in the declared order), or None for an unordered one."""
        leaves = self.hierarchy.level(0)
        if attr is not None and attr.type == "continuous":
            try:
                return pc.cast(leaves, pa.float64()).to_numpy(zero_copy_only=False)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                bad = next(v for v in leaves.to_pylist() if not _is_number(v))
                raise InputError(f"column {self.column!r} is continuous, but its hierarchy lists the non-numeric "
                                 f"value {bad!r} at level 0") from None
        if attr is not None and attr.type == "ordinal" and attr.order:
            rank = {v: i for i, v in enumerate(attr.order)}
            values = leaves.to_pylist()
            missing = [v for v in values if v not in rank]
            if missing:
                raise InputError(f"hierarchy of {self.column!r} lists {missing[0]!r}, which is not in the column's "
                                 "ordinal order")
            return np.array([rank[v] for v in values], dtype=np.float64)
        return None

    def ranges(self, level: int, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Smallest and largest leaf position under each label of ``level``."""
        lo = np.full(self.cards[level], np.inf)
        hi = np.full(self.cards[level], -np.inf)
        np.minimum.at(lo, self.codes[level], pos)
        np.maximum.at(hi, self.codes[level], pos)
        return lo, hi


def _is_number(v: Any) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


def iyengar_widths(lv: Levels, attr: Attribute | None) -> list[np.ndarray]:
    """Normalized width of each label of each level (seed 004's Loss, SPEC section 6)."""
    pos = lv.positions(attr) if attr is not None and attr.type == "continuous" else None
    out = []
    if pos is not None:
        span = float(pos.max() - pos.min()) if pos.size else 0.0
        for level in range(lv.height + 1):
            lo, hi = lv.ranges(level, pos)
            out.append((hi - lo) / span if span > 0 else np.zeros(lv.cards[level]))
    else:
        m = lv.n_leaves
        for level in range(lv.height + 1):
            out.append((lv.leaves(level) - 1) / (m - 1) if m > 1 else np.zeros(lv.cards[level]))
    return out


def rl_widths(lv: Levels, attr: Attribute | None) -> tuple[list[np.ndarray], float]:
    """SPEC section 5 loss of each label, divided by the loss of the whole domain, and the
    whole domain's loss per record (the attribute's weight in RL).

    One implementation with the ``relative-loss`` metric: the loss of publishing a label is
    :func:`anonflow_std.common.generalized.attribute_loss` of a leaf under it generalized to the
    label's interval [a*, b*] of covered leaf positions (ordered attributes, "+1" unit
    :func:`~anonflow_std.common.qi_space.infer_resolution` of the leaves) or set of covered leaves
    (unordered) -- the same for every leaf under the label. The domain is the hierarchy's
    leaves, where ``relative-loss`` reads the records' values (equal when every leaf occurs).
    """
    pos = lv.positions(attr) if attr is not None and attr.type in ("continuous", "ordinal") else None
    m = lv.n_leaves
    if m == 0:
        return [np.zeros(c) for c in lv.cards], 0.0
    if pos is not None:
        domain = Domain(res=[infer_resolution(pos)], dmin=[pos.min()], dmax=[pos.max()],
                        card=np.zeros(0, np.int64))
        leaves = Generalized.from_records(pos[:, None], None, domain)
    else:
        domain = Domain(res=np.zeros(0), dmin=np.zeros(0), dmax=np.zeros(0), card=[m])
        leaves = Generalized.from_records(None, np.arange(m)[:, None], domain)

    def loss(x: Generalized, xstar: Generalized) -> np.ndarray:
        return attribute_loss(x, xstar, domain)[0 if pos is not None else 1][:, 0]

    full = float(loss(leaves[:1], Generalized.full(domain))[0])
    out = []
    for level in range(lv.height + 1):
        codes = lv.codes[level]
        # the labels' generalized values (row c: label code c, as every code occurs) and a leaf under each
        labels = Generalized.from_labels(leaves, codes)
        under = np.empty(lv.cards[level], dtype=np.int64)
        under[codes[::-1]] = np.arange(m)[::-1]
        out.append(loss(leaves[under], labels) / full if full > 0 else np.zeros(lv.cards[level]))
    return out, full


# -- entropy and mutual information ------------------------------------------------------


def category_codes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each record's value as a code (values numbered in order of first appearance, as their
    hierarchy keys: :func:`anonflow.hierarchy.value_keys`)."""
    distinct, indices = value_codes(values)
    keys = pc.dictionary_encode(value_keys(distinct)).indices.to_numpy(zero_copy_only=False)
    return lookup(keys, indices)


def mutual_information(x: np.ndarray, y: np.ndarray) -> float:
    """Plug-in MI(Y; X) = H(Y) - H(Y|X) = H(X) + H(Y) - H(X, Y) (bits) of two columns given
    as integer codes."""
    joint = x * (int(y.max()) + 1) + y
    return max(0.0, entropy(np.bincount(x)) + entropy(np.bincount(y))
               - entropy(np.unique(joint, return_counts=True)[1]))


def label_column(table: TypedTable, given: str | None, plugin: str) -> str:
    """The label (class) column: ``given`` or the only one typed; constant labels are errors."""
    labels = table.typing.label
    if given is not None:
        if given not in table.columns:
            raise InputError(f"{plugin}: the label column {given!r} is not in the table")
        column = given
    elif len(labels) == 1:
        column = labels[0]
    elif not labels:
        raise InputError(f"{plugin} needs a class label: name it under 'label' in the typing step "
                         "(e.g. label: [income])")
    else:
        raise InputError(f"{plugin} uses one label, but the typing names {len(labels)} ({', '.join(labels)}); "
                         "choose one with the parameter 'label'")
    col = table.column(column)
    if col.null_count:
        raise InputError(f"{plugin}: the label column {column!r} has missing values")
    if len(pc.unique(col)) < 2:
        raise InputError(f"{plugin}: the label column {column!r} is constant; it carries no information "
                         "to weight or predict")
    return column


# -- the loss metrics ---------------------------------------------------------------------


@dataclass
class LossModel:
    """A utility model as the lattice search uses it: per quasi-identifier its hierarchy's
    codes, the normalized loss of each (level, label) and the attribute's weight."""

    quasi: list[str]
    levels: list[Levels]
    widths: list[list[np.ndarray]]
    weights: np.ndarray


def hierarchies_of(*tables: TypedTable | None) -> dict[str, Hierarchy]:
    out: dict[str, Hierarchy] = {}
    for t in tables:
        if t is not None:
            out.update(t.hierarchies)
    return out


def need_hierarchies(quasi: list[str], hierarchies: Mapping[str, Any], plugin: str) -> None:
    if not quasi:
        raise InputError(f"{plugin} needs quasi-identifiers in the typing of its input")
    for q in quasi:
        if q not in hierarchies:
            raise InputError(f"{plugin}: quasi-identifier {q!r} has no generalization hierarchy; add a hierarchy "
                             f"step before it, e.g. {q}: {{interval: [5, 10, 20]}} or {q}: {{arx: FILE}}")


def published_nodes(lv: Levels, rows: np.ndarray, published: pa.Array | pa.ChunkedArray,
                    plugin: str) -> tuple[np.ndarray, np.ndarray]:
    """(level, label code) each record was published as: the lowest level whose label on the
    record's own hierarchy path equals the published text."""
    distinct, indices = value_codes(published)
    pub = value_keys(distinct)   # each distinct published text once
    n = len(rows)
    level = np.full(n, -1, dtype=np.int64)
    code = np.full(n, -1, dtype=np.int64)
    for lvl in range(lv.height + 1):
        idx = lookup(pc.fill_null(pc.index_in(pub, value_set=lv.labels[lvl]), -1).to_numpy(zero_copy_only=False),
                     indices)
        expect = lv.codes[lvl][rows]
        hit = (level < 0) & (idx == expect)
        level[hit] = lvl
        code[hit] = expect[hit]
    bad = np.flatnonzero(level < 0)
    if bad.size:
        r = int(bad[0])
        original = lv.hierarchy.level(0)[int(rows[r])].as_py()
        shown = pub[int(indices[r])].as_py() if indices[r] >= 0 else None
        raise InputError(f"{plugin}: the published value {shown!r} of {lv.column!r} is not a level of the "
                         f"hierarchy above the original value {original!r} ({bad.size} record(s) like this)")
    return level, code


class HierarchyLoss(Metric):
    """Base of the hierarchy-based loss metrics: a weighted mean of per-label widths."""

    category = "utility"
    requires_original = True
    #: name of the per-attribute weight in the metric's detail values.
    weight_kind = "weight"

    def widths(self, lv: Levels, attr: Attribute | None) -> list[np.ndarray]:
        return iyengar_widths(lv, attr)

    def weights(self, table: TypedTable, quasi: list[str], levels: list[Levels],
                params: Mapping[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def model(self, table: TypedTable, params: Mapping[str, Any],
              hierarchies: Mapping[str, Hierarchy] | None = None) -> LossModel:
        """The loss model of ``table``'s quasi-identifiers, weights from its original values."""
        quasi = table.typing.quasi
        hierarchies = hierarchies if hierarchies is not None else table.hierarchies
        need_hierarchies(quasi, hierarchies, self.name)
        levels = [Levels(hierarchies[q]) for q in quasi]
        widths = [self.widths(lv, table.typing.get(q) if q in table.typing else None) for q, lv in zip(quasi, levels)]
        return LossModel(quasi, levels, widths, self.weights(table, quasi, levels, params))

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        if CLASS in anonymized.columns and anonymized.column(CLASS).null_count:
            data = anonymized.data
            anonymized = anonymized.replace(data=data.filter(pc.is_valid(data.column(CLASS))))
        aligned(original, anonymized, self.name, ctx)
        suppressed = int(ctx.suppressed or 0)
        if original.num_rows + suppressed == 0:
            raise InputError(f"{self.name}: the table has no records")
        # weights (entropy, MI) from the whole original, suppressed records included, as the
        # lattice's objective has them: an evaluate step's first input (ctx.inputs[0])
        whole = original
        if suppressed and ctx.inputs and ctx.inputs[0].num_rows == original.num_rows + suppressed:
            whole = ctx.inputs[0]
        model = self.model(whole, params, hierarchies_of(original, anonymized))
        out: dict[str, float] = {}
        total = published = 0.0
        n_all = original.num_rows + suppressed
        for q, lv, widths, w in zip(model.quasi, model.levels, model.widths, model.weights):
            if q not in anonymized.columns:
                raise InputError(f"{self.name}: quasi-identifier {q!r} is not in the anonymized table")
            # each distinct (original, published) pair once, with its number of records: one
            # GROUP BY over the two aligned tables, wherever they are (in memory or in the store)
            oq = sql_ident(q)
            pairs = ctx.sql(f"SELECT o.{oq} AS ov, a.{oq} AS pv, count(*)::BIGINT AS n FROM o POSITIONAL JOIN a "
                            "GROUP BY ALL ORDER BY ALL", o=original, a=anonymized)
            rows = lv.rows(pairs.column("ov"))
            level, code = published_nodes(lv, rows, pairs.column("pv"), self.name)
            per_pair = np.zeros(len(rows))
            for lvl in range(lv.height + 1):
                at = level == lvl
                per_pair[at] = widths[lvl][code[at]]
            width_sum = float(per_pair @ pairs.column("n").to_numpy().astype(np.float64))
            n_published = original.num_rows
            # a suppressed record counts as fully generalized: width 1 on every QI
            loss = float((width_sum + suppressed) / n_all)
            total += float(w) * loss
            published += float(w) * (width_sum / n_published if n_published else 0.0)
            out[f"{self.name}.loss.{q}"] = loss
            out[f"{self.name}.{self.weight_kind}.{q}"] = float(w)
        return {self.name: total, f"{self.name}.published": published, f"{self.name}.suppressed": float(suppressed),
                **out}
