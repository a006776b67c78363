"""Balanced adjacent degree (SPEC section 8, seed 003 Def. 1-3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anonflow_std.microaggregation.grey_degree import balanced_adjacent_degree


def naive(x0, X, zeta):
    """The definitions written out literally (with p and E), for comparison."""
    D = np.abs(np.asarray(X, float) - np.asarray(x0, float))
    dmin, dmax = D.min(), D.max()
    r = (dmin + zeta * dmax) / (D + zeta * dmax)
    p = r / r.sum(axis=1, keepdims=True)
    m = D.shape[1]
    E = -(p * np.log(p)).sum(axis=1) / math.log(m)
    return E * r.mean(axis=1)


def test_hand_example_m3_with_dmin_zero():
    # x0 = (1, 2, 3); X1 = (2, 2, 5), X2 = (1, 2, 7); zeta = 0.5.
    # |x0 - X1| = (1, 0, 2), |x0 - X2| = (0, 0, 4)
    # Dmin = 0 (over all i and k), Dmax = 4, zeta * Dmax = 2
    # X1: r = 2/(1+2), 2/(0+2), 2/(2+2) = 2/3, 1, 1/2; sum 13/6, mean 13/18 = 0.722222
    #     p = 4/13, 6/13, 3/13
    #     -sum p ln p = 0.362663 + 0.356857 + 0.338385 = 1.057905; / ln 3 -> E = 0.962947
    #     B = 0.962947 * 0.722222 = 0.695462
    # X2: r = 1, 1, 2/(4+2) = 1/3; sum 7/3, mean 7/9 = 0.777778
    #     p = 3/7, 3/7, 1/7
    #     -sum p ln p = 0.363128 + 0.363128 + 0.277987 = 1.004242; / ln 3 -> E = 0.914101
    #     B = 0.914101 * 0.777778 = 0.710967
    # X2 is farther in Euclidean terms (4 vs sqrt 5) yet more "similar": B is not a
    # monotone function of the Euclidean distance.
    B = balanced_adjacent_degree([1, 2, 3], [[2, 2, 5], [1, 2, 7]], zeta=0.5)
    H1 = -sum(p * math.log(p) for p in (4 / 13, 6 / 13, 3 / 13))
    H2 = -sum(p * math.log(p) for p in (3 / 7, 3 / 7, 1 / 7))
    assert B[0] == pytest.approx(H1 / math.log(3) * 13 / 18, rel=1e-14)
    assert B[1] == pytest.approx(H2 / math.log(3) * 7 / 9, rel=1e-14)
    assert B == pytest.approx([0.6954617, 0.7109674], abs=1e-7)


def test_hand_example_m3_with_dmin_positive_default_zeta():
    # x0 = (0, 0, 0); X1 = (1, 1, 2), X2 = (1, -3, 1); zeta = 1.8 (default).
    # differences (1, 1, 2) and (1, 3, 1): Dmin = 1, Dmax = 3, zeta * Dmax = 5.4
    # numerator Dmin + zeta * Dmax = 6.4
    # X1: r = 6.4/6.4, 6.4/6.4, 6.4/7.4 = 1, 1, 32/37; mean 106/111 = 0.954955
    #     p = 37/106, 37/106, 16/53; -sum p ln p = 1.096350; E = 0.997941; B = 0.952988
    # X2: r = 1, 6.4/8.4 = 16/21, 1; mean 58/63 = 0.920635
    #     p = 21/58, 8/29, 21/58; -sum p ln p = 1.090937; E = 0.993013; B = 0.914203
    B = balanced_adjacent_degree([0, 0, 0], [[1, 1, 2], [1, -3, 1]])
    H1 = -sum(p * math.log(p) for p in (37 / 106, 37 / 106, 16 / 53))
    H2 = -sum(p * math.log(p) for p in (21 / 58, 8 / 29, 21 / 58))
    assert B[0] == pytest.approx(H1 / math.log(3) * 106 / 111, rel=1e-14)
    assert B[1] == pytest.approx(H2 / math.log(3) * 58 / 63, rel=1e-14)
    assert B == pytest.approx([0.9529882, 0.9142029], abs=1e-7)


def test_degenerate_cases():
    # Dmax = 0: every comparison record equals x0 -> B = 1 by definition
    assert balanced_adjacent_degree([1.0, 2.0], [[1.0, 2.0], [1.0, 2.0]]).tolist() == [1, 1]
    # m = 1: ln m = 0, E := 1, so B = r = (Dmin + zeta Dmax) / (d + zeta Dmax)
    # d = (0, 1, 2): Dmin 0, Dmax 2, zeta 1 -> r = 2/2, 2/3, 2/4
    B = balanced_adjacent_degree([5.0], [[5.0], [6.0], [3.0]], zeta=1.0)
    assert B == pytest.approx([1.0, 2 / 3, 1 / 2])
    assert balanced_adjacent_degree([0.0, 0.0], np.zeros((0, 2))).shape == (0,)


@pytest.mark.parametrize("zeta", [0, -1.0, float("nan"), float("inf")])
def test_zeta_must_be_positive(zeta):
    with pytest.raises(ValueError, match="zeta"):
        balanced_adjacent_degree([0.0, 1.0], [[1.0, 1.0]], zeta=zeta)


def test_bad_inputs():
    with pytest.raises(ValueError):
        balanced_adjacent_degree([0.0, 1.0], [[1.0, np.nan]])
    with pytest.raises(ValueError):
        balanced_adjacent_degree([0.0, 1.0], [[1.0, 1.0, 1.0]])
    with pytest.raises(ValueError):
        balanced_adjacent_degree([0.0, 1.0], [[1.0, 1.0]], out=np.empty(3))


def test_out_buffers_are_used_and_reusable():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 6))
    out, w, w2 = np.empty(100), np.empty((100, 6)), np.empty((100, 6))
    got = balanced_adjacent_degree(X[3], X, out=out, work=w, work2=w2)
    assert got is out
    assert np.allclose(got, naive(X[3], X, 1.8), rtol=1e-13, atol=0)
    again = balanced_adjacent_degree(X[7], X, out=out, work=w, work2=w2)
    assert np.allclose(again, naive(X[7], X, 1.8), rtol=1e-13, atol=0)


def test_measure_depends_on_the_comparison_set():
    # Dmin and Dmax are set-wide: the same pair scores differently in another set.
    x0, a = [0.0, 0.0], [1.0, 2.0]
    alone = balanced_adjacent_degree(x0, [a])[0]
    with_far = balanced_adjacent_degree(x0, [a, [10.0, 10.0]])[0]
    assert alone != pytest.approx(with_far)


# -- properties ---------------------------------------------------------------------------

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@st.composite
def comparison_sets(draw):
    m = draw(st.integers(2, 6))
    n = draw(st.integers(1, 12))
    x0 = np.array([draw(finite) for _ in range(m)])
    X = np.array([[draw(finite) for _ in range(m)] for _ in range(n)])
    zeta = draw(st.floats(0.05, 5.0))
    return x0, X, zeta


@settings(max_examples=300, deadline=None)
@given(comparison_sets())
def test_bounds_and_agreement_with_the_literal_definitions(case):
    """B is in [zeta/(1+zeta), 1], a subset of (0, 1]: every r(k) lies in
    [zeta/(1+zeta), 1] and B increases in each r(k), with B(c, ..., c) = c."""
    x0, X, zeta = case
    B = balanced_adjacent_degree(x0, X, zeta)
    assert np.all(B > 0) and np.all(B <= 1.0)
    assert np.all(B >= zeta / (1 + zeta) - 1e-12)
    if np.abs(X - x0).max() > 0:
        assert np.allclose(B, np.minimum(naive(x0, X, zeta), 1.0), rtol=1e-10, atol=1e-12)


@settings(max_examples=300, deadline=None)
@given(comparison_sets(), st.data())
def test_reference_record_is_the_maximum_when_in_the_set(case, data):
    """With x0 in the set, Dmin = 0 and r = 1 for x0, so B(x0, x0) = 1 >= every other B,
    with equality only for copies of x0 (this *is* true with the balance factor:
    B = (S ln S - sum r ln r)/(m ln m) is increasing in every r(k) and equals 1 at
    r = (1, ..., 1))."""
    x0, X, zeta = case
    pos = data.draw(st.integers(0, len(X)))
    Xs = np.insert(X, pos, x0, axis=0)
    B = balanced_adjacent_degree(x0, Xs, zeta)
    assert B[pos] == 1.0
    assert B.max() == 1.0
    # strictly below 1 for every record that differs (beyond rounding: a difference of
    # 1e-54 next to Dmax = 1 leaves r(k) = 1.0 in floating point)
    D = np.abs(Xs - x0)
    differs = D.max(axis=1) > 1e-6 * D.max()
    assert np.all(B[differs] < 1.0)


@settings(max_examples=300, deadline=None)
@given(comparison_sets(), st.data())
def test_monotone_under_coordinatewise_dominance(case, data):
    """Within one comparison set, a record no farther than another in EVERY attribute has
    no smaller B (not true for Euclidean-closer records in general: see the hand example)."""
    x0, X, zeta = case
    m = X.shape[1]
    shrink = np.array([data.draw(st.floats(0.0, 1.0)) for _ in range(m)])
    closer = x0 + (X[0] - x0) * shrink
    B = balanced_adjacent_degree(x0, np.vstack([X, closer]), zeta)
    assert B[-1] >= B[0] - 1e-12


@settings(max_examples=200, deadline=None)
@given(comparison_sets(), st.floats(-100, 100), st.floats(0.01, 100), st.randoms())
def test_invariances(case, shift, scale, rnd):
    """Translation, positive scaling and a common permutation of the attributes leave B
    unchanged (r depends only on ratios of differences)."""
    x0, X, zeta = case
    B = balanced_adjacent_degree(x0, X, zeta)
    perm = list(range(X.shape[1]))
    rnd.shuffle(perm)
    assert np.allclose(balanced_adjacent_degree(x0[perm], X[:, perm], zeta), B,
                       rtol=1e-12, atol=1e-12)
    if np.abs(X - x0).max() > 1e-6:
        got = balanced_adjacent_degree((x0 + shift) * scale, (X + shift) * scale, zeta)
        assert np.allclose(got, B, rtol=1e-7, atol=1e-9)


def test_speed_smoke():
    """45,222 x 6 (Adult-sized) runs in milliseconds; generous bound for shared CI."""
    import time

    rng = np.random.default_rng(0)
    X = rng.standard_normal((45_222, 6))
    out, w, w2 = np.empty(45_222), np.empty((45_222, 6)), np.empty((45_222, 6))
    balanced_adjacent_degree(X[0], X, out=out, work=w, work2=w2)
    t0 = time.perf_counter()
    for _ in range(10):
        balanced_adjacent_degree(X[0], X, out=out, work=w, work2=w2)
    assert (time.perf_counter() - t0) / 10 < 0.1
