"""Code hierarchy tree distance (SPEC section 2; seed 000 Def. 6, eq. 8-9)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anonflow.errors import InputError
from anonflow_std.common.cht import CHT, edge_weights


def test_spec_example_150001_150002_vs_061110():
    # L = 6 symbols, h = 7, beta = 1, W(1,2) = 0:
    #   W(2,3..6,7) = 1/2, 1/3, 1/4, 1/5, 1/6; S = sum = 87/60 = 1.45
    # 150001 ~ 150002: LCP 5, C = '15000' at level 6: dis(P,C) = W(6,7)/S = (1/6)/(87/60) = 10/87
    #   disSA = 20/87 = 0.229885...
    # 150001 ~ 061110: LCP 0, C = root: dis(P,C) = S/S = 1, disSA = 2
    # present values {061110, 150001, 150002}: first/last = 061110/150002, LCP 0 -> Lmax = 2, Lmin = 0
    #   normalized: 10/87 = 0.114943 and 1
    cht = CHT(["150001", "150002", "061110"], beta=1.0, w12=0.0)
    assert cht.raw_distance("150001", "150002") == pytest.approx(20 / 87, abs=1e-15)
    assert cht.raw_distance("150001", "061110") == pytest.approx(2.0, abs=1e-15)
    assert cht.Lmin == 0.0 and cht.Lmax == pytest.approx(2.0)
    near = cht.distance("150001", "150002")
    far = cht.distance("150001", "061110")
    assert near == pytest.approx(10 / 87, abs=1e-15)
    assert far == pytest.approx(1.0, abs=1e-15)
    assert near < far / 8  # "far below"


def test_edge_weights():
    assert edge_weights(3, beta=1.0, w12=0.0) == pytest.approx([0.0, 1 / 2, 1 / 3])
    assert edge_weights(3, beta=1.0, w12=None) == pytest.approx([1.0, 1 / 2, 1 / 3])
    assert edge_weights(3, beta=2.0, w12=0.7) == pytest.approx([0.7, 1 / 4, 1 / 9])
    with pytest.raises(InputError):
        edge_weights(3, w12=-1.0)


def test_hand_computed_three_symbol_codes():
    # L = 3, beta = 1, w12 = None (the formula: W(1,2) = 1/1 = 1): weights 1, 1/2, 1/3, S = 11/6
    # 111 ~ 112: LCP 2: dis(P,C) = (1/3)/(11/6) = 2/11, disSA = 4/11
    # 111 ~ 121: LCP 1: dis(P,C) = (1/2 + 1/3)/(11/6) = 5/11, disSA = 10/11
    # 111 ~ 211: LCP 0: disSA = 2 = Lmax (first 111, last 211 share no prefix)
    # normalized: 2/11, 5/11, 1
    cht = CHT(["211", "121", "112", "111", "112"], beta=1.0, w12=None)
    assert cht.codes.to_pylist() == ["111", "112", "121", "211"]
    assert cht.raw_distance("111", "112") == pytest.approx(4 / 11)
    assert cht.raw_distance("111", "121") == pytest.approx(10 / 11)
    assert cht.Lmax == pytest.approx(2.0)
    np.testing.assert_allclose(cht.distance_to("111"), [0, 2 / 11, 5 / 11, 1], atol=1e-15)
    np.testing.assert_allclose(cht.distance_to(1), [2 / 11, 0, 5 / 11, 1], atol=1e-15)
    np.testing.assert_allclose(cht.pairwise([0, 1, 2], [3, 2, 2]), [1, 5 / 11, 0], atol=1e-15)
    np.testing.assert_array_equal(cht.lcp_to("121"), [1, 1, 3, 0])


def test_w12_zero_and_lmax_below_two():
    # L = 3, beta = 1, w12 = 0: weights 0, 1/2, 1/3, S = 5/6
    # 111 ~ 112: disSA = 2 * (1/3)/(5/6) = 4/5; 111 ~ 121: disSA = 2 * (5/6)/(5/6) = 2
    cht = CHT(["111", "112", "121", "211"], w12=0.0)
    assert cht.raw_distance("111", "112") == pytest.approx(4 / 5)
    assert cht.raw_distance("111", "121") == pytest.approx(2.0)
    # W(1,2) = 0: 121 and 211 differ in the first symbol only through a zero-weight edge,
    # so they are as far apart as 111 and 121
    assert cht.distance("111", "211") == pytest.approx(cht.distance("111", "121"))
    # Lmax over present values only: {111, 112, 121} with w12 = None share the prefix '1',
    # Lmax = disSA(111, 121) = 10/11, so 111 ~ 112 normalizes to (4/11)/(10/11) = 0.4
    sub = CHT(["111", "112", "121"], w12=None)
    assert sub.pmin == 1
    assert sub.Lmax == pytest.approx(10 / 11)
    assert sub.distance("111", "112") == pytest.approx(0.4)
    assert sub.distance("111", "121") == pytest.approx(1.0)


def test_beta_two():
    # L = 3, beta = 2, w12 = 0.5: weights 0.5, 1/4, 1/9; S = 31/36
    # 111 ~ 112: disSA = 2 * (1/9) / (31/36) = 8/31; Lmax = 2 (111 vs 211) -> normalized 4/31
    cht = CHT(["111", "112", "211"], beta=2.0, w12=0.5)
    assert cht.raw_distance("111", "112") == pytest.approx(8 / 31)
    assert cht.distance("111", "112") == pytest.approx(4 / 31)


def test_degenerate_trees():
    one = CHT(["12345", "12345"])
    assert one.m == 1 and one.Lmax == 0.0
    np.testing.assert_array_equal(one.distance_to(0), [0.0])
    flat = CHT(["1", "2", "3"], w12=0.0)  # L = 1 with W(1,2) = 0: every edge weighs 0
    np.testing.assert_array_equal(flat.matrix(), np.zeros((3, 3)))
    assert CHT(["1", "2"], w12=None).distance("1", "2") == 1.0


def test_errors():
    with pytest.raises(InputError, match="one length"):
        CHT(["123", "12"])
    with pytest.raises(InputError, match="missing"):
        CHT(pa.array(["123", None]))
    cht = CHT(["123", "124"])
    with pytest.raises(KeyError):
        cht.distance_to("999")
    with pytest.raises(IndexError):
        cht.distance_to(5)
    with pytest.raises(InputError):
        cht.indices(["123", "999"])
    np.testing.assert_array_equal(cht.indices(["124", "123", "124"]), [1, 0, 1])


def test_unicode_codes():
    # non-ASCII symbols take the code-point path; same arithmetic as for ASCII
    uni = CHT(["äöü", "äöx", "äyy", "zzz"], w12=None)
    asc = CHT(["aou", "aox", "ayy", "zzz"], w12=None)
    assert uni.codes.to_pylist() == sorted(["äöü", "äöx", "äyy", "zzz"])  # code-point order, like Python
    for (a, b), (x, y) in [(("äöü", "äöx"), ("aou", "aox")), (("äöü", "äyy"), ("aou", "ayy")),
                           (("äöx", "zzz"), ("aox", "zzz"))]:
        assert uni.distance(a, b) == asc.distance(x, y)
    assert uni.symbols.dtype == np.uint32 and asc.symbols.dtype == np.uint8


def test_long_codes_use_the_level_by_level_path():
    # 20 symbols of a 10-symbol alphabet need 4 bits each = 80 > 64 bits: no packing
    codes = ["1" * 20, "1" * 19 + "2", "1" * 10 + "2" * 10, "2" * 20, "0123456789" * 2]
    cht = CHT(codes, w12=None)
    assert cht._packed is None
    assert cht.codes.to_pylist()[1:] == codes[:4]
    np.testing.assert_array_equal(cht.lcp_to(1), [0, 20, 19, 10, 0])
    # 16 digits fit exactly (64 bits)
    assert CHT(["0123456789012345", "9876543210987654"])._packed is not None
    np.testing.assert_array_equal(cht.lcp([1, 2], [2, 4]), [19, 0])


def test_medoid_hand_computed():
    # codes 111, 112, 121, 211 with w12 = None: normalized d(111,112) = 2/11, d(111,121) = 5/11,
    # d(112,121) = 5/11. Group values [111, 112, 112, 121]:
    #   total(111) = 0 + 2*(2/11) + 5/11 = 9/11
    #   total(112) = 2/11 + 0 + 0 + 5/11 = 7/11   <- medoid
    #   total(121) = 5/11 + 2*(5/11) + 0 = 15/11
    cht = CHT(["111", "112", "121", "211"], w12=None)
    assert cht.medoid([0, 1, 1, 2]) == 1
    assert cht.medoid([0, 1, 2], counts=[1, 2, 1]) == 1
    # ties go to the smallest code: {111, 112}: 2/11 each -> 111
    assert cht.medoid([1, 0]) == 0
    # {111, 121, 211}: total(111) = 5/11 + 1 = total(121) = 5/11 + 1 < total(211) = 2 -> 111
    assert cht.medoid([3, 2, 0]) == 0
    # only member values are candidates: {111, 121} -> tie -> 111 (never a non-member)
    assert cht.medoid([2, 0]) == 0
    with pytest.raises(ValueError):
        cht.medoid([])


def test_medoids_of_many_groups():
    cht = CHT(["111", "112", "121", "211"], w12=None)
    values = [0, 1, 1, 2, 3, 2, 0, 3]
    labels = [0, 0, 0, 0, 1, 1, 1, 3]
    out = cht.medoids(values, labels, groups=4)
    np.testing.assert_array_equal(out, [1, 0, -1, 3])  # group 1 {211,121,111}: 111 (see above); 2 empty
    with pytest.raises(ValueError):
        cht.medoids([0, 1], [0, -1])
    with pytest.raises(ValueError):
        cht.medoids([0, 1], [0, 2], groups=2)
    assert cht.medoids([], [], groups=2).tolist() == [-1, -1]


def _reference_lcp(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


codes_strategy = st.integers(1, 7).flatmap(
    lambda length: st.lists(st.text(alphabet="0123", min_size=length, max_size=length), min_size=1, max_size=25))


@settings(max_examples=150, deadline=None)
@given(codes=codes_strategy, beta=st.sampled_from([0.5, 1.0, 2.0]), w12=st.sampled_from([0.0, None, 0.3]))
def test_cht_properties(codes, beta, w12):
    cht = CHT(codes, beta=beta, w12=w12)
    distinct = cht.codes.to_pylist()
    assert distinct == sorted(set(codes))
    mat = cht.matrix()
    # symmetric, zero on the diagonal, within [0, 1], and 1 attained when Lmax > 0
    np.testing.assert_array_equal(mat, mat.T)
    np.testing.assert_array_equal(np.diag(mat), np.zeros(cht.m))
    assert mat.min() >= 0.0 and mat.max() <= 1.0 + 1e-15
    if cht.Lmax > 0:
        assert mat.max() == pytest.approx(1.0)
    # a tree metric: the triangle inequality holds
    assert np.all(mat[:, None, :] <= mat[:, :, None] + mat[None, :, :] + 1e-12)
    # the distance of distinct codes is positive unless every edge below their LCA weighs 0
    if cht.length >= 2:
        assert np.all(mat[~np.eye(cht.m, dtype=bool)] > 0)
    # LCP against a Python reference, packed and level-by-level alike
    ref = np.array([[_reference_lcp(a, b) for b in distinct] for a in distinct])
    np.testing.assert_array_equal(cht.lcp(np.arange(cht.m)[:, None], np.arange(cht.m)[None, :]), ref)
    packed = cht._packed
    cht._packed = None
    try:
        np.testing.assert_array_equal(cht.lcp(np.arange(cht.m)[:, None], np.arange(cht.m)[None, :]), ref)
        np.testing.assert_array_equal(cht.lcp_to(0), ref[0])
    finally:
        cht._packed = packed
    np.testing.assert_array_equal(cht.lcp_to(cht.m - 1), ref[-1])
    # raw eq. 9 arithmetic against a direct evaluation of the SPEC formula
    h = cht.length + 1
    W = {j: (1.0 / (j - 1) ** beta if (j > 2 or w12 is None) else w12) for j in range(2, h + 1)}
    denom = sum(W.values())
    a, b = distinct[0], distinct[-1]
    p = _reference_lcp(a, b)
    raw = 2 * sum(W[j] for j in range(p + 2, h + 1)) / denom if denom > 0 else 0.0
    assert cht.raw_distance(a, b) == pytest.approx(raw, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), codes=codes_strategy)
def test_medoid_is_brute_force_argmin(data, codes):
    cht = CHT(codes, w12=None)
    members = data.draw(st.lists(st.integers(0, cht.m - 1), min_size=1, max_size=12))
    mat = cht.matrix()
    totals = mat[np.unique(members)][:, members].sum(axis=1)
    cands = np.unique(members)
    best = cands[totals <= totals.min() + 1e-9]
    assert cht.medoid(members) == best.min()
    # as one of many groups
    labels = data.draw(st.lists(st.integers(0, 2), min_size=len(members), max_size=len(members)))
    out = cht.medoids(members, labels, groups=3)
    for g in range(3):
        sel = [v for v, lab in zip(members, labels) if lab == g]
        assert out[g] == (cht.medoid(sel) if sel else -1)
