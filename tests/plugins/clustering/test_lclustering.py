"""L-clustering (seed 001, SPEC section 5) and its loss metrics.

Hand examples first (one greedy run traced step by step, the published format, the metrics
on the kernel tests' hand numbers), then the fast paths against a plain reference
implementation that follows the paper record by record with the DS kernels, then
properties on samples of real Adult data: every output is distinct l-diverse (checked in
DuckDB SQL over the published values), runs are deterministic, bad input is one line.
"""

from __future__ import annotations

import functools
import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from anonflow import registry as plugins
from anonflow.errors import InputError
from anonflow_std.common.ds_distance import ds_classes, ds_record_class
from anonflow_std.common.generalized import Domain, Generalized, relative_loss
from anonflow.schema import Attribute
from anonflow.table import table_hash
from anonflow.testing import make_context, typed_table
from anonflow_std.clustering import lclustering as lc
from anonflow_std.clustering.lclustering import LClustering, l_clustering
from anonflow_std.common.qi_space import infer_resolution
from anonflow_std.utility.generalized_loss import GeneralizationLoss, RelativeLoss

from tests.support import data
from tests.support.helpers import WORKFLOWS, write

ADULT_QI = ["age", "sex", "race", "marital-status", "education", "native-country", "workclass", "income"]
NO_PARAMS = {"weights": None, "resolution": None}


def table(columns, quasi, sensitive="dis", ordinal=None):
    t = typed_table(columns, quasi=quasi, sensitive={sensitive: "nominal"} if sensitive else None)
    if ordinal:
        attrs = [Attribute(a.name, a.role, a.type, order=tuple(ordinal[a.name])) if a.name in ordinal else a
                 for a in t.typing.attributes]
        t = t.replace(typing=t.typing.replace(attrs))
    return t


def run(t, l, seed=0, **params):
    algo = LClustering()
    p = {"l": l, **NO_PARAMS, **params}
    algo.check(p, table=t)
    out = algo.run(t, p, make_context(seed=seed))
    return out.replace(claims=algo.claims(p))


def metric(m, original, anonymized, **params):
    return m.compute(original, anonymized, {**NO_PARAMS, **params}, make_context())


# -- one greedy run by hand -----------------------------------------------------------------
#
# age (ordered, res 1, domain [30, 52]), country (unordered: 0 = A, 1 = B, 2 = C), S, l = 2:
#   r0 = (30, A, s1)  r1 = (31, A, s2)  r2 = (50, B, s1)  r3 = (30, A, s1)  r4 = (52, C, s2)  r5 = (51, B, s3)
# drawn in the order r0, r2, r3 (then the leftovers in the order given).
HAND_VALUES = np.array([[30.0], [31.0], [50.0], [30.0], [52.0], [51.0]])
HAND_CODES = np.array([[0], [0], [1], [0], [2], [1]])
HAND_S = np.array([0, 1, 0, 0, 1, 2])


def hand_domain():
    return Domain(res=[1.0], dmin=[30.0], dmax=[52.0], card=[3], ordered_names=("age",),
                     unordered_names=("country",))


def test_one_greedy_run_by_hand():
    dom = hand_domain()
    R = Generalized.from_records(HAND_VALUES, HAND_CODES, dom)
    # Class 1 starts at r0; candidates have S != s1: r1, r4, r5.
    #   DS(r1, {r0}): t* = ([30-31], {A}): L(r1) = 2/1, |G| L(t_g) = 1 * 2/1       -> 4
    #   DS(r4, {r0}): t* = ([30-52], {A,C}): (23 + 2) + (23 + 2)                    -> 50
    #   DS(r5, {r0}): t* = ([30-51], {A,B}): (22 + 2) + (22 + 2)                    -> 48
    # Q is empty, so r1 joins: G0 = {r0, r1} = ([30-31], {A}).
    assert ds_record_class(R[[1, 4, 5]], R[[0]], dom).tolist() == [4.0, 50.0, 48.0]
    g0 = Generalized.from_labels(R[[0, 1]], [0, 0])
    # Class 2 starts at r2 = (50, B, s1); candidates r4 (DS 10), r5 (DS 4);
    #   DS(G0, {r2}): t* = ([30-50], {A,B}): 2 * (21/2 + 2/1) + 1 * (21 + 2) = 48 >= 4: r5 joins.
    assert ds_record_class(R[[4, 5]], R[[2]], dom).tolist() == [10.0, 4.0]
    assert ds_classes(g0, R[[2]], dom)[0] == 48.0
    g1 = Generalized.from_labels(R[[2, 5]], [0, 0])
    # D = {r3 (s1), r4 (s2)}: still 2 distinct values. Class 3 starts at r3 = (30, A, s1):
    #   the only candidate r4: DS = (23 + 2) * 2 = 50;
    #   DS(G0, {r3}) = 2 * 0 + 1 * L(r3, [30-31] {A}) = 2;  DS(G1, {r3}) = 2*(22/2+2) + (22+2) = 50
    #   50 > 2: G0 is merged into the new class: {r3, r0, r1} = ([30-31], {A}), in G0's slot.
    assert ds_record_class(R[[4]], R[[3]], dom)[0] == 50.0
    assert ds_classes(Generalized(np.vstack([g0.lo, g1.lo]), np.vstack([g0.hi, g1.hi]),
                                  np.concatenate([g0.bits, g1.bits]), [2, 2]), R[[3]], dom).tolist() == [2.0, 50.0]
    # D = {r4}: one distinct value < l, so r4 is a leftover and joins its nearest class:
    #   DS(r4, {r0,r1,r3}) = (23 + 2) + 3 * (23/2 + 2/1) = 65.5;  DS(r4, G1) = (3 + 2) + 2 * (3/2 + 2) = 12
    g0m = Generalized.from_labels(R[[0, 1, 3]], [0, 0, 0])
    assert ds_record_class(R[[4]], g0m, dom)[0] == 65.5
    assert ds_record_class(R[[4]], g1, dom)[0] == 12.0
    labels, stats = l_clustering(HAND_VALUES, HAND_CODES, HAND_S, 2, dom, np.random.default_rng(0),
                                 order=np.array([0, 2, 3, 1, 4, 5]))
    assert labels.tolist() == [0, 0, 1, 0, 1, 1]
    assert stats["classes"] == 2 and stats["merges"] == 1 and stats["leftovers"] == 1
    # published: ([30-31], {A}) and ([50-52], {B, C}); L = 3 * 2 + 3 * (3 + 2) = 21,
    # L(D, D_c) = 6 * (23 + 3) = 156
    reps = Generalized.from_labels(R, labels)
    assert relative_loss(R, reps.expand(labels), dom) == pytest.approx(21 / 156)


# -- the plugin: published format -------------------------------------------------------------
#
# r0 = (30, China, a), r1 = (32, China, b), r2 = (60, India, a), r3 = (61, Japan, b), l = 2:
# from any start the classes are {r0, r1} and {r2, r3} (DS 6 and 8 against 62 and more).
SMALL = {"age": [30, 32, 60, 61], "country": ["China", "China", "India", "Japan"], "dis": ["a", "b", "a", "b"]}
SMALL_QI = {"age": "continuous", "country": "nominal"}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_published_values_by_hand(seed):
    t = table(SMALL, SMALL_QI)
    out = run(t, 2, seed=seed)
    d = out.data
    assert d.column("age").to_pylist() == ["[30-32]", "[30-32]", "[60-61]", "[60-61]"]
    assert d.column("country").to_pylist() == ["China", "China", "{India,Japan}", "{India,Japan}"]
    assert d.column("age_lo").to_pylist() == [30.0, 30.0, 60.0, 60.0]
    assert d.column("age_hi").to_pylist() == [32.0, 32.0, 61.0, 61.0]
    assert d.column("country_set").to_pylist() == [["China"], ["China"], ["India", "Japan"], ["India", "Japan"]]
    assert d.column("dis").to_pylist() == SMALL["dis"]
    assert d.column_names == ["_row", "age", "age_lo", "age_hi", "country", "country_set", "dis", "_class"]
    assert d.schema.field("age").type == pa.string() and d.schema.field("country_set").type == pa.list_(pa.string())
    # the QI roles stay on the readable columns; the structured ones say what they structure
    assert out.typing.quasi == ["age", "country"] and out.typing.sensitive == ["dis"]
    assert out.typing.get("age").options["generalized"] == {"kind": "interval", "lo": "age_lo", "hi": "age_hi",
                                                            "res": 1.0}
    assert out.typing.get("country_set").role == "insensitive"
    assert out.typing.get("country_set").options == {"structured": "country"}
    assert out.claims == {"l-diversity": {"l": 2}}
    # L = 3 + 3 + (2 + 2) + (2 + 2) = 14; L(D, D_c) = 4 * (32 + 3) = 140
    assert metric(GeneralizationLoss(), t, out)["generalization-loss"] == 14.0
    assert metric(RelativeLoss(), t, out)["relative-loss"] == pytest.approx(0.1)


def test_ordinal_and_semantic_attributes():
    cols = {"edu": ["HS", "BSc", "PhD", "MSc"], "zip": ["12555", "12533", "12561", "12561"], "dis": ["a", "b", "a", "b"]}
    t = table(cols, {"edu": "ordinal", "zip": "semantic"}, ordinal={"edu": ["HS", "BSc", "MSc", "PhD"]})
    out = run(t, 2)
    d = out.data
    # edu ranks HS 0, BSc 1, MSc 2, PhD 3: {r0, r1} and {r2, r3} (DS 6 + 2 for the zips, vs 12 and more)
    assert d.column("edu").to_pylist() == ["[HS..BSc]", "[HS..BSc]", "[MSc..PhD]", "[MSc..PhD]"]
    assert d.column("edu_lo").to_pylist() == ["HS", "HS", "MSc", "MSc"]
    assert d.column("edu_hi").to_pylist() == ["BSc", "BSc", "PhD", "PhD"]
    assert d.column("zip").to_pylist() == ["{12533,12555}", "{12533,12555}", "12561", "12561"]
    assert d.column("zip_set").to_pylist()[0] == ["12533", "12555"]
    # edu: 2/1 each; zip: 2/1 for r0, r1 and unchanged for r2, r3 -> L = 4 * 2 + 2 * 2 = 12;
    # D_c: edu [HS..PhD] 4/1, zip 3 codes -> 4 * 7 = 28
    assert metric(RelativeLoss(), t, out)["relative-loss"] == pytest.approx(12 / 28)


# -- metrics on the kernel tests' hand numbers ------------------------------------------------
#
# tests/plugins/common/test_generalized.py: t0 = (21, China), t1 = (23, India), t2 = (22, China),
# t3 = (28, Japan); classes {t0, t2} -> ([21-22], {China}), {t1, t3} -> ([23-28], {India,Japan}):
# L(D, D*) = 2 + 8 + 2 + 8 = 20; over the observed domain [21, 28] and 3 countries,
# L(D, D_c) = 4 * (8 + 3) = 44.
KERNEL = {"age": [21, 23, 22, 28], "country": ["China", "India", "China", "Japan"], "dis": ["x", "y", "z", "x"]}


def kernel_case():
    t = table(KERNEL, SMALL_QI)
    return t, lc.publish_generalized(t, lc.qi_space(t), np.array([0, 1, 0, 1]))


def test_metrics_by_hand_from_the_structured_columns():
    t, out = kernel_case()
    g = metric(GeneralizationLoss(), t, out)
    assert g["generalization-loss"] == 20.0 and g["generalization-loss.full"] == 44.0
    assert g["generalization-loss.age"] == 16.0 and g["generalization-loss.country"] == 4.0
    assert g["generalization-loss.per_record"] == 5.0 and g["generalization-loss.suppressed"] == 0.0
    r = metric(RelativeLoss(), t, out)
    assert r["relative-loss"] == pytest.approx(20 / 44) and r["relative-loss.percent"] == pytest.approx(2000 / 44)
    # weights (Def. 9): age 2, country 0.5 -> 2 * 16 + 0.5 * 4 = 34 of 2 * 32 + 0.5 * 12 = 70
    w = {"age": 2, "country": 0.5}
    assert metric(GeneralizationLoss(), t, out, weights=w)["generalization-loss"] == 34.0
    assert metric(RelativeLoss(), t, out, weights=w)["relative-loss"] == pytest.approx(34 / 70)
    # records in any order: aligned on _row
    shuffled = out.replace(data=out.data.take([3, 1, 0, 2]))
    assert metric(GeneralizationLoss(), t, shuffled)["generalization-loss"] == 20.0


def test_metrics_read_other_generalizations_by_the_values_they_stand_for():
    t, out = kernel_case()
    # without structured columns (e.g. a hierarchy-generalized table) a published value stands
    # for the original values of the records that carry it: the same 20 here
    plain = out.replace(data=out.data.drop_columns(["age_lo", "age_hi", "country_set"]),
                        typing=t.typing)
    assert metric(GeneralizationLoss(), t, plain)["generalization-loss"] == 20.0
    # full-domain generalization: every record '*' on both QIs is D_c itself -> RL = 1
    star = t.replace(data=t.data.set_column(1, "age", pa.array(["*"] * 4)).set_column(2, "country",
                                                                                    pa.array(["*"] * 4)))
    assert metric(RelativeLoss(), t, star)["relative-loss"] == 1.0
    # the original itself loses nothing
    assert metric(RelativeLoss(), t, t)["relative-loss"] == 0.0


def test_suppressed_records_count_as_generalized_to_the_whole_domain():
    t, out = kernel_case()
    # t3 = (28, Japan) suppressed: its loss 8 becomes L(t3, D_c) = 8 + 3 = 11 -> 23
    kept = out.replace(data=out.data.filter(pa.array([True, True, True, False])))
    g = metric(GeneralizationLoss(), t, kept)
    assert g["generalization-loss"] == 23.0 and g["generalization-loss.suppressed"] == 1.0


def test_metric_rejects_values_that_do_not_generalize_the_original():
    t, out = kernel_case()
    bad = out.data.set_column(out.data.column_names.index("age_hi"), "age_hi", pa.array([22.0, 28.0, 22.0, 27.0]))
    with pytest.raises(InputError, match="'age' for record _row = 3 does not generalize"):
        metric(RelativeLoss(), t, out.replace(data=bad))


def test_resolution_of_real_valued_attributes():
    assert infer_resolution(np.array([1.0, 7.0, 30.0])) == 1.0
    assert infer_resolution(np.array([1.5, 2.25, 3.0])) == 0.01
    assert infer_resolution(np.array([0.1, 0.7])) == 0.1
    assert infer_resolution(np.array([0.0, np.pi, 4.0])) == pytest.approx(4.0 - np.pi)  # no decimal step
    # [1.5-2.25] at resolution 0.01: (0.75 + 0.01) / 0.01 = 76 per record
    t = table({"x": [1.5, 2.25], "dis": ["a", "b"]}, {"x": "continuous"})
    out = run(t, 2)
    assert out.data.column("x").to_pylist() == ["[1.5-2.25]"] * 2
    assert out.typing.get("x").options["generalized"]["res"] == 0.01
    g = metric(GeneralizationLoss(), t, out)
    assert g["generalization-loss"] == pytest.approx(152.0) and g["generalization-loss.full"] == pytest.approx(152.0)
    # a declared resolution replaces the inferred one: (0.75 + 0.25) / 0.25 = 4 per record
    assert metric(GeneralizationLoss(), t, out, resolution={"x": 0.25})["generalization-loss"] == pytest.approx(8.0)
    out2 = run(t, 2, resolution={"x": 0.25})
    assert out2.typing.get("x").options["generalized"]["res"] == 0.25
    assert metric(GeneralizationLoss(), t, out2)["generalization-loss"] == pytest.approx(8.0)


# -- the fast paths against the paper, record by record ---------------------------------------


def reference(values, codes, s, l, dom, order, priority):
    """SPEC section 5 literally: every step evaluates DS over all remaining records and all
    classes with the kernels; the same tie rules as the plugin (rounded DS; tuple priority;
    the S value with the most unused records of the tuple; lowest row; earliest class)."""
    R = Generalized.from_records(values, codes, dom)
    key = np.concatenate([values, codes.astype(float)], axis=1)
    _, inv = np.unique(key, axis=0, return_inverse=True)
    prio = np.asarray(priority)[inv.reshape(-1)]
    n = len(s)
    used = np.zeros(n, bool)
    labels = np.full(n, -1)
    reps: list[Generalized] = []
    members: list[list[int]] = []

    def distinct():
        return len(set(s[~used].tolist()))

    def stack():
        return Generalized(np.vstack([g.lo for g in reps]), np.vstack([g.hi for g in reps]),
                           np.concatenate([g.bits for g in reps]), [g.counts[0] for g in reps])

    oi = 0
    while distinct() >= l:
        while used[order[oi]]:
            oi += 1
        r = order[oi]
        used[r] = True
        G, mem = R[[r]], [r]
        merged = -1
        while G.counts[0] < l:
            cand = np.flatnonzero(~used & ~np.isin(s, s[mem]))
            ds = np.round(ds_record_class(R[cand], G, dom), lc.DIGITS)
            best = ds.min()
            if reps:
                dq = np.round(ds_classes(stack(), G, dom), lc.DIGITS)
                k = int(np.argmin(dq))
                if dq[k] < best:  # otherwise the record (ties included)
                    both = Generalized(np.vstack([G.lo, reps[k].lo]), np.vstack([G.hi, reps[k].hi]),
                                       np.concatenate([G.bits, reps[k].bits]), [G.counts[0], reps[k].counts[0]])
                    G, mem, merged = Generalized.from_labels(both, [0, 0]), mem + members[k], k
                    break
            tied = cand[ds == best]
            tied = tied[prio[tied] == prio[tied].min()]
            avail = {v: int(np.sum(~used & (prio == prio[tied[0]]) & (s == v))) for v in set(s[tied].tolist())}
            sv = min(avail, key=lambda v: (-avail[v], v))
            pick = int(tied[s[tied] == sv].min())
            used[pick] = True
            mem.append(pick)
            G = Generalized.from_labels(R[mem], [0] * len(mem))
        if merged >= 0:
            reps[merged], members[merged] = G, mem
        else:
            reps.append(G)
            members.append(mem)
    for r in order[oi:]:
        if used[r]:
            continue
        used[r] = True
        dq = np.round(ds_record_class(R[[r]], stack(), dom), lc.DIGITS)
        k = int(np.argmin(dq))
        members[k] = members[k] + [r]
        reps[k] = Generalized.from_labels(R[members[k]], [0] * len(members[k]))
    for k, mem in enumerate(members):
        labels[mem] = k
    return labels


@functools.lru_cache(maxsize=None)
def adult():
    return data.adult_full()


def adult_sample(n, seed, d=8, qi=None):
    rows = np.sort(np.random.default_rng(seed).choice(45222, size=n, replace=False))
    data = adult().take(rows)
    qi = qi or ADULT_QI[:d]
    cols = {c: data.column(c) for c in qi + ["occupation"]}
    return table(cols, {c: ("continuous" if c == "age" else "nominal") for c in qi}, sensitive="occupation")


@pytest.mark.parametrize("n,d,l,seed,prune", [(150, 2, 2, 1, False), (200, 4, 3, 2, True), (250, 8, 2, 3, True),
                                              (300, 8, 4, 4, True), (300, 5, 7, 5, True), (120, 8, 12, 6, False)])
def test_fast_paths_match_the_paper_record_by_record(monkeypatch, n, d, l, seed, prune):
    """Distinct tuples, per-attribute tables, the DS = 0 shortcut and the class lower bound
    give exactly the greedy choices of the literal algorithm."""
    if prune:
        monkeypatch.setattr(lc._Classes, "MIN_PRUNE", 0)
        monkeypatch.setattr(lc, "COMPACT_MIN", 0)
    t = adult_sample(n, seed, d)
    space = lc.qi_space(t)
    s = lc.sensitive_codes(t, "occupation", "test")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    U = len(np.unique(np.concatenate([space.values, space.codes], axis=1), axis=0))
    priority = rng.permutation(U)
    got, _ = l_clustering(space.values, space.codes, s, l, space.domain, rng, order=order, priority=priority)
    want = reference(space.values, space.codes, s, l, space.domain, order, priority)
    assert got.tolist() == want.tolist()


def test_record_tables_equal_the_kernel():
    t = adult_sample(2000, 7)
    space = lc.qi_space(t)
    R = space.records()
    rds = lc._RecordDS(space.values, space.codes, space.domain)
    rng = np.random.default_rng(0)
    out, tmp = np.empty(len(R)), np.empty(len(R))
    for size in (1, 2, 3, 5, 11):
        G = Generalized.from_labels(R[rng.choice(len(R), size, replace=False)], [0] * size)
        assert np.allclose(rds(G, out, tmp), ds_record_class(R, G, space.domain), rtol=1e-12, atol=1e-12)


def test_zero_weights_change_no_choice():
    """An attribute of weight 0 changes no distance: the classes are those of the run without
    it, and its published value still covers the class."""
    t = adult_sample(600, 8, d=3)
    w = run(t, 3, seed=5, weights={"sex": 0})
    t2 = adult_sample(600, 8, qi=["age", "race"])
    without = run(t2, 3, seed=5)
    assert w.classes().tolist() == without.classes().tolist()
    assert metric(RelativeLoss(), t, w, weights={"sex": 0})["relative-loss"] == pytest.approx(
        metric(RelativeLoss(), t2, without)["relative-loss"])
    assert metric(GeneralizationLoss(), t, w)["generalization-loss.sex"] > 0


# -- properties on real data ---------------------------------------------------------------------


def distinct_l(out, l):
    """Distinct l-diversity in DuckDB SQL over the published values (not the class ids)."""
    group = ", ".join(f'"{q}"' for q in out.typing.quasi)
    row = make_context().sql(
        f"SELECT min(c) AS worst, count(*) FILTER (WHERE c < ?) AS bad FROM "
        f"(SELECT count(DISTINCT occupation) AS c FROM published GROUP BY {group})",
        [l], published=out.data).to_pylist()[0]
    return row["worst"], row["bad"]


@pytest.mark.parametrize("l", range(2, 13))
def test_every_output_is_distinct_l_diverse_on_adult_samples(l):
    rng = np.random.default_rng(100 + l)
    n, d = int(rng.integers(1000, 3001)), int(rng.integers(2, 9))
    out = run(adult_sample(n, int(rng.integers(1 << 30)), d), l, seed=l)
    worst, bad = distinct_l(out, l)
    assert bad == 0 and worst >= l
    assert np.bincount(out.classes()).min() >= l
    # the l-diversity privacy check plugin agrees with the SQL above (a missing plugin fails)
    check = plugins.get_registry().get("metric", "l-diversity").obj
    for by in ("values", "class"):
        res = check.compute(None, out, {"l": None, "by": by, "sensitive": None}, make_context())
        assert res["l-diversity.holds"] == 1.0 and res["l-diversity"] >= l


def test_same_seed_same_output_other_seed_other_classes():
    t = adult_sample(1500, 11, d=5)
    a, b, c = run(t, 4, seed=1), run(t, 4, seed=1), run(t, 4, seed=2)
    assert table_hash(a.data) == table_hash(b.data)
    assert table_hash(a.data) != table_hash(c.data)
    assert np.array_equal(a.rows(), t.rows())


def test_relative_loss_grows_with_l_on_adult():
    t = adult_sample(3000, 12, d=5)
    rl = [metric(RelativeLoss(), t, run(t, l))["relative-loss"] for l in (2, 6, 10)]
    assert 0 < rl[0] < rl[1] < rl[2] < 0.5


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("params,fragment", [
    ({"l": 4}, "'l' = 4 is larger than the number of distinct values of sensitive attribute 'dis' (2)"),
    ({"l": 2, "weights": {"zip": 1}}, "'zip' is not a quasi-identifier"),
    ({"l": 2, "weights": {"age": -1}}, "must be a number >= 0"),
    ({"l": 2, "weights": {"age": 0, "country": 0}}, "at least one quasi-identifier needs a positive weight"),
    ({"l": 2, "resolution": {"country": 1}}, "'country' is not a continuous quasi-identifier"),
])
def test_check_rejects_bad_parameters(params, fragment):
    t = table(SMALL, SMALL_QI)
    with pytest.raises(InputError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        LClustering().check({**NO_PARAMS, **params}, table=t)


def test_check_rejects_bad_tables():
    with pytest.raises(InputError, match="needs a sensitive attribute"):
        LClustering().check({"l": 2, **NO_PARAMS}, table=table({"age": [1, 2]}, {"age": "continuous"}, None))
    two = typed_table({"age": [1, 2], "a": ["x", "y"], "b": ["x", "y"]}, quasi={"age": "continuous"},
                      sensitive={"a": "nominal", "b": "nominal"})
    with pytest.raises(InputError, match="exactly one sensitive attribute, but the typing names 2: a, b"):
        LClustering().check({"l": 2, **NO_PARAMS}, table=two)
    clash = table({**SMALL, "age_lo": [0, 0, 0, 0]}, SMALL_QI)
    with pytest.raises(InputError, match="publishes column 'age_lo'"):
        LClustering().check({"l": 2, **NO_PARAMS}, table=clash)
    missing = table({**SMALL, "dis": ["a", None, "b", "a"]}, SMALL_QI)
    with pytest.raises(InputError, match="1 missing value"):
        LClustering().check({"l": 2, **NO_PARAMS}, table=missing)


SMALL_CSV = "age,country,dis,name\n30,China,a,u\n32,China,b,v\n60,India,a,w\n61,Japan,b,x\n"


def small_workflow(folder, l=2, typing="quasi: [age, country], sensitive: [dis]", extra=""):
    write(folder / "data.csv", SMALL_CSV)
    return write(folder / "wf.yaml", f"""
        name: lc-test
        seed: 3
        sources:
          people: {{path: data.csv}}
        steps:
          typed:
            uses: typing
            input: people
            with: {{{typing}, others: drop}}
          clustered:
            uses: l-clustering
            input: typed
            with: {{l: {l}}}
          scores:
            uses: evaluate
            input: [typed, clustered]
            with: {{metrics: [l-diversity, relative-loss, generalization-loss, k-anonymity]}}
          published:
            uses: publish
            input: clustered
            with: {{publisher: csv, path: lc.csv{extra}}}
        """)


@pytest.mark.parametrize("l,typing,fragment", [
    (3, "quasi: [age, country], sensitive: [dis]", "'l' = 3 is larger than the number of distinct values"),
    (2, "quasi: [age, country]", "l-clustering needs a sensitive attribute"),
    (2, "quasi: [age, dis], sensitive: [dis]", "column 'dis' is given two roles"),
])
def test_bad_input_is_one_line_with_exit_code_2(cli, tmp_path, l, typing, fragment):
    wf = small_workflow(tmp_path, l=l, typing=typing)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert fragment in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_csv_publication_writes_sets_as_json_or_drops_them(cli, tmp_path):
    wf = small_workflow(tmp_path)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    metrics = json.loads(res.output)["metrics"]
    assert metrics["scores.relative-loss"] == pytest.approx(0.1) and metrics["scores.generalization-loss"] == 14
    assert metrics["scores.l-diversity.holds"] == 1.0
    csv = pacsv.read_csv(tmp_path / "out" / "lc.csv")
    assert csv.column_names == ["age", "age_lo", "age_hi", "country", "country_set", "dis", "_class"]
    assert sorted(csv.column("country_set").to_pylist()) == ['["China"]', '["China"]', '["India","Japan"]',
                                                            '["India","Japan"]']
    wf = small_workflow(tmp_path, extra=", nested: drop")
    assert cli("run", wf, "--db", tmp_path / "s.duckdb").exit_code == 0
    assert "country_set" not in pacsv.read_csv(tmp_path / "out" / "lc.csv").column_names


def test_adult_workflow_sweeps_l_and_the_quasi_identifiers_with_set(cli, tmp_path):
    """workflows/l-clustering-adult.yaml as shipped, on a 2,000-record sample of its data."""
    shutil.copy(WORKFLOWS / "l-clustering-adult.yaml", tmp_path / "wf.yaml")
    (tmp_path / "data" / "adult").mkdir(parents=True)
    rows = np.sort(np.random.default_rng(0).choice(45222, size=2000, replace=False))
    pacsv.write_csv(adult().take(rows), tmp_path / "data" / "adult" / "adult_full.csv")
    db = tmp_path / "s.duckdb"
    res = cli("run", tmp_path / "wf.yaml", "--db", db, "--out-dir", tmp_path, "--json",
              "--set", "typed.quasi=[age,sex]", "--set", "clustered.l=3")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["metrics"]["scores.k-anonymity"] >= 3
    assert out["metrics"]["scores.l-diversity.holds"] == 1.0 and out["metrics"]["scores.l-diversity.l"] == 3
    assert set(k.split(".")[-1] for k in out["metrics"] if k.startswith("scores.generalization-loss.")) >= {
        "age", "sex"}
    assert "scores.generalization-loss.race" not in out["metrics"]
    published = pq.read_table(out["outputs"][0]["path"])
    assert set(published.column_names) == {"age", "age_lo", "age_hi", "sex", "sex_set", "occupation", "_class"}
    res = cli("run", tmp_path / "wf.yaml", "--db", db, "--out-dir", tmp_path, "--json")
    assert res.exit_code == 0, res.output
    assert "scores.generalization-loss.income" in json.loads(res.output)["metrics"]
