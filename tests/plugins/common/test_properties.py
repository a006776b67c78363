"""Property tests of the distance kernels on random mixed tables (SPEC section 1)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from anonflow_std.common import distance as D
from anonflow_std.common.encode import encode

from .helpers import table

ORDER = ("lo", "mid", "hi", "top")


@st.composite
def mixed_tables(draw):
    n = draw(st.integers(1, 25))
    ages = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    ords = draw(st.lists(st.sampled_from(ORDER), min_size=n, max_size=n))
    noms = draw(st.lists(st.sampled_from("abcd"), min_size=n, max_size=n))
    codes = draw(st.lists(st.text(alphabet="012", min_size=3, max_size=3), min_size=n, max_size=n))
    weights = tuple(draw(st.lists(st.floats(0.1, 10.0), min_size=3, max_size=3)))
    w12 = draw(st.sampled_from([0.0, None, 0.5]))
    t = table({"age": ages, "o": ords, "c": noms, "z": codes},
              {"age": "continuous", "o": "ordinal", "c": "nominal", "z": "semantic"},
              orders={"o": ORDER}, weights={"o": weights}, options={"z": {"w12": w12}})
    return encode(t)


@settings(max_examples=120, deadline=None)
@given(enc=mixed_tables())
def test_distances_are_symmetric_zero_on_identical_values_and_bounded(enc):
    n = enc.n
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    total = D.pair_distances(enc, i, j)
    np.testing.assert_array_equal(total, total.T)
    np.testing.assert_array_equal(np.diag(total), np.zeros(n))
    for attr in enc.attributes:
        per = np.stack([D.attribute_distances(attr, r) for r in range(n)])
        np.testing.assert_array_equal(per, per.T)
        assert per.min() >= 0.0 and per.max() <= 1.0 + 1e-12
        same = (attr.values[:, None] == attr.values[None, :]) if attr.type == "continuous" \
            else (attr.codes[:, None] == attr.codes[None, :])
        assert np.all(per[same] == 0.0)
    for r in range(n):
        np.testing.assert_allclose(D.record_distances(enc, r), total[r], atol=1e-12)


@settings(max_examples=120, deadline=None)
@given(enc=mixed_tables())
def test_singleton_centroid_distance_equals_record_distance(enc):
    # for every type, including nominal: 0.5 * (1 - 2[a == b] + 1) = 1 - [a == b]
    for r in range(enc.n):
        cent = D.centroid(enc, [r])
        np.testing.assert_array_equal(D.centroid_distances(enc, cent), D.record_distances(enc, r))
        for attr, part in zip(enc.attributes, cent.parts):
            np.testing.assert_array_equal(D.attribute_centroid_distances(attr, part), D.attribute_distances(attr, r))


@settings(max_examples=120, deadline=None)
@given(enc=mixed_tables(), data=st.data())
def test_centroids_minimize_their_losses_and_agree_across_apis(enc, data):
    n = enc.n
    labels = np.array(data.draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n)))
    cs = D.centroids(enc, labels, groups=4)
    for j in range(4):
        members = np.flatnonzero(labels == j)
        if members.size == 0:
            continue
        one = D.centroid(enc, members)
        assert cs.values(j) == one.values()
        np.testing.assert_allclose(D.centroid_distances(enc, cs, j), D.centroid_distances(enc, one), atol=1e-12)
        # ordinal: the convex median is the lowest category minimizing the total distance
        o = enc["o"]
        totals = np.abs(o.pos[o.codes[members]][None, :] - o.pos[:, None]).sum(axis=1)
        best = np.flatnonzero(totals <= totals.min() + 1e-9)
        assert cs.part("o").rank[j] == best.min()
        # semantic: the medoid is the member value of least total CHT distance (ties: smallest)
        z = enc["z"]
        vals = np.unique(z.codes[members])
        tot = z.cht.matrix()[vals][:, z.codes[members]].sum(axis=1)
        assert cs.part("z").code[j] == vals[tot <= tot.min() + 1e-9].min()
        # nominal frequency distance stays in [0, 1]
        d = D.attribute_centroid_distances(enc["c"], cs.part("c"), j)
        assert d.min() >= -1e-15 and d.max() <= 1.0 + 1e-15
        # IL of the class, three ways
        il = D.class_il(enc, members)
        assert np.isclose(il, D.centroid_distances(enc, cs, j)[members].sum(), atol=1e-12)
        assert np.isclose(il, D.il_by_class(enc, labels, cents=cs)[j], atol=1e-12)
    for r in range(n):
        want = [D.centroid_distances(enc, cs, j)[r] for j in range(4)]
        np.testing.assert_allclose(D.distances_to_centroids(enc, r, cs), want, atol=1e-12)
