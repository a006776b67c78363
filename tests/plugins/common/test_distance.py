"""Record distances, centroids and IL on hand-computed examples (SPEC section 1; section 4
Def. 8 and 10)."""

from __future__ import annotations

import numpy as np
import pytest

from anonflow_std.common import distance as D
from anonflow_std.common.encode import encode

from .helpers import table

# Four records, one attribute of each type:
#   age  continuous 20, 30, 40, 60            -> lo 20, hi 60, scaled 0, .25, .5, 1
#   edu  ordinal low<mid<high, W = (1, 3)     -> pos 0, 1/4, 1; values low, mid, high, high
#   col  nominal red, blue, red, green        -> sorted dictionary blue, green, red
#   zip  semantic 111, 112, 121, 211 with beta 1, W(1,2) by the formula (w12 = None):
#        normalized CHT distances d(111,112) = 2/11, d(111,121) = d(112,121) = 5/11,
#        d(x, 211) = 1 (see test_cht.test_hand_computed_three_symbol_codes)
COLUMNS = {"age": [20, 30, 40, 60], "edu": ["low", "mid", "high", "high"],
           "col": ["red", "blue", "red", "green"], "zip": ["111", "112", "121", "211"]}
TYPES = {"age": "continuous", "edu": "ordinal", "col": "nominal", "zip": "semantic"}


@pytest.fixture
def enc():
    t = table(COLUMNS, TYPES, orders={"edu": ("low", "mid", "high")}, weights={"edu": (1.0, 3.0)},
              options={"zip": {"beta": 1.0, "w12": None}})
    return encode(t)


def test_per_attribute_record_distances(enc):
    np.testing.assert_allclose(D.attribute_distances(enc["age"], 0), [0, 0.25, 0.5, 1])
    np.testing.assert_allclose(D.attribute_distances(enc["edu"], 0), [0, 0.25, 1, 1])
    np.testing.assert_allclose(D.attribute_distances(enc["edu"], 1), [0.25, 0, 0.75, 0.75])
    np.testing.assert_array_equal(D.attribute_distances(enc["col"], 0), [0, 1, 0, 1])
    np.testing.assert_allclose(D.attribute_distances(enc["zip"], 0), [0, 2 / 11, 5 / 11, 1])
    np.testing.assert_allclose(D.attribute_distances(enc["zip"], 0, rows=[3, 1]), [1, 2 / 11])


def test_record_distance_def8(enc):
    # r0 -> r1: .25 + .25 + 1 + 2/11 ; r0 -> r2: .5 + 1 + 0 + 5/11 ; r0 -> r3: 1 + 1 + 1 + 1
    want = [0, 1.5 + 2 / 11, 1.5 + 5 / 11, 4.0]
    np.testing.assert_allclose(D.record_distances(enc, 0), want)
    np.testing.assert_allclose(D.record_distances(enc, 0, rows=[2, 3]), want[2:])
    np.testing.assert_allclose(D.pair_distances(enc, [0, 0, 0, 0], [0, 1, 2, 3]), want)
    # weighted: age counts twice, col not at all
    np.testing.assert_allclose(D.record_distances(enc, 0, weights={"age": 2.0, "col": 0.0}),
                               [0, 0.5 + 0.25 + 2 / 11, 1.0 + 1 + 5 / 11, 2 + 1 + 1])
    np.testing.assert_allclose(D.record_distances(enc, 0, weights=[2.0, 1.0, 0.0, 1.0]),
                               D.record_distances(enc, 0, weights={"age": 2.0, "col": 0.0}))
    with pytest.raises(KeyError):
        D.record_distances(enc, 0, weights={"nope": 1.0})
    with pytest.raises(ValueError):
        D.record_distances(enc, 0, weights=[1.0])


def test_centroid_of_a_class(enc):
    # class {r0, r1, r2}:
    #   age: mean 30 (scaled .25)
    #   edu: ranks 0, 1, 2 -> cumulative counts 1, 2, 3 of 3 -> first reaching 3/2 is rank 1 'mid'
    #   col: f(blue) = 1/3, f(green) = 0, f(red) = 2/3; sum f^2 = 5/9; mode red
    #   zip: total(111) = 2/11 + 5/11 = 7/11 = total(112) < total(121) = 10/11 -> tie -> '111'
    c = D.centroid(enc, [0, 1, 2])
    assert c.g == 1 and c.sizes.tolist() == [3]
    assert c.values() == {"age": 30.0, "edu": "mid", "col": "red", "zip": "111"}
    assert c.part("age").scaled[0] == pytest.approx(0.25)
    np.testing.assert_allclose(c.part("col").row(0), [1 / 3, 0, 2 / 3])
    assert c.part("col").sumsq[0] == pytest.approx(5 / 9)
    # distances of every record to it:
    #   col: 0.5 * (1 - 2 f_a + 5/9): red 1/9, blue 4/9, green 7/9
    #   r0: .25 + .25 + 1/9 + 0          r1: 0 + 0 + 4/9 + 2/11
    #   r2: .25 + .75 + 1/9 + 5/11       r3: .75 + .75 + 7/9 + 1
    want = [0.5 + 1 / 9, 4 / 9 + 2 / 11, 1 + 1 / 9 + 5 / 11, 1.5 + 7 / 9 + 1]
    np.testing.assert_allclose(D.centroid_distances(enc, c), want)
    np.testing.assert_allclose(D.centroid_distances(enc, c, rows=[3]), want[3:])
    np.testing.assert_allclose(D.attribute_centroid_distances(enc["col"], c.part("col")), [1 / 9, 4 / 9, 1 / 9, 7 / 9])
    # IL(G) = r0 + r1 + r2 = 1.5 + 6/9 + 7/11 (Def. 10)
    assert D.class_il(enc, [0, 1, 2]) == pytest.approx(1.5 + 6 / 9 + 7 / 11)
    assert D.class_il(enc, np.array([True, True, True, False])) == pytest.approx(1.5 + 6 / 9 + 7 / 11)


def test_convex_median_with_step_weights():
    # order a<b<c<d, W = (1, 1, 10): pos 0, 1/12, 2/12, 1.
    # class ranks [a, a, b, d]: cumulative 2, 3, 3, 4 of 4 -> 'a' reaches 1/2 exactly (2*2 >= 4);
    # 'a' and 'b' both minimize the total distance (0+0+1/12+1 = 13/12 = 1/12+1/12+0+11/12):
    # the convex median is the lower one, 'a'
    t = table({"o": ["a", "a", "b", "d", "a", "b", "b", "c", "d"]}, {"o": "ordinal"},
              orders={"o": ("a", "b", "c", "d")}, weights={"o": (1.0, 1.0, 10.0)})
    enc = encode(t)
    assert D.centroid(enc, [0, 1, 2, 3]).values() == {"o": "a"}
    assert D.class_il(enc, [0, 1, 2, 3]) == pytest.approx(13 / 12)
    # ranks [a, b, b, c, d]: cumulative 1, 3, 4, 5 of 5 -> 'b' (2*3 >= 5); the heavy step to d
    # does not move the median (it is a frequency median)
    c = D.centroid(enc, [4, 5, 6, 7, 8])
    assert c.values() == {"o": "b"}
    assert c.part("o").pos[0] == pytest.approx(1 / 12)
    # IL = 1/12 + 0 + 0 + 1/12 + 11/12
    assert D.class_il(enc, [4, 5, 6, 7, 8]) == pytest.approx(13 / 12)


def test_mode_ties_go_to_the_smallest_value():
    t = table({"c": ["b", "a", "b", "a", "c"]}, {"c": "nominal"})
    enc = encode(t)
    assert D.centroid(enc, [0, 1, 2, 3, 4]).values() == {"c": "a"}  # a: 2, b: 2, c: 1
    assert D.centroid(enc, [0, 2, 4]).values() == {"c": "b"}


def test_nominal_closed_form_equals_the_explicit_vector_formula():
    rng = np.random.default_rng(5)
    values = [str(v) for v in rng.integers(0, 6, size=40)]
    enc = encode(table({"c": values}, {"c": "nominal"}))
    a = enc["c"]
    for members in (np.arange(40), np.arange(7), rng.choice(40, 11, replace=False), [3]):
        cent = D.centroid(enc, members)
        onehot = np.eye(a.m)[a.codes] * np.sqrt(0.5)  # the seed's sqrt(.5) one-hot vectors
        mean = onehot[members].mean(axis=0)
        explicit = ((onehot - mean) ** 2).sum(axis=1)
        np.testing.assert_allclose(D.centroid_distances(enc, cent), explicit, atol=1e-14)
        # IL_nominal(G) = 0.5 |G| (1 - sum f^2)
        f = np.bincount(a.codes[members], minlength=a.m) / len(members)
        assert D.class_il(enc, members) == pytest.approx(0.5 * len(members) * (1 - (f ** 2).sum()))


def test_nominal_singleton_gives_exactly_the_zero_one_distance():
    # class {b}: 0.5 * (1 - 2[a == b] + 1) = 1 - [a == b], exactly
    enc = encode(table({"c": ["x", "y", "x", "z"]}, {"c": "nominal"}))
    np.testing.assert_array_equal(D.centroid_distances(enc, D.centroid(enc, [0])), [0.0, 1.0, 0.0, 1.0])
    # but a member of a larger class is not at 0: class {x, y}, x -> 0.5 * (1 - 1 + 1/2) = 1/4
    np.testing.assert_allclose(D.centroid_distances(enc, D.centroid(enc, [0, 1])), [0.25, 0.25, 0.25, 0.75])


def test_many_classes_at_once(enc):
    labels = np.array([1, 0, 1, 1])
    cs = D.centroids(enc, labels)
    assert cs.g == 2 and cs.sizes.tolist() == [1, 3]
    pub = cs.published()
    assert pub["age"].to_pylist() == [30.0, 40.0]
    assert pub["edu"].to_pylist() == ["mid", "high"]  # ranks low, high, high -> 'high'
    assert pub["col"].to_pylist() == ["blue", "red"]  # red, red, green
    # zip {111, 121, 211}: total(111) = 5/11 + 1 = total(121) < total(211) = 2 -> '111'
    assert pub["zip"].to_pylist() == ["112", "111"]
    for j, members in enumerate(([1], [0, 2, 3])):
        one = D.centroid(enc, members)
        assert cs.values(j) == one.values()
        np.testing.assert_allclose(D.centroid_distances(enc, cs, j), D.centroid_distances(enc, one))
    # one record to all class centroids
    for i in range(4):
        want = [D.centroid_distances(enc, cs, j)[i] for j in range(2)]
        np.testing.assert_allclose(D.distances_to_centroids(enc, i, cs), want)
        np.testing.assert_allclose(D.distances_to_centroids(enc, i, cs, classes=[1]), want[1:])
    own = D.own_centroid_distances(enc, labels, cs)
    np.testing.assert_allclose(own, [D.centroid_distances(enc, cs, labels[t])[t] for t in range(4)])
    il = D.il_by_class(enc, labels)
    np.testing.assert_allclose(il, [D.class_il(enc, [1]), D.class_il(enc, [0, 2, 3])])
    assert il[0] == 0.0  # a singleton loses nothing


def test_unassigned_records_and_empty_classes(enc):
    labels = np.array([-1, 2, 2, -1])
    cs = D.centroids(enc, labels)
    assert cs.g == 3 and cs.sizes.tolist() == [0, 0, 2]
    pub = cs.published()
    assert pub["age"].to_pylist()[2] == 35.0 and np.isnan(pub["age"].to_pylist()[0])
    assert pub["col"].to_pylist() == [None, None, "blue"]  # blue, red tie -> blue
    assert pub["zip"].to_pylist() == [None, None, "112"]  # {112, 121}: tie -> 112
    own = D.own_centroid_distances(enc, labels, cs)
    assert np.isnan(own[0]) and np.isnan(own[3])
    np.testing.assert_allclose(D.il_by_class(enc, labels, cents=cs), [0, 0, D.class_il(enc, [1, 2])])
    # every distance to an empty class is NaN
    to_all = D.distances_to_centroids(enc, 0, cs)
    assert np.isnan(to_all[:2]).all() and np.isfinite(to_all[2])
    assert np.isnan(D.centroid_distances(enc, cs, 1)).all()
    with pytest.raises(ValueError):
        D.centroids(enc, [0, 1])
    with pytest.raises(ValueError):
        D.centroids(enc, [0, 0, 5, 0], groups=3)
    with pytest.raises(ValueError):
        D.centroid(enc, [])


def test_sparse_frequencies_match_dense(enc, monkeypatch):
    rng = np.random.default_rng(1)
    values = [f"v{v:02d}" for v in rng.integers(0, 30, size=200)]
    e = encode(table({"c": values, "x": rng.normal(size=200).tolist()}, {"c": "nominal", "x": "continuous"}))
    labels = rng.integers(-1, 25, size=200)
    dense = D.centroids(e, labels, groups=27)
    monkeypatch.setattr(D, "DENSE_LIMIT", 0)
    sparse = D.centroids(e, labels, groups=27)
    assert sparse.part("c").dense is None and dense.part("c").dense is not None
    assert sparse.published()["c"].equals(dense.published()["c"])
    np.testing.assert_allclose(sparse.part("c").sumsq, dense.part("c").sumsq)
    for j in (0, 5, 26):
        np.testing.assert_allclose(sparse.part("c").row(j), dense.part("c").row(j))
        np.testing.assert_allclose(D.centroid_distances(e, sparse, j), D.centroid_distances(e, dense, j))
    np.testing.assert_allclose(D.distances_to_centroids(e, 3, sparse), D.distances_to_centroids(e, 3, dense))
    np.testing.assert_allclose(D.il_by_class(e, labels, cents=sparse), D.il_by_class(e, labels, cents=dense))
