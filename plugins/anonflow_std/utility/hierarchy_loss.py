"""Utility models of full-domain generalization (SPEC sections 5-6, seeds 001 and 004).

The loss metrics read a published table whose quasi-identifiers are hierarchy labels (the
output of the ``lattice`` algorithm, or of any algorithm that publishes hierarchy levels)
next to the original table, and use the hierarchies attached to the tables to know, for
each record, which hierarchy node it was published as: the lowest level whose label on the
record's own path equals the published text.

Per quasi-identifier X_i, a published node covers a set of *leaves* (the hierarchy's
level-0 values under it; the hierarchy defines the domain):

* ``loss``, ``entropy-loss``, ``mi-loss`` (seed 004, Iyengar's loss metric): the normalized
  width of the published value -- continuous X_i: (largest - smallest covered leaf) /
  (largest - smallest leaf of the hierarchy); any other type: (covered leaves - 1) / (all
  leaves - 1). Loss(X_i) is its mean over records, and the dataset loss is
  ``sum_i w_i Loss(X_i)`` with w_i = 1/q (``loss``), H(X_i) / sum_j H(X_j)
  (``entropy-loss``) or MI(Y; X_i) / sum_j MI(Y; X_j) (``mi-loss``, Y = the label), plug-in
  estimates on the original values.
* ``generalization-rl`` (seed 001, the L-incognito baseline): the relative loss RL of SPEC
  section 5 -- ordered attributes (continuous, ordinal) publish the interval
  [smallest, largest covered leaf], L = (b* - a* + res) / res when it is wider than the value
  (res: 1 for integers, else the leaves' decimal step; ordinal leaves are their ranks);
  unordered ones publish the set of covered leaves, L = |set|; RL = sum of L over records
  and QIs / the same sum with every QI generalized to its whole domain. L and res are
  L-clustering's (``attribute_loss``, ``infer_resolution``), so with every leaf in the data
  it equals the ``relative-loss`` metric (:func:`~anonflow_std.common.hierarchy_levels.rl_widths`).

Each metric is a weighted mean of per-(level, label) widths in [0, 1], which is what the
lattice search needs to score nodes from integer codes alone (:mod:`anonflow_std.common.hierarchy_levels`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anonflow.api import InputError, Param

from .. import __version__
from ..common.columns import entropy
from ..common.hierarchy_levels import HierarchyLoss, category_codes, label_column, mutual_information, rl_widths


class Loss(HierarchyLoss):
    name = "loss"
    version = __version__
    description = ("Seed 004's Loss: mean normalized width of the published hierarchy values, QIs weighted "
                   "equally (1/q); needs [original, anonymized] and hierarchies.")

    def weights(self, table, quasi, levels, params):
        return np.full(len(quasi), 1.0 / len(quasi))


class EntropyLoss(HierarchyLoss):
    name = "entropy-loss"
    version = __version__
    description = ("Seed 004's Entropy Loss: Loss with QI weights H(X_i) / sum_j H(X_j), plug-in entropies of "
                   "the original values.")

    def weights(self, table, quasi, levels, params):
        h = np.array([entropy(np.bincount(category_codes(table.column(q)))) for q in quasi])
        return h / h.sum() if h.sum() > 0 else np.full(len(quasi), 1.0 / len(quasi))


class MiLoss(HierarchyLoss):
    name = "mi-loss"
    version = __version__
    description = ("Seed 004's MI Loss: Loss with QI weights MI(Y; X_i) / sum_j MI(Y; X_j), Y = the label, "
                   "plug-in estimates on the original values.")
    params = (Param("label", "str", default=None, nullable=True,
                    help="the label column Y (default: the only column typed as label)"),)

    def check(self, params: Mapping[str, Any], **tables: Any) -> None:
        # the weights come from the original's label: it must be typed, complete, not constant
        if tables.get("original") is not None:
            label_column(tables["original"], params.get("label"), self.name)

    def weights(self, table, quasi, levels, params):
        label = label_column(table, params.get("label"), self.name)
        y = category_codes(table.column(label))
        mi = np.array([mutual_information(category_codes(table.column(q)), y) for q in quasi])
        if mi.sum() <= 0:
            raise InputError(f"{self.name}: no quasi-identifier carries information about the label {label!r} "
                             "(every MI(Y; X_i) is 0), so the weights are undefined")
        return mi / mi.sum()


class GeneralizationRl(HierarchyLoss):
    name = "generalization-rl"
    version = __version__
    description = ("SPEC section 5's relative loss RL = L(D, D*) / L(D, D_c) of a hierarchy-generalized table "
                   "(ordered QIs as intervals, unordered as sets of covered leaves; weights 1).")
    weight_kind = "domain_share"

    def widths(self, lv, attr):
        return rl_widths(lv, attr)[0]

    def weights(self, table, quasi, levels, params):
        full = np.array([rl_widths(lv, table.typing.get(q) if q in table.typing else None)[1]
                         for q, lv in zip(quasi, levels)])
        return full / full.sum() if full.sum() > 0 else np.full(len(quasi), 1.0 / len(quasi))


PLUGINS = [Loss(), EntropyLoss(), MiLoss(), GeneralizationRl()]
