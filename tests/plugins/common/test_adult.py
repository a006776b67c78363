"""The kernels on the real Adult data (45,222 records; SPEC section 4's 7 mixed QIs)."""

from __future__ import annotations

import numpy as np
import pytest

from anonflow_std.common import distance as D
from anonflow_std.common.encode import encode

from .helpers import ADULT_QI, adult


@pytest.fixture(scope="module")
def typed():
    return adult()


@pytest.fixture(scope="module")
def enc(typed):
    return encode(typed)


def test_encoding_of_adult(typed, enc):
    assert adult(six_digit_fnlwgt=False).num_rows == 45222
    assert enc.n == typed.num_rows == 37290  # records whose fnlwgt has exactly 6 digits
    assert enc.names == [c for c in typed.typing.quasi] and set(enc.names) == set(ADULT_QI)
    assert {a.name: a.m for a in enc.attributes if a.type != "continuous"} == {
        "workclass": 7, "fnlwgt": 22037, "education": 16, "race": 5, "sex": 2, "native-country": 40}
    assert enc["sex"].categories == ["Female", "Male"]
    assert enc.decode("workclass").equals(typed.data["workclass"].combine_chunks())
    z = enc["fnlwgt"]
    assert z.decode().equals(typed.data["fnlwgt"].combine_chunks())
    assert z.cht.pmin == 0 and z.cht.Lmax == pytest.approx(2.0)  # codes start with 1..9
    assert (enc["age"].lo, enc["age"].hi) == (17.0, 90.0)


def test_cht_example_on_adult_codes(enc):
    # two fnlwgt values of Adult that share 5 digits are far closer than two that share none
    cht = enc["fnlwgt"].cht
    codes = cht.codes.to_pylist()
    a = next(c for i, c in enumerate(codes[:-1]) if codes[i + 1][:5] == c[:5])
    b = codes[codes.index(a) + 1]
    far = next(c for c in codes if c[0] != a[0])
    assert cht.distance(a, b) == pytest.approx(10 / 87)  # (1/6) / (87/60), Lmax = 2
    assert cht.distance(a, far) == 1.0


def test_record_distances_on_adult(enc):
    rng = np.random.default_rng(0)
    for i in rng.choice(enc.n, 5, replace=False):
        d = D.record_distances(enc, int(i))
        assert d[i] == 0.0 and d.min() >= 0.0 and d.max() <= 7.0
        others = rng.choice(enc.n, 200, replace=False)
        np.testing.assert_allclose(d[others], D.pair_distances(enc, others, np.full(200, i)))


def test_centroid_of_all_of_adult(typed, enc):
    c = D.centroid(enc, np.arange(enc.n))
    v = c.values()
    assert v["age"] == pytest.approx(float(np.mean(typed.data["age"].to_numpy())))
    for name in ("sex", "race", "education", "native-country", "workclass"):
        values, counts = np.unique(np.array(typed.data[name].to_pylist()), return_counts=True)
        assert v[name] == values[np.argmax(counts)]  # first maximum of sorted values: ties to the smallest
    assert v["sex"] == "Male" and v["native-country"] == "United-States"
    # the fnlwgt medoid of all 37,290 records, checked by brute force over its candidates' prefixes:
    # no other present code has a smaller total distance
    z = enc["fnlwgt"]
    counts = np.bincount(z.codes, minlength=z.m)
    medoid = z.cht.index(v["fnlwgt"])
    sample = np.random.default_rng(1).choice(z.m, 300, replace=False)
    best = (z.cht.distance_to(medoid) * counts).sum()
    for cand in sample:
        assert (z.cht.distance_to(int(cand)) * counts).sum() >= best - 1e-9


def test_medoid_of_a_class_by_brute_force(enc):
    z = enc["fnlwgt"]
    members = np.random.default_rng(2).choice(enc.n, 400, replace=False)
    vals = np.unique(z.codes[members])
    tot = z.cht.matrix(vals)[:, np.searchsorted(vals, z.codes[members])].sum(axis=1)
    assert D.centroid(enc, members).part("fnlwgt").code[0] == vals[tot <= tot.min() + 1e-9].min()


def test_education_as_ordinal_median_is_the_lower_median(typed):
    # education ordered by education-num (a bijection on Adult); the convex median category's
    # education-num is the lower median of education-num
    num = typed.data["education-num"].to_numpy()
    edu = np.array(typed.data["education"].to_pylist())
    order = tuple(dict(sorted({int(n): e for n, e in zip(num, edu)}.items())).values())
    assert len(order) == 16
    t = adult(types={"education": "ordinal"}, orders={"education": order})
    enc = encode(t)
    s = np.sort(num)
    rng = np.random.default_rng(3)
    for members in (np.arange(enc.n), rng.choice(enc.n, 101, replace=False), rng.choice(enc.n, 50, replace=False)):
        got = D.centroid(enc, members).values()["education"]
        s = np.sort(num[members])
        assert order.index(got) + 1 == s[(len(s) + 1) // 2 - 1]


def test_il_of_many_classes_on_adult(enc):
    rng = np.random.default_rng(4)
    labels = np.empty(enc.n, dtype=np.int64)
    labels[rng.permutation(enc.n)] = np.arange(enc.n) // 10
    cs = D.centroids(enc, labels)
    il = D.il_by_class(enc, labels, cents=cs)
    for j in rng.choice(cs.g, 20, replace=False):
        assert il[j] == pytest.approx(D.class_il(enc, np.flatnonzero(labels == j)), abs=1e-12)
    avg_il = float(np.mean(il / (cs.sizes * len(enc.attributes))))  # SPEC eq. 17-18
    assert 0.0 < avg_il < 1.0
    i = 17
    np.testing.assert_allclose(D.distances_to_centroids(enc, i, cs)[labels[i]],
                               D.own_centroid_distances(enc, labels, cs)[i])
