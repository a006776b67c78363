"""Privacy models from ARX and pycanon (issue 17): entropy l-diversity, recursive (c,l)-diversity,
t-closeness (equal, ordered, hierarchical EMD), delta-presence and k-map (population tables),
average and highest prosecutor re-identification risk.

Each model on a hand-computed example (the arithmetic beside it); ``compute`` (DuckDB SQL)
and ``partition_holds`` (numpy, for the lattice) agree on seeded random partitions, weighted
or not; the monotonicity flags are checked (merging satisfying classes, and a counterexample
where a flag is false); and the values agree with pycanon on the published outputs of two
shipped lattice workflows. The modules are not registered yet, so the metric objects are
called directly and ``Partition`` objects built here.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from anonflow.api import Partition
from anonflow.errors import InputError
from anonflow.hierarchy import Hierarchy
from anonflow.params import validate_params
from anonflow.schema import Attribute, Typing
from anonflow.table import TypedTable
from anonflow.testing import make_context, typed_table

from anonflow_std.privacy.entropy_l_diversity import EntropyLDiversity
from anonflow_std.privacy.population_models import (DeltaPresence, KMap, delta_presence_holds, derived_k,
                                                    population_map, presence)
from anonflow_std.privacy.recursive_cl_diversity import RecursiveCLDiversity
from anonflow_std.privacy.reidentification_risk import AverageRisk, HighestRisk, smallest_first
from anonflow_std.privacy.t_closeness import TCloseness

ROOT = Path(__file__).resolve().parents[3]


_CTX = []


def run(metric, tab, ctx=None, **params):
    if ctx is None:
        if not _CTX:
            _CTX.append(make_context())
        ctx = _CTX[0]
    return metric.compute(None, tab, validate_params(metric.params, params), ctx)


def table(classes, values, stype="nominal", order=None, hierarchy=None, missing="error"):
    """A published table: QI ``q`` = "c<class>" (the class as an attacker sees it), SA ``s``."""
    n = len(values)
    typing = Typing((Attribute("q", "quasi", "nominal"), Attribute("s", "sensitive", stype, order=order)), missing)
    data = pa.table({"_row": pa.array(range(n), pa.int64()), "q": pa.array([f"c{c:04d}" for c in classes]),
                     "s": pa.array(values), "_class": pa.array(classes, pa.int64())})
    return TypedTable(data, typing, {}, {"s": hierarchy} if hierarchy is not None else {})


def partition(t, weights=None):
    classes = np.asarray(t.data.column("_class").to_pylist())
    sizes = np.bincount(classes, weights=weights).astype(np.int64)
    return Partition(classes, sizes, t, weights=weights)


def holds(metric, tab, **params):
    got = np.asarray(metric.partition_holds(partition(tab), validate_params(metric.params, params)))
    assert got.dtype == np.bool_ and got.shape == (len(set(tab.data.column("_class").to_pylist())),)
    return got.tolist()


# -- entropy l-diversity ------------------------------------------------------------------------


def test_entropy_l_diversity_by_hand():
    # class 0: a a b b -> H = ln 2 = 0.6931 (entropy l = 2)
    # class 1: a a a b -> H = -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.2158 + 0.3466 = 0.5623 (l = e^0.5623 = 1.7548)
    # class 2: a b c  -> H = ln 3 = 1.0986 (l = 3)
    t = table([0] * 4 + [1] * 4 + [2] * 3, list("aabb") + list("aaab") + list("abc"))
    out = run(EntropyLDiversity(), t, l=1.7)
    assert out["entropy-l-diversity"] == pytest.approx(math.exp(0.75 * math.log(4 / 3) + 0.25 * math.log(4)))
    assert out["entropy-l-diversity"] == pytest.approx(1.7548, abs=1e-4)
    assert out["entropy-l-diversity.holds"] == 1 and out["entropy-l-diversity.classes"] == 3
    assert holds(EntropyLDiversity(), t, l=1.7) == [True, True, True]
    out = run(EntropyLDiversity(), t, l=2)       # class 1 fails; class 0 is exactly ln 2: holds
    assert out["entropy-l-diversity.violating_classes"] == 1 and out["entropy-l-diversity.holds"] == 0
    assert holds(EntropyLDiversity(), t, l=2) == [True, False, True]
    assert holds(EntropyLDiversity(), t, l=3) == [False, False, True]
    with pytest.raises(InputError, match="needs l"):
        EntropyLDiversity().partition_holds(partition(t), {"l": None, "sensitive": None})


def test_entropy_missing_value_is_no_value():
    # missing: category -> "?" is no value: class 0 = {a, b, ?} has H = ln 2 over its 2 real
    # records; class 1 = {?, ?} has no real value and fails any l
    t = table([0, 0, 0, 1, 1], ["a", "b", "?", "?", "?"], missing="category")
    out = run(EntropyLDiversity(), t, l=2)
    assert out["entropy-l-diversity.missing_sensitive"] == 3 and out["entropy-l-diversity.violating_classes"] == 1
    assert out["entropy-l-diversity.classes_without_value"] == 1 and out["entropy-l-diversity"] == 0
    assert holds(EntropyLDiversity(), t, l=2) == [True, False]


# -- recursive (c,l)-diversity --------------------------------------------------------------


def test_recursive_cl_diversity_by_hand():
    # class 0: counts 5 a, 3 b, 2 c -> r = (5, 3, 2); l = 2: tail = 3 + 2 = 5; 5 < c * 5 iff c > 1
    # class 1: counts 4 a, 1 b      -> r = (4, 1);    l = 2: tail = 1;     4 < c * 1 iff c > 4
    # class 2: 3 a                  -> one value: fails for l = 2
    t = table([0] * 10 + [1] * 5 + [2] * 3, list("aaaaabbbcc") + list("aaaab") + list("aaa"))
    out = run(RecursiveCLDiversity(), t, c=4, l=2)
    assert out["recursive-cl-diversity"] == 4.0          # worst ratio 4 / 1 (class 2 has < l values)
    assert out["recursive-cl-diversity.short_classes"] == 1
    assert out["recursive-cl-diversity.violating_classes"] == 2 and out["recursive-cl-diversity.holds"] == 0
    assert holds(RecursiveCLDiversity(), t, c=4, l=2) == [True, False, False]   # 4 < 4 is false
    assert holds(RecursiveCLDiversity(), t, c=4.5, l=2) == [True, True, False]
    # l = 3: class 0 tail = 2, 5 < c 2 iff c > 2.5; class 1 has only 2 values
    assert holds(RecursiveCLDiversity(), t, c=2.6, l=3) == [True, False, False]
    assert holds(RecursiveCLDiversity(), t, c=2.5, l=3) == [False, False, False]
    t2 = table([0] * 10 + [1] * 5, list("aaaaabbbcc") + list("aaaab"))
    assert run(RecursiveCLDiversity(), t2, c=4.5, l=2)["recursive-cl-diversity.holds"] == 1


# -- t-closeness ------------------------------------------------------------------------------


def test_t_closeness_equal_by_hand():
    # whole table: a 4/8, b 2/8, c 2/8
    # class 0 = a a a b  : P = (3/4, 1/4, 0): D = 1/2 (|3/4 - 1/2| + |1/4 - 1/4| + |0 - 1/4|) = 1/4
    # class 1 = a b c c  : P = (1/4, 1/4, 1/2): D = 1/2 (1/4 + 0 + 1/4) = 1/4
    t = table([0] * 4 + [1] * 4, list("aaab") + list("abcc"))
    out = run(TCloseness(), t, t=0.25)
    assert out["t-closeness"] == pytest.approx(0.25) and out["t-closeness.holds"] == 1
    assert holds(TCloseness(), t, t=0.25) == [True, True]
    assert run(TCloseness(), t, t=0.2)["t-closeness.violating_classes"] == 2
    assert holds(TCloseness(), t, t=0.2) == [False, False]


def test_t_closeness_ordered_by_hand():
    # values 1 < 2 < 3 (continuous), m = 3; whole table: (1/2, 1/4, 1/4)
    # class 0 = 1 1 1 2: P - Q = (1/4, 0, -1/4); cumulative (1/4, 1/4, 0): D = (1/4 + 1/4 + 0) / 2 = 1/4
    # class 1 = 1 2 3 3: P - Q = (-1/4, 0, 1/4); cumulative (-1/4, -1/4, 0): D = 1/4
    t = table([0] * 4 + [1] * 4, [1, 1, 1, 2, 1, 2, 3, 3], stype="continuous")
    out = run(TCloseness(), t, t=0.25, distance="ordered")
    assert out["t-closeness"] == pytest.approx(0.25) and out["t-closeness.holds"] == 1
    # 10 sorts after 9 as a number, not as text: values 9, 10, 100 -> same distances
    t10 = table([0] * 4 + [1] * 4, [9, 9, 9, 10, 9, 10, 100, 100], stype="continuous")
    assert run(TCloseness(), t10, t=0.25, distance="ordered")["t-closeness"] == pytest.approx(0.25)
    # an ordinal order reversing the text order: low < mid < high
    t3 = table([0] * 4 + [1] * 4, ["low"] * 3 + ["mid", "low", "mid", "high", "high"], stype="ordinal",
               order=("low", "mid", "high"))
    assert run(TCloseness(), t3, t=0.25, distance="ordered")["t-closeness"] == pytest.approx(0.25)
    assert holds(TCloseness(), t3, t=0.25, distance="ordered") == [True, True]
    with pytest.raises(InputError, match="needs an order"):
        run(TCloseness(), table([0, 0], ["a", "b"]), t=0.2, distance="ordered")


def flu_hierarchy():
    # level 0: flu, cold, ulcer, gastritis; level 1: respiratory / digestive; level 2: *  (H = 2)
    return Hierarchy.from_levels("s", [["flu", "cold", "ulcer", "gastritis"],
                                       ["respiratory", "respiratory", "digestive", "digestive"], ["*"] * 4])


def test_t_closeness_hierarchical_by_hand():
    # whole table (8 records): flu 2, cold 2, ulcer 2, gastritis 2 -> Q = 1/4 each
    # class 0 = flu flu cold cold: P = (1/2, 1/2, 0, 0) (flu, cold, ulcer, gastritis)
    #   extras q - p: flu -1/4, cold -1/4, ulcer 1/4, gastritis 1/4
    #   respiratory (level 1): pos 0, neg 1/2 -> min 0; digestive: pos 1/2, neg 0 -> 0
    #   * (level 2): children respiratory -1/2, digestive +1/2 -> min(1/2, 1/2) = 1/2, x 2/2 -> D = 1/2
    # class 1 = ulcer ulcer gastritis gastritis: symmetric, D = 1/2
    # with a mixed class (flu, ulcer / cold, gastritis): P = (1/2, 0, 1/2, 0):
    #   respiratory: flu -1/4, cold +1/4 -> min = 1/4, x 1/2 = 1/8; digestive likewise 1/8;
    #   *: respiratory 0, digestive 0 -> 0.  D = 1/4
    h = flu_hierarchy()
    t = table([0] * 4 + [1] * 4, ["flu", "flu", "cold", "cold", "ulcer", "ulcer", "gastritis", "gastritis"],
              hierarchy=h)
    out = run(TCloseness(), t, t=0.5, distance="hierarchical")
    assert out["t-closeness"] == pytest.approx(0.5) and out["t-closeness.holds"] == 1
    assert holds(TCloseness(), t, t=0.49, distance="hierarchical") == [False, False]
    mixed = table([0] * 4 + [1] * 4, ["flu", "flu", "ulcer", "ulcer", "cold", "cold", "gastritis", "gastritis"],
                  hierarchy=h)
    assert run(TCloseness(), mixed, t=0.25, distance="hierarchical")["t-closeness"] == pytest.approx(0.25)
    assert holds(TCloseness(), mixed, t=0.25, distance="hierarchical") == [True, True]
    with pytest.raises(InputError, match="needs a hierarchy"):
        run(TCloseness(), table([0, 0], ["flu", "cold"]), t=0.2, distance="hierarchical")


def test_t_closeness_with_suppression_keeps_classes_close_to_what_is_published():
    # whole table a 6/10, b 4/10. class 0 = a a a a a (D = 0.4), class 1 = a b (0.1), class 2 = b b b (0.6).
    # t = 0.45: class 2 fails against the whole table; without it Q = (6/7, 1/7): class 0
    # D = 1/7 = 0.143, class 1 D = |1/2 - 6/7| = 0.357: both kept, and the published pair holds.
    t = table([0] * 5 + [1] * 2 + [2] * 3, list("aaaaa") + list("ab") + list("bbb"))
    assert holds(TCloseness(), t, t=0.45) == [True, True, False]
    kept = table([0] * 5 + [1] * 2, list("aaaaa") + list("ab"))
    assert run(TCloseness(), kept, t=0.45)["t-closeness.holds"] == 1
    # a second round: t = 0.3 drops class 2 (0.6) and class 0 (0.4) first; then Q = class 1: D = 0
    assert holds(TCloseness(), t, t=0.3) == [False, True, False]


# -- re-identification risk -------------------------------------------------------------------


def test_average_and_highest_risk_by_hand():
    # classes of 1, 2, 3, 4 records: n = 10, C = 4 -> average risk 4/10 = 0.4; highest 1/1
    t = table([0] + [1] * 2 + [2] * 3 + [3] * 4, ["x"] * 10)
    out = run(AverageRisk(), t, max=0.4)
    assert out["average-risk"] == pytest.approx(0.4) and out["average-risk.holds"] == 1
    assert holds(AverageRisk(), t, max=0.4) == [True] * 4
    # max = 0.35: suppress the smallest class: 3 classes / 9 records = 0.333 <= 0.35
    assert run(AverageRisk(), t, max=0.35)["average-risk.holds"] == 0
    assert holds(AverageRisk(), t, max=0.35) == [False, True, True, True]
    # max = 0.3: 1 suppressed -> 3/9 = 0.333 > 0.3; 2 suppressed -> 2/7 = 0.286 <= 0.3
    assert holds(AverageRisk(), t, max=0.3) == [False, False, True, True]
    assert smallest_first(np.array([3, 1, 1]), 0.5).tolist() == [True, False, True]   # ties: lowest first
    out = run(HighestRisk(), t, max=1 / 3)    # 1/3: classes of 1 and 2 records are at risk
    assert out["highest-risk"] == 1.0 and out["highest-risk.violating_classes"] == 2
    assert out["highest-risk.records_at_risk"] == 3 and out["highest-risk.holds"] == 0
    assert holds(HighestRisk(), t, max=1 / 3) == [False, False, True, True]     # 3 * (1/3) = 1: holds
    assert holds(HighestRisk(), t, max=0.25) == [False, False, False, True]


def test_average_risk_of_everything_suppressed_holds_as_in_arx():
    t = table([0, 1], ["x", "y"])
    gone = t.replace(data=t.data.set_column(3, "_class", pa.array([None, None], pa.int64())))
    out = run(AverageRisk(), gone, max=0.1)
    assert out["average-risk.holds"] == 1 and out["average-risk.records"] == 0


# -- delta-presence and k-map -----------------------------------------------------------------


def test_population_cores_by_hand():
    # sample classes A: 2 records, B: 1; population A: 4, B: 5, C: 3
    sample = {("A",): 2, ("B",): 1}
    pop = {("A",): 4, ("B",): 5, ("C",): 3}
    assert presence(sample, pop) == {("A",): (2, 4, 0.5), ("B",): (1, 5, 0.2)}
    assert delta_presence_holds(sample, pop, 0.0, 0.5) == {("A",): True, ("B",): True}
    assert delta_presence_holds(sample, pop, 0.25, 0.5) == {("A",): True, ("B",): False}
    assert population_map(sample, pop, 5) == {("A",): False, ("B",): True}
    with pytest.raises(InputError, match="must be a sample"):
        presence({("D",): 1}, pop)


def test_derived_k_follows_arx():
    # lambda = 0.1 * 10 = 1; Poisson(1) cdf: .368 .736 .920 .981 .9963 -> reaches 0.99 at 4,
    # counter = 5, ARX returns counter + 1 = 6
    assert derived_k(10, 0.1, 0.01, "poisson") == 6
    # zero-truncated: p(i)/(1 - e^-1): .582 .291 .097 .024 .0049 -> cum .582 .873 .970 .994: counter 5
    assert derived_k(10, 0.1, 0.01, "zero-truncated-poisson") == 5
    assert derived_k(3, 1.0, 0.01, "poisson") == 3          # never above k


class _Ctx:
    """make_context() plus ctx.table(name) for the population."""

    def __init__(self, tables):
        self.base = make_context()
        self.tables = tables

    def __getattr__(self, name):
        return getattr(self.base, name)

    def table(self, name):
        return self.tables[name]


def test_delta_presence_and_k_map_on_tables():
    # sample (published, age generalized to decades by a hierarchy): [20-29] x2, [30-39] x1
    # population ages: 21 25 27 29 (-> [20-29] 4), 31 33 (-> [30-39] 2), 45 (-> [40-49] 1)
    h = Hierarchy.from_levels("age", [[str(a) for a in (21, 25, 27, 29, 31, 33, 45)],
                                      ["[20-29]"] * 4 + ["[30-39]"] * 2 + ["[40-49]"], ["*"] * 7])
    from anonflow.api import mark_generalized
    typing = mark_generalized(Typing((Attribute("age", "quasi", "continuous"),)), "age", "hierarchy")
    sample = TypedTable(pa.table({"_row": pa.array([0, 1, 2], pa.int64()),
                                  "age": ["[20-29]", "[20-29]", "[30-39]"], "_class": pa.array([0, 0, 1])}),
                        typing, {}, {"age": h})
    population = typed_table({"age": [21, 25, 27, 29, 31, 33, 45]}, quasi={"age": "continuous"})
    ctx = _Ctx({"pop": population})
    out = run(DeltaPresence(), sample, ctx, delta_max=0.5, population="pop")
    # [20-29]: 2/4 = 0.5, [30-39]: 1/2 = 0.5
    assert out["delta-presence"] == 0.5 and out["delta-presence.min"] == 0.5 and out["delta-presence.holds"] == 1
    assert run(DeltaPresence(), sample, ctx, delta_max=0.4, population="pop")["delta-presence.violating_classes"] == 2
    out = run(KMap(), sample, ctx, k=3, population="pop")    # smallest population class: 2
    assert out["k-map"] == 2 and out["k-map.violating_classes"] == 1 and out["k-map.holds"] == 0
    with pytest.raises(InputError, match="needs a population table"):
        run(DeltaPresence(), sample, ctx, delta_max=0.5)
    with pytest.raises(InputError, match="gives no population counts"):
        KMap().partition_holds(partition(table([0], ["x"])), validate_params(KMap.params, {"k": 2, "population": "p"}))
    # estimator: k' = 6 for k = 10 at 10 %: classes of 6 and 7 hold, 5 does not
    t = table([0] * 6 + [1] * 7 + [2] * 5, ["x"] * 18)
    p = {"k": 10, "estimator": "poisson", "sampling_fraction": 0.1}
    assert holds(KMap(), t, **p) == [True, True, False]
    out = run(KMap(), t, **p)
    assert out["k-map.derived_k"] == 6 and out["k-map.holds"] == 0 and out["k-map"] == 5


def test_population_models_partition_holds_from_the_population_counts():
    # three classes of 2, 1, 3 sample records with 4, 1, 30 population records
    t = table([0, 0, 1, 2, 2, 2], ["x"] * 6)
    part = partition(t)
    part = Partition(part.classes, part.sizes, t, population=lambda: np.array([4, 1, 30]))
    dp = validate_params(DeltaPresence.params, {"delta_min": 0.1, "delta_max": 0.5, "population": "p"})
    # shares 0.5, 1.0, 0.1: the second is above delta_max
    assert DeltaPresence().partition_holds(part, dp).tolist() == [True, False, True]
    dp = validate_params(DeltaPresence.params, {"delta_min": 0.2, "delta_max": 1.0, "population": "p"})
    assert DeltaPresence().partition_holds(part, dp).tolist() == [True, True, False]
    km = validate_params(KMap.params, {"k": 4, "population": "p"})
    assert KMap().partition_holds(part, km).tolist() == [True, False, True]
    with pytest.raises(InputError, match="needs a population table"):
        DeltaPresence().partition_holds(partition(t), validate_params(DeltaPresence.params, {"delta_max": 0.5}))
    # delta-presence is not monotone (a coarser class takes in population-only records)
    assert DeltaPresence.monotone is False and KMap.monotone and KMap.monotone_with_suppression


# -- compute and partition_holds agree on random partitions ------------------------------------


SA_VALUES = ["flu", "cold", "ulcer", "gastritis"]


def random_table(rng, n, classes, stype="nominal", skew=1.0):
    cls = np.sort(rng.integers(0, classes, n))
    cls = np.unique(cls, return_inverse=True)[1].reshape(-1)
    probs = rng.dirichlet(np.full(len(SA_VALUES), skew), size=cls.max() + 1)
    vals = [SA_VALUES[rng.choice(len(SA_VALUES), p=probs[c])] for c in cls]
    if stype == "continuous":
        vals = [SA_VALUES.index(v) * 10 + 5 for v in vals]
    return table(cls.tolist(), vals, stype=stype, hierarchy=flu_hierarchy() if stype == "nominal" else None)


CASES = [
    (EntropyLDiversity(), {"l": 2.2}, "nominal"),
    (RecursiveCLDiversity(), {"c": 2.0, "l": 2}, "nominal"),
    (TCloseness(), {"t": 0.3}, "nominal"),
    (TCloseness(), {"t": 0.2, "distance": "ordered"}, "continuous"),
    (TCloseness(), {"t": 0.3, "distance": "hierarchical"}, "nominal"),
    (HighestRisk(), {"max": 0.2}, "nominal"),
    (AverageRisk(), {"max": 0.15}, "nominal"),
]


@pytest.mark.parametrize("metric, params, stype", CASES, ids=lambda x: getattr(x, "name", str(x)))
def test_compute_and_partition_holds_agree_on_random_partitions(metric, params, stype):
    rng = np.random.default_rng(17)
    agreed_true = agreed_false = 0
    for trial in range(25):
        t = random_table(rng, int(rng.integers(20, 120)), int(rng.integers(2, 15)), stype)
        full = validate_params(metric.params, params)
        ok = np.asarray(metric.partition_holds(partition(t), full))
        out = run(metric, t, **params)
        assert bool(out[f"{metric.name}.holds"]) == bool(ok.all()), (trial, out, ok)
        if f"{metric.name}.violating_classes" in out and not isinstance(metric, TCloseness):
            assert out[f"{metric.name}.violating_classes"] == (~ok).sum()
        agreed_true += bool(ok.all())
        agreed_false += not ok.all()
        # what the lattice publishes (the classes that hold) satisfies the model by compute
        if ok.any():
            keep = ok[np.asarray(t.data.column("_class").to_pylist())]
            published = t.replace(data=t.data.filter(pa.array(keep)))
            assert run(metric, published, **params)[f"{metric.name}.holds"] == 1, trial
        # a weighted partition (a frequency table) gives the same answer
        classes = np.asarray(t.data.column("_class").to_pylist())
        svals = t.data.column("s").to_pylist()
        keys = sorted(set(zip(classes.tolist(), svals)), key=str)
        w = np.array([sum(1 for c, s in zip(classes.tolist(), svals) if (c, s) == k) for k in keys], dtype=np.float64)
        ft = table([k[0] for k in keys], [k[1] for k in keys], stype=stype, hierarchy=t.hierarchies.get("s"))
        ft = ft.replace(typing=t.typing)
        wpart = Partition(np.array([k[0] for k in keys]), np.bincount([k[0] for k in keys], weights=w).astype(np.int64),
                          ft, weights=w)
        assert np.array_equal(np.asarray(metric.partition_holds(wpart, full)), ok), trial
    assert agreed_true and agreed_false        # the thresholds cut through the cases


# -- monotonicity flags ---------------------------------------------------------------------


@pytest.mark.parametrize("metric, params, stype", CASES, ids=lambda x: getattr(x, "name", str(x)))
def test_monotone_merging_satisfying_classes_keeps_the_model(metric, params, stype):
    """monotone = True: a node whose classes all hold stays so when classes merge (the lattice's
    generalization), against the same whole table."""
    assert metric.monotone
    rng = np.random.default_rng(5)
    full = validate_params(metric.params, params)
    checked = 0
    for _ in range(60):
        t = random_table(rng, int(rng.integers(30, 120)), int(rng.integers(2, 10)), stype, skew=3.0)
        if not np.asarray(metric.partition_holds(partition(t), full)).all():
            continue
        classes = np.asarray(t.data.column("_class").to_pylist())
        merge = rng.integers(0, max(1, classes.max() // 2 + 1), classes.max() + 1)
        merged = np.unique(merge[classes], return_inverse=True)[1].reshape(-1)
        coarse = Partition(merged, np.bincount(merged), t)
        assert np.asarray(metric.partition_holds(coarse, full)).all()
        checked += 1
    assert checked >= 3


def test_not_monotone_with_suppression_counterexamples():
    """A class containing a satisfying class may fail: the flag is false for the diversity models
    and t-closeness."""
    # {a, b} holds entropy l = 2 and recursive (c = 2, l = 2): 1 < 2 * 1; {a, b, a, a} fails both
    # (H = 0.562 < ln 2; 3 < 2 * 1 is false)
    small, big = table([0, 0], ["a", "b"]), table([0] * 4, ["a", "b", "a", "a"])
    for metric, params in ((EntropyLDiversity(), {"l": 2}), (RecursiveCLDiversity(), {"c": 2, "l": 2})):
        assert not metric.monotone_with_suppression
        assert holds(metric, small, **params) == [True] and holds(metric, big, **params) == [False]
    # t-closeness, whole table a 2/4, b 2/4: class {a, b} is at 0; a class {a, b, a} containing
    # it, in a table (a, b, a | b, b): Q = (2/5, 3/5), P = (2/3, 1/3): D = 0.267 > 0.2
    assert not TCloseness.monotone_with_suppression
    assert holds(TCloseness(), table([0, 0, 1, 1], ["a", "b", "a", "b"]), t=0.2)[0]
    assert not holds(TCloseness(), table([0, 0, 0, 1, 1], ["a", "b", "a", "b", "b"]), t=0.2)[0]
    assert AverageRisk.monotone_with_suppression and HighestRisk.monotone_with_suppression


def test_average_risk_suppression_never_grows_along_generalization():
    """monotone_with_suppression for average-risk: a coarser node never suppresses more records."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        sizes = rng.integers(1, 8, int(rng.integers(2, 25)))
        mx = float(rng.uniform(0.1, 0.6))
        fine = sizes[~smallest_first(sizes, mx)].sum()
        merge = rng.integers(0, max(1, len(sizes) // 2), len(sizes))
        coarse_sizes = np.bincount(merge, weights=sizes)
        coarse_sizes = coarse_sizes[coarse_sizes > 0]
        assert coarse_sizes[~smallest_first(coarse_sizes, mx)].sum() <= fine


# -- agreement with pycanon on shipped workflows -----------------------------------------------


def _published(tmp_path_factory, workflow):
    """The published CSV of a shipped workflow, from its one run in this session."""
    from tests.support.shipped import shipped_run

    pd = pytest.importorskip("pandas")
    out = shipped_run(workflow, tmp_path_factory)["dir"]
    return pd.read_csv(next(out.glob("*.csv")), dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def arx_k5(tmp_path_factory):
    return _published(tmp_path_factory, "arx-adult-k5"), ["sex", "age", "race", "marital-status", "education",
                                                          "native-country", "workclass", "occupation"], "salary-class"


@pytest.fixture(scope="module")
def l_incognito(tmp_path_factory):
    df = _published(tmp_path_factory, "l-incognito-adult")
    import yaml

    spec = yaml.safe_load((ROOT / "workflows" / "l-incognito-adult.yaml").read_text())
    quasi = [c for c in _quasi_of(spec) if c in df.columns]
    return df, quasi, "occupation"


def _quasi_of(spec):
    for step in spec["steps"].values():
        if step.get("uses") == "typing":
            q = step["with"]["quasi"]
            return list(q) if isinstance(q, dict) else list(q)
    raise AssertionError("no typing step")


def _typed(df, quasi, sa):
    return typed_table({**{q: df[q].tolist() for q in quasi}, sa: df[sa].tolist()},
                       quasi={q: "nominal" for q in quasi}, sensitive={sa: "nominal"})


@pytest.mark.parametrize("which", ["arx_k5", "l_incognito"])
def test_agreement_with_pycanon_on_shipped_workflows(which, request):
    anonymity = pytest.importorskip("pycanon.anonymity")
    df, quasi, sa = request.getfixturevalue(which)
    t = _typed(df, quasi, sa)
    # entropy l-diversity: pycanon floors exp(min H) to an integer
    ours = run(EntropyLDiversity(), t, l=1)
    assert int(ours["entropy-l-diversity"] + 1e-9) == anonymity.entropy_l_diversity(df, quasi, [sa])
    # t-closeness with a text SA: pycanon uses the equal distance
    tc = run(TCloseness(), t, t=1.0)
    assert tc["t-closeness"] == pytest.approx(anonymity.t_closeness(df, quasi, [sa]), abs=1e-12)
    # distinct l (pycanon l_diversity) and the l the recursive model reads agree: a class with
    # fewer than l values is exactly pycanon's l_div < l
    l_div = anonymity.l_diversity(df, quasi, [sa])
    rec = run(RecursiveCLDiversity(), t, c=1e9, l=l_div + 1)
    assert rec["recursive-cl-diversity.short_classes"] >= 1
    assert run(RecursiveCLDiversity(), t, c=1e9, l=l_div)["recursive-cl-diversity.short_classes"] == 0
    # highest risk = 1 / k (pycanon k_anonymity)
    k = anonymity.k_anonymity(df, quasi)
    assert run(HighestRisk(), t, max=1.0)["highest-risk"] == pytest.approx(1 / k)
    # average risk = classes / records, counted from pycanon's classes
    from pycanon.anonymity.utils.aux_anonymity import get_equiv_class
    assert run(AverageRisk(), t, max=1.0)["average-risk"] == pytest.approx(len(get_equiv_class(df, quasi)) / len(df))


def test_ordered_t_closeness_agrees_with_pycanon_on_a_numeric_sensitive_attribute():
    anonymity = pytest.importorskip("pycanon.anonymity")
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(3)
    t = random_table(rng, 200, 12, "continuous")
    df = pd.DataFrame({"q": t.data.column("q").to_pylist(), "s": t.data.column("s").to_pylist()})
    assert run(TCloseness(), t, t=1.0, distance="ordered")["t-closeness"] == pytest.approx(
        anonymity.t_closeness(df, ["q"], ["s"]), abs=1e-12)


def test_recursive_cl_by_definition_and_pycanons_reading():
    """pycanon's recursive_c_l_diversity takes l = the distinct l-diversity (3 here) and sorts
    the counts *increasingly*: on one class with counts a 5, b 3, c 2 it reports
    c = floor(r_min / (sum from the l-th smallest on) + 1) = floor(2 / 5 + 1) = 1, whereas by
    the definition (and ARX) r_1 = 5 < c * r_3 = 2c needs c > 2.5: we follow the definition
    and record pycanon's reading here."""
    anonymity = pytest.importorskip("pycanon.anonymity")
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"q": ["x"] * 10, "s": list("aaaaabbbcc")})
    c, l = anonymity.recursive_c_l_diversity(df, ["q"], ["s"])
    assert (c, l) == (1, 3)
    t = table([0] * 10, list("aaaaabbbcc"))
    # by the definition with l = 3: tail = r_3 = 2, 5 < c 2 iff c > 2.5
    assert run(RecursiveCLDiversity(), t, c=2.5, l=3)["recursive-cl-diversity.holds"] == 0
    assert run(RecursiveCLDiversity(), t, c=2.6, l=3)["recursive-cl-diversity.holds"] == 1
    assert run(RecursiveCLDiversity(), t, c=2.6, l=3)["recursive-cl-diversity"] == 2.5
