"""Generalized values, loss and DS distances of L-clustering (SPEC section 5, seed 001).

Hand-computed examples first, then hypothesis properties against a plain-Python reference
(tuples of intervals and frozensets), which is independent of the bitset code.
"""

from __future__ import annotations

from functools import reduce

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anonflow_std.common.ds_distance import DSWorkspace, ds_classes, ds_record_class, ds_records
from anonflow_std.common.generalized import (
    Domain,
    Generalized,
    attribute_loss,
    covers,
    dataset_loss,
    full_generalization_loss,
    join,
    relative_loss,
    render,
    to_arrow,
    tuple_loss,
)

# ---------------------------------------------------------------------------------------
# The tiny table used by the hand examples: age (ordered, res 1, domain [20, 29]) and
# country (unordered, m = 3: 0 = China, 1 = India, 2 = Japan).
#
#   t0 = (21, China)   t1 = (23, India)   t2 = (22, China)   t3 = (28, Japan)
# ---------------------------------------------------------------------------------------
COUNTRIES = ["China", "India", "Japan"]
AGES = np.array([[21.0], [23.0], [22.0], [28.0]])
CODES = np.array([[0], [1], [0], [2]])


def domain(**kw) -> Domain:
    args = dict(res=[1.0], dmin=[20.0], dmax=[29.0], card=[3], ordered_names=("age",),
                unordered_names=("country",))
    args.update(kw)
    return Domain(**args)


DOM = domain()
T = Generalized.from_records(AGES, CODES, DOM)


def gen(lo, hi, codes_per_attr, dom=DOM, count=1) -> Generalized:
    """One generalized tuple from intervals and sets of codes (test helper)."""
    bits = np.zeros((1, dom.d_unord, dom.n_words), dtype=np.uint64)
    for j, codes in enumerate(codes_per_attr):
        for c in codes:
            bits[0, j, c // 64] |= np.uint64(1) << np.uint64(c % 64)
    return Generalized(np.array([lo], float), np.array([hi], float), bits, [count])


# -- representation and phi ---------------------------------------------------------------


def test_records_are_degenerate_intervals_and_singletons():
    assert np.array_equal(T.lo, AGES) and np.array_equal(T.hi, AGES)
    # China = bit 0, India = bit 1, Japan = bit 2
    assert T.bits[:, 0, 0].tolist() == [1, 2, 1, 4]
    assert T.sizes.tolist() == [[1], [1], [1], [1]]
    assert T.counts.tolist() == [1, 1, 1, 1]
    assert T.bits.shape == (4, 1, 1)  # m = 3 -> W = 1 word


def test_interval_and_set_join_by_hand():
    # phi(t0, t1) = ([21-23], {China, India}) -> bits 0b011
    j = join(T[[0]], T[[1]])
    assert (j.lo[0, 0], j.hi[0, 0]) == (21.0, 23.0)
    assert j.bits[0, 0, 0] == 0b011 and j.sizes[0, 0] == 2
    assert j.counts.tolist() == [2]
    # [21, 23] v [22, 28] = [21, 28]; {China, India} v {China, Japan} = all three
    k = join(gen([21], [23], [[0, 1]]), gen([22], [28], [[0, 2]]))
    assert (k.lo[0, 0], k.hi[0, 0]) == (21.0, 28.0)
    assert k.bits[0, 0, 0] == 0b111


def test_join_broadcasts_one_against_many():
    j = join(T[[0]], T)  # t0 joined with each record
    assert j.lo[:, 0].tolist() == [21, 21, 21, 21]
    assert j.hi[:, 0].tolist() == [21, 23, 22, 28]
    assert j.bits[:, 0, 0].tolist() == [0b001, 0b011, 0b001, 0b101]


def test_from_labels_builds_all_representatives_at_once():
    reps = Generalized.from_labels(T, [7, 3, 7, 3])  # arbitrary label values
    assert reps.ids.tolist() == [3, 7]
    # class 3 = {t1, t3}: ([23-28], {India, Japan}); class 7 = {t0, t2}: ([21-22], {China})
    assert reps.lo[:, 0].tolist() == [23, 21] and reps.hi[:, 0].tolist() == [28, 22]
    assert reps.bits[:, 0, 0].tolist() == [0b110, 0b001]
    assert reps.counts.tolist() == [2, 2]
    assert reps.rows_of([7, 3, 7]).tolist() == [1, 0, 1]
    with pytest.raises(ValueError):
        reps.rows_of([5])


def test_multiword_bitsets():
    dom = Domain(res=[], dmin=[], dmax=[], card=[130])  # W = ceil(130 / 64) = 3
    assert dom.n_words == 3
    r = Generalized.from_records(np.zeros((3, 0)), np.array([[0], [64], [129]]), dom)
    assert r.bits[:, 0, :].tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 2]]
    rep = Generalized.from_labels(r, [0, 0, 0])
    assert rep.sizes.tolist() == [[3]]
    full = Generalized.full(dom)
    assert full.sizes.tolist() == [[130]]
    assert full.bits[0, 0].tolist() == [2**64 - 1, 2**64 - 1, 0b11]
    assert render(rep, dom)["y0"].tolist() == ["{0,64,129}"]


# -- loss ---------------------------------------------------------------------------------


def test_ordered_loss_by_hand():
    # L(21 -> [21-23]) = (23 - 21 + 1) / (21 - 21 + 1) = 3
    # L([21-23] -> [21-23]) = 0 (x == x*: the "else 0" branch, not 3/3 = 1)
    # L([21-23] -> [21-28]) = (28 - 21 + 1) / (23 - 21 + 1) = 8/3
    cases = [(([21], [21]), ([21], [23]), 3.0), (([21], [23]), ([21], [23]), 0.0),
             (([21], [23]), ([21], [28]), 8 / 3)]
    for (lo, hi), (lo_s, hi_s), want in cases:
        L_ord, _ = attribute_loss(gen(lo, hi, [[0]]), gen(lo_s, hi_s, [[0]]), DOM)
        assert L_ord[0, 0] == pytest.approx(want)


def test_ordered_loss_uses_the_resolution_unit():
    # a real-valued attribute with res 0.1: 2.0 -> [2.0, 2.3] costs (0.3 + 0.1) / 0.1 = 4
    dom = domain(res=[0.1], dmin=[0.0], dmax=[5.0])
    L_ord, _ = attribute_loss(gen([2.0], [2.0], [[0]], dom), gen([2.0], [2.3], [[0]], dom),
                              dom)
    assert L_ord[0, 0] == pytest.approx(4.0)


def test_unordered_loss_by_hand():
    # {China} -> {China, India}: 2/1; {China} -> {China}: 0 (not 1/1);
    # {China, India} -> {China, India, Japan}: 3/2
    for y, ys, want in [([0], [0, 1], 2.0), ([0], [0], 0.0), ([0, 1], [0, 1, 2], 1.5)]:
        _, L_un = attribute_loss(gen([21], [21], [y]), gen([21], [21], [ys]), DOM)
        assert L_un[0, 0] == want


def test_tuple_loss_with_weights():
    # t0 -> ([21-23], {China, India}); w_age = 2, w_country = 0.5: 2 * 3 + 0.5 * 2 = 7
    dom = domain(w_ord=[2.0], w_unord=[0.5])
    assert tuple_loss(T[[0]], gen([21], [23], [[0, 1]]), dom)[0] == pytest.approx(7.0)
    # default weights 1: 3 + 2 = 5
    assert tuple_loss(T[[0]], gen([21], [23], [[0, 1]]), DOM)[0] == pytest.approx(5.0)


def test_representative_equal_to_a_member_costs_that_member_nothing():
    # The module docstring's example: G = {(50, China), (52, China)} -> ([50-52], {China}):
    # each member costs 3 (age) + 0 (country unchanged), not 3 + 1.
    dom = domain(dmin=[0.0], dmax=[99.0])
    recs = Generalized.from_records(np.array([[50.0], [52.0]]), np.array([[0], [0]]), dom)
    rep = Generalized.from_labels(recs, [0, 0])
    assert tuple_loss(recs, rep, dom).tolist() == [3.0, 3.0]
    # Add t3 = ([50-52], {China, India}): the representative now equals t3, which costs 0;
    # t1 and t2 cost 3 + 2/1 = 5 each.
    t3 = gen([50], [52], [[0, 1]], dom)
    members = Generalized(np.vstack([recs.lo, t3.lo]), np.vstack([recs.hi, t3.hi]),
                          np.concatenate([recs.bits, t3.bits]))
    rep = Generalized.from_labels(members, [0, 0, 0])
    assert rep.same_values(t3)[0]
    assert tuple_loss(members, rep, dom).tolist() == [5.0, 5.0, 0.0]


def test_dataset_loss_and_rl_by_hand():
    # Classes A = {t0, t2} -> ([21-22], {China}); B = {t1, t3} -> ([23-28], {India, Japan}).
    #   t0: age (22-21+1)/1 = 2, country unchanged 0      -> 2
    #   t2: age 2, country 0                               -> 2
    #   t1: age (28-23+1)/1 = 6, country 2/1 = 2           -> 8
    #   t3: age 6, country 2                               -> 8
    # L(D, D*) = 20.
    # D_c with the declared domain [20, 29] and all 3 countries: every record costs
    # (29-20+1)/1 + 3/1 = 13, so L(D, D_c) = 4 * 13 = 52 and RL = 20/52 = 5/13.
    labels = [0, 1, 0, 1]
    reps = Generalized.from_labels(T, labels)
    published = reps.expand(labels)
    assert tuple_loss(T, published, DOM).tolist() == [2.0, 8.0, 2.0, 8.0]
    assert dataset_loss(T, published, DOM) == 20.0
    assert full_generalization_loss(T, DOM) == 52.0
    assert relative_loss(T, published, DOM) == pytest.approx(5 / 13)
    # With the observed domain [21, 28] (Domain.from_data): 8 + 3 = 11 per record -> 44.
    obs = Domain.from_data(AGES, CODES, res=[1.0])
    assert obs.card.tolist() == [3] and (obs.dmin[0], obs.dmax[0]) == (21.0, 28.0)
    assert full_generalization_loss(T, obs) == 44.0
    assert relative_loss(T, published, obs) == pytest.approx(20 / 44)
    # one class = D_c itself: RL = 1; every record its own class: RL = 0
    one = Generalized.from_labels(T, [0, 0, 0, 0]).expand([0, 0, 0, 0])
    assert relative_loss(T, one, obs) == 1.0
    assert relative_loss(T, T, obs) == 0.0


def test_rl_with_constant_attributes_is_zero():
    dom = domain(dmin=[21.0], dmax=[21.0], card=[1])
    recs = Generalized.from_records(np.array([[21.0], [21.0]]), np.array([[0], [0]]), dom)
    assert full_generalization_loss(recs, dom) == 0.0
    assert relative_loss(recs, recs, dom) == 0.0


def test_published_values_must_cover_their_records():
    with pytest.raises(ValueError, match="does not generalize"):
        dataset_loss(T, T[[1, 0, 2, 3]], DOM)


# -- DS distances -------------------------------------------------------------------------


def test_ds_records_by_hand():
    # DS(t0, t1): t* = ([21-23], {China, India}); L(t0, t*) = 3 + 2, L(t1, t*) = 3 + 2 -> 10
    # DS(t0, t2): t* = ([21-22], {China}); 2 + 0 and 2 + 0 -> 4 (country unchanged: 0)
    # DS(t0, t0) = 0
    assert ds_records(T[[0]], T[[1]], DOM)[0] == 10.0
    assert ds_records(T[[0]], T[[2]], DOM)[0] == 4.0
    assert ds_records(T[[0]], T[[0]], DOM)[0] == 0.0
    # one record against all: DS(t0, t3): t* = ([21-28], {China, Japan}) -> (8+2) + (8+2)
    assert ds_records(T[[0]], T, DOM).tolist() == [0.0, 10.0, 4.0, 20.0]


def test_ds_record_class_by_hand():
    # G = {t0, t2}, t_g = ([21-22], {China}), |G| = 2.
    # t1 = (23, India): t_g* = ([21-23], {China, India})
    #   L(t1, t_g*) = 3/1 + 2/1 = 5; L(t_g, t_g*) = 3/2 + 2/1 = 3.5 -> DS = 5 + 2 * 3.5 = 12
    # t3 = (28, Japan): t_g* = ([21-28], {China, Japan})
    #   L(t3, t_g*) = 8 + 2 = 10;   L(t_g, t_g*) = 8/2 + 2/1 = 6 -> DS = 10 + 2 * 6 = 22
    # t0 (inside G): t_g* = t_g, L(t_g, t_g*) = 0; L(t0, t_g) = 2 + 0 -> DS = 2 (same for t2)
    G = Generalized.from_labels(T[[0, 2]], [0, 0])
    assert G.counts.tolist() == [2]
    assert ds_record_class(T, G, DOM).tolist() == [2.0, 12.0, 2.0, 22.0]
    # a new record (22, China) inside G's range costs only its own loss: 2
    t4 = Generalized.from_records(np.array([[22.0]]), np.array([[0]]), DOM)
    assert ds_record_class(t4, G, DOM)[0] == 2.0


def test_ds_record_against_all_classes():
    # classes A = {t0, t2}, B = {t1, t3}; t1 against both: A -> 12 (above);
    # B = ([23-28], {India, Japan}) already contains t1 -> L(t1, t_b) = 6 + 2 = 8, DS = 8
    reps = Generalized.from_labels(T, [0, 1, 0, 1])
    assert ds_record_class(T[[1]], reps, DOM).tolist() == [12.0, 8.0]


def test_ds_classes_by_hand():
    # G = ([21-22], {China}), |G| = 2;  H = ([23-28], {India, Japan}), |H| = 2.
    # t* = ([21-28], {China, India, Japan})
    # L(t_g, t*) = 8/2 + 3/1 = 7;  L(t_h, t*) = 8/6 + 3/2 = 17/6
    # DS(G, H) = 2 * 7 + 2 * 17/6 = 59/3
    reps = Generalized.from_labels(T, [0, 1, 0, 1])
    assert ds_classes(reps[[0]], reps[[1]], DOM)[0] == pytest.approx(59 / 3)
    assert ds_classes(reps[[0]], reps, DOM) == pytest.approx([0.0, 59 / 3])
    # weights scale each attribute: w_age = 0 leaves 2 * 3 + 2 * 1.5 = 9
    assert ds_classes(reps[[0]], reps[[1]], domain(w_ord=[0.0]))[0] == pytest.approx(9.0)


def test_workspace_gives_the_same_results_without_allocating_outputs():
    reps = Generalized.from_labels(T, [0, 1, 0, 1])
    ws = DSWorkspace(10, DOM)
    got = ds_record_class(T, reps[[0]], DOM, work=ws)
    assert got.tolist() == [2.0, 12.0, 2.0, 22.0]
    assert np.shares_memory(got, ws.out)  # a view, overwritten by the next call
    kept = got.copy()
    ds_classes(reps[[0]], reps, DOM, work=ws)
    assert not np.array_equal(ws.out[:4], kept)
    out = np.empty(4)
    assert ds_records(T[[0]], T, DOM, work=ws, out=out) is out
    assert out.tolist() == [0.0, 10.0, 4.0, 20.0]
    with pytest.raises(ValueError, match="workspace"):
        ds_records(T[[0]], T, DOM, work=DSWorkspace(3, DOM))
    with pytest.raises(ValueError, match="workspace"):
        ds_records(T[[0]], T, DOM, work=DSWorkspace(10, domain(card=[100])))
    with pytest.raises(ValueError, match="broadcast"):
        ds_records(T[[0, 1]], T, DOM)


# -- publication --------------------------------------------------------------------------


def test_render_by_hand():
    reps = Generalized.from_labels(T, [0, 1, 0, 2])  # {t0, t2}, {t1}, {t3}
    out = render(reps, DOM, [COUNTRIES])
    assert out["age"].tolist() == ["[21-22]", "23", "28"]
    assert out["country"].tolist() == ["China", "India", "Japan"]
    reps = Generalized.from_labels(T, [0, 0, 1, 1])
    per_record = render(reps, DOM, [COUNTRIES], labels=[0, 0, 1, 1])
    assert per_record["age"].tolist() == ["[21-23]"] * 2 + ["[22-28]"] * 2
    assert per_record["country"].tolist() == ["{China,India}"] * 2 + ["{China,Japan}"] * 2


def test_render_sorts_category_strings_and_formats_numbers():
    # categories listed out of order: codes 0 = Japan, 1 = China, 2 = India
    g = gen([21.5], [22.0], [[0, 1]])
    dom = domain(res=[0.5])
    assert render(g, dom, [["Japan", "China", "India"]])["country"].tolist() == [
        "{China,Japan}"]
    assert render(g, dom, [COUNTRIES])["age"].tolist() == ["[21.5-22]"]
    assert render(gen([-3], [-3], [[2]]), domain(dmin=[-5.0]))["age"].tolist() == ["-3"]
    # without strings, codes in code order
    assert render(gen([1], [1], [[2, 0]]), DOM)["country"].tolist() == ["{0,2}"]


def test_render_ordinal_ranges():
    dom = Domain(res=[1], dmin=[0], dmax=[2], card=[], ordered_names=("edu",))
    g = Generalized(np.array([[0.0], [1.0]]), np.array([[2.0], [1.0]]), np.zeros((2, 0, 1)))
    out = render(g, dom, ordinal_labels={"edu": ["HS-grad", "Bachelors", "Masters"]})
    assert out["edu"].tolist() == ["[HS-grad..Masters]", "Bachelors"]


def test_to_arrow_structured_columns():
    reps = Generalized.from_labels(T, [0, 0, 1, 1])
    cols = to_arrow(reps, DOM, [COUNTRIES], labels=[1, 0, 1, 1])
    assert list(cols) == ["age_lo", "age_hi", "country"]
    assert cols["age_lo"].type == pa.float64()
    assert cols["age_lo"].to_pylist() == [22.0, 21.0, 22.0, 22.0]
    assert cols["age_hi"].to_pylist() == [28.0, 23.0, 28.0, 28.0]
    assert cols["country"].type == pa.list_(pa.string())
    assert cols["country"].to_pylist() == [["China", "Japan"], ["China", "India"],
                                           ["China", "Japan"], ["China", "Japan"]]
    per_class = to_arrow(reps, DOM, [COUNTRIES])
    assert per_class["country"].to_pylist() == [["China", "India"], ["China", "Japan"]]
    pa.table(cols)  # columns of equal length form a table


def test_input_validation():
    with pytest.raises(ValueError):
        Generalized.from_records(AGES, np.array([[0], [3], [0], [0]]), DOM)  # code >= m
    with pytest.raises(ValueError):
        Generalized.from_records(np.array([[30.0]]), np.array([[0]]), DOM)  # > dmax
    with pytest.raises(ValueError):
        Generalized.from_records(np.array([[np.nan]]), np.array([[0]]), DOM)
    with pytest.raises(ValueError):
        domain(res=[0.0])
    with pytest.raises(ValueError):
        domain(w_ord=[-1.0])
    with pytest.raises(ValueError):
        domain(dmin=[30.0])
    with pytest.raises(ValueError, match="empty"):
        Generalized(np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((1, 1, 1)))


def test_empty_inputs():
    none = Generalized.from_records(np.zeros((0, 1)), np.zeros((0, 1), int), DOM)
    reps = Generalized.from_labels(none, [])
    assert len(reps) == 0
    assert ds_record_class(none, Generalized.full(DOM), DOM).shape == (0,)
    assert render(reps, DOM, [COUNTRIES])["country"].shape == (0,)
    assert len(to_arrow(reps, DOM, [COUNTRIES])["country"]) == 0
    assert relative_loss(none, none, DOM) == 0.0


def test_attribute_kinds_may_be_absent():
    nominal_only = Domain(res=[], dmin=[], dmax=[], card=[2])
    r = Generalized.from_records(None, [[0], [1]], nominal_only)
    assert ds_records(r[[0]], r[[1]], nominal_only)[0] == 4.0  # 2/1 + 2/1
    ordered_only = Domain(res=[1], dmin=[0], dmax=[9], card=[])
    r = Generalized.from_records([[1.0], [3.0]], None, ordered_only)
    assert ds_records(r[[0]], r[[1]], ordered_only)[0] == 6.0  # 3/1 + 3/1


# ---------------------------------------------------------------------------------------
# Properties, against a plain-Python reference: a tuple is (intervals, frozensets).
# ---------------------------------------------------------------------------------------


def py(g: Generalized, i: int):
    ivs = tuple((float(g.lo[i, a]), float(g.hi[i, a])) for a in range(g.lo.shape[1]))
    sets = []
    for j in range(g.bits.shape[1]):
        s = set()
        for w in range(g.bits.shape[2]):
            word = int(g.bits[i, j, w])
            s |= {64 * w + b for b in range(64) if word >> b & 1}
        sets.append(frozenset(s))
    return ivs, tuple(sets)


def ref_join(x, y):
    return (tuple((min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(x[0], y[0])),
            tuple(a | b for a, b in zip(x[1], y[1])))


def ref_loss(x, xs, dom: Domain) -> float:
    total = 0.0
    for i, ((a, b), (a_s, b_s)) in enumerate(zip(x[0], xs[0])):
        if (a, b) != (a_s, b_s):
            total += dom.w_ord[i] * (b_s - a_s + dom.res[i]) / (b - a + dom.res[i])
    for j, (y, ys) in enumerate(zip(x[1], xs[1])):
        if y != ys:
            total += dom.w_unord[j] * len(ys) / len(y)
    return total


def ref_ds(x, y, cx: float, cy: float, dom: Domain) -> float:
    s = ref_join(x, y)
    return cx * ref_loss(x, s, dom) + cy * ref_loss(y, s, dom)


@st.composite
def tables(draw, max_n: int = 7):
    """A random domain, records in it and a labelling into classes."""
    d_ord = draw(st.integers(0, 2))
    d_unord = draw(st.integers(0 if d_ord else 1, 2))
    res = [draw(st.sampled_from([1.0, 0.5, 0.25])) for _ in range(d_ord)]
    card = [draw(st.sampled_from([1, 2, 3, 5, 64, 65, 130])) for _ in range(d_unord)]
    n = draw(st.integers(1, max_n))
    steps = np.array([[draw(st.integers(0, 12)) for _ in range(d_ord)] for _ in range(n)],
                     dtype=float).reshape(n, d_ord)
    values = steps * np.array(res) - 2.0
    pools = [[c for c in (0, 1, 2, 63, 64, 129) if c < m] for m in card]
    codes = np.array([[draw(st.sampled_from(p)) for p in pools] for _ in range(n)],
                     dtype=np.int64).reshape(n, d_unord)
    weights = st.sampled_from([0.0, 0.5, 1.0, 2.0])
    margin = [draw(st.integers(0, 3)) * r for r in res]
    dom = Domain(res=res, dmin=[-2.0 - mg for mg in margin],
                 dmax=[-2.0 + 12 * r + mg for r, mg in zip(res, margin)], card=card,
                 w_ord=[draw(weights) for _ in range(d_ord)],
                 w_unord=[draw(weights) for _ in range(d_unord)])
    labels = np.array([draw(st.integers(0, 3)) for _ in range(n)])
    return dom, Generalized.from_records(values, codes, dom), labels


PROPS = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(tables())
def test_from_labels_equals_folded_reference_join(tbl):
    dom, recs, labels = tbl
    reps = Generalized.from_labels(recs, labels)
    for c, lab in enumerate(reps.ids):
        members = [py(recs, i) for i in np.flatnonzero(labels == lab)]
        assert py(reps, c) == reduce(ref_join, members)
        assert reps.counts[c] == len(members)


@PROPS
@given(tables())
def test_join_commutative_associative_idempotent(tbl):
    dom, recs, labels = tbl
    reps = Generalized.from_labels(recs, labels)
    g = [reps[[c % len(reps)]] for c in range(3)]  # generalized (not raw) tuples
    a, b, c = g
    assert join(a, b).same_values(join(b, a)).all()
    assert join(join(a, b), c).same_values(join(a, join(b, c))).all()
    assert join(a, a).same_values(a).all()
    assert py(join(a, b), 0) == ref_join(py(a, 0), py(b, 0))
    assert join(a, b).counts[0] == a.counts[0] + b.counts[0]
    assert covers(a, join(a, b)).all() and covers(b, join(a, b)).all()


@PROPS
@given(tables())
def test_loss_bounds(tbl):
    """L(x, x*) is 0 or *above* 1 -- never in (0, 1] -- for x strictly inside x*:
    ordered: (1, (dmax - dmin + res) / (b - a + res)]; unordered: [(|y|+1)/|y|, m/|y|].
    So [0, 1] is NOT a bound of either kind; what holds is L(x, x*) <= L(x, whole domain),
    hence 0 <= RL <= 1."""
    dom, recs, labels = tbl
    reps = Generalized.from_labels(recs, labels)
    pub = reps.expand(labels)
    full = Generalized.full(dom)
    L_ord, L_un = attribute_loss(recs, pub, dom)
    F_ord, F_un = attribute_loss(recs, full, dom)
    changed_o = (pub.lo != recs.lo) | (pub.hi != recs.hi)
    assert np.all(L_ord[~changed_o] == 0)
    assert np.all(L_ord[changed_o] > 1)
    assert np.all(L_ord <= ((dom.dmax - dom.dmin + dom.res) / dom.res)[None, :] + 1e-12)
    changed_u = pub.sizes != recs.sizes
    assert np.all(L_un[~changed_u] == 0)
    assert np.all(L_un[changed_u] >= 2)  # raw records: (1 + 1) / 1
    assert np.all(L_un <= dom.card[None, :])
    assert np.all(L_ord <= F_ord + 1e-12) and np.all(L_un <= F_un)
    rl = relative_loss(recs, pub, dom)
    assert 0.0 <= rl <= 1.0 + 1e-12
    want = sum(ref_loss(py(recs, i), py(pub, i), dom) for i in range(len(recs)))
    assert dataset_loss(recs, pub, dom) == pytest.approx(want, rel=1e-12, abs=1e-12)
    # the representative-level loss (the DS ingredient) has the same shape: generalized
    # x inside a strictly larger x* costs more than 1
    a, b = reps[[0]], reps[[len(reps) - 1]]
    s = join(a, b)
    Lo, Lu = attribute_loss(a, s, dom)
    assert np.all((Lo == 0) | (Lo > 1)) and np.all((Lu == 0) | (Lu > 1))


@PROPS
@given(tables())
def test_ds_symmetric_nonnegative_and_zero_on_itself(tbl):
    dom, recs, labels = tbl
    reps = Generalized.from_labels(recs, labels)
    assert ds_records(recs, recs[::-1], dom) == pytest.approx(ds_records(recs[::-1], recs,
                                                                         dom))
    for c in range(len(reps)):
        assert ds_classes(reps[[c]], reps, dom) == pytest.approx(
            ds_classes(reps, reps[[c]], dom))
    assert np.all(ds_records(recs, recs, dom) == 0)
    assert np.all(ds_classes(reps, reps, dom) == 0)
    assert np.all(ds_record_class(recs, reps[[0]], dom) >= 0)


@PROPS
@given(tables())
def test_vectorized_one_vs_all_equals_scalar_reference(tbl):
    dom, recs, labels = tbl
    reps = Generalized.from_labels(recs, labels)
    n, g = len(recs), len(reps)
    P = [py(recs, i) for i in range(n)]
    Q = [py(reps, c) for c in range(g)]
    cnt = reps.counts.astype(float)
    # DS(t_i, t_j): one record against all records
    for i in range(n):
        got = ds_records(recs[[i]], recs, dom)
        assert got == pytest.approx([ref_ds(P[i], P[j], 1, 1, dom) for j in range(n)])
        assert got == pytest.approx(
            [ds_records(recs[[i]], recs[[j]], dom)[0] for j in range(n)])
    # DS(t, G): one class against all candidate records ...
    for c in range(g):
        got = ds_record_class(recs, reps[[c]], dom)
        assert got == pytest.approx([ref_ds(P[i], Q[c], 1, cnt[c], dom) for i in range(n)])
        assert got == pytest.approx(
            [ds_record_class(recs[[i]], reps[[c]], dom)[0] for i in range(n)])
    # ... and one record against all classes
    for i in range(n):
        got = ds_record_class(recs[[i]], reps, dom)
        assert got == pytest.approx([ref_ds(P[i], Q[c], 1, cnt[c], dom) for c in range(g)])
    # DS(G, H): one class against all classes; DS(t, G) is DS({t}, G)
    for c in range(g):
        got = ds_classes(reps[[c]], reps, dom)
        assert got == pytest.approx(
            [ref_ds(Q[c], Q[h], cnt[c], cnt[h], dom) for h in range(g)])
    assert ds_record_class(recs, reps[[0]], dom) == pytest.approx(
        ds_classes(recs, reps[[0]], dom))
    # one workspace reused across calls of different lengths gives identical results
    ws = DSWorkspace(n, dom)
    for c in range(g):
        assert np.array_equal(ds_record_class(recs, reps[[c]], dom, work=ws),
                              ds_record_class(recs, reps[[c]], dom))
        assert np.array_equal(ds_classes(reps[[c]], reps, dom, work=ws),
                              ds_classes(reps[[c]], reps, dom))


@PROPS
@given(tables())
def test_render_and_arrow_agree_with_reference(tbl):
    dom, recs, labels = tbl
    reps = Generalized.from_labels(recs, labels)
    cats = [[f"c{k:03d}" for k in range(m)] for m in dom.card]
    text = render(reps, dom, cats, labels=labels)
    cols = to_arrow(reps, dom, cats, labels=labels)
    for i in range(len(recs)):
        ivs, sets = py(reps.expand(labels), i)
        for j, s in enumerate(sets):
            names = sorted(cats[j][k] for k in s)
            assert cols[dom.unordered_names[j]][i].as_py() == names
            want = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
            assert text[dom.unordered_names[j]][i] == want
        for a, (lo, hi) in enumerate(ivs):
            assert cols[dom.ordered_names[a] + "_lo"][i].as_py() == lo
            assert cols[dom.ordered_names[a] + "_hi"][i].as_py() == hi
            fmt = [str(int(v)) if v == int(v) else repr(v) for v in (lo, hi)]
            want = fmt[0] if lo == hi else f"[{fmt[0]}-{fmt[1]}]"
            assert text[dom.ordered_names[a]][i] == want
