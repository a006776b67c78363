"""The MDAV family of SPEC section 8 (seed 003): V-MDAV, GRAV, V-GRAV, the DLD risk measure,
and the ``refine`` local search.

The fast kernels are checked label for label against ``reference`` below, a deliberately
naive implementation that follows the definitions literally (boolean masks over all
records, one full scan of the comparison set per query); MDAV itself is covered by
``test_microagg_kernel.py`` and ``test_mdav.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anonflow.errors import InputError
from anonflow_std.microaggregation.grey_degree import balanced_adjacent_degree
from anonflow.params import ParamError, validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.microaggregation.mdav import Grav, Mdav, Refine, VGrav, VMdav
from anonflow_std.risk.dld import Dld, linked_records
from anonflow_std.microaggregation.refine import refine_partition, sse
from anonflow_std.privacy.kanonymity import KAnonymity
from anonflow_std.microaggregation.kernels import mdav_partition, vmdav_partition
from anonflow_std.microaggregation.leaf_index import Euclidean
from anonflow_std.microaggregation.grey_similarity import Grey, grey_scores
from anonflow_std.utility.sse import SseIl

from tests.support.helpers import WORKFLOWS, census_workflow
from tests.plugins.microaggregation.test_mdav import load as load_table
from tests.plugins.microaggregation.test_mdav_kernel import load as load_z

# -- reference implementation -------------------------------------------------------------


def _scores(X, q, rows, kind, zeta):
    """Similarity of ``q`` to ``X[rows]`` (larger = nearer), the comparison set being ``rows``.

    Grey: ``B0`` (the degree with Dmin = 0), which ranks exactly as ``B`` does."""
    if kind == "euclid":
        out = np.zeros(rows.size)
        for j in range(X.shape[1]):
            out += (X[rows, j] - q[j]) ** 2
        return -out
    D = np.abs(X[rows] - q).T
    return grey_scores(D, 0.0, float(D.max()), zeta)


def _best_value(X, q, rows, kind, zeta):
    """(largest similarity as the extension test uses it, its lowest row)."""
    s = _scores(X, q, rows, kind, zeta)
    top = float(s.max())
    j = int(rows[s == top].min())
    if kind == "euclid":
        return top, j
    D = np.abs(X[rows] - q)
    a = zeta * float(D.max())
    return (top if a == 0 else min(1.0, top * ((float(D.min()) + a) / a))), j


def reference(X, k, algo, kind, gamma=0.2, stop="k", zeta=1.8):
    """MDAV / V-MDAV with Euclidean or grey similarity, straight from SPEC section 8."""
    X = np.asarray(X, dtype=float)
    if kind == "grey":  # attributes constant over the table are left out
        varying = X.max(axis=0) > X.min(axis=0)
        X = X[:, varying] if varying.any() else np.zeros((X.shape[0], 1))
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    remaining = np.ones(n, dtype=bool)
    count = [0]

    def farthest(q, candidates):
        rows = np.flatnonzero(candidates)
        s = _scores(X, q, rows, kind, zeta)
        return int(rows[s == s.min()].min())

    def with_nearest(i):  # i and its k - 1 nearest among the other remaining records
        rows = np.flatnonzero(remaining & (np.arange(n) != i))
        s = _scores(X, X[i], rows, kind, zeta)
        return np.concatenate(([i], rows[np.lexsort((rows, -s))[: k - 1]]))

    def form(members):
        labels[members] = count[0]
        remaining[members] = False
        count[0] += 1

    if algo == "mdav":
        if n >= 2 * k:
            while remaining.sum() >= 3 * k:
                r = farthest(X[remaining].mean(axis=0), remaining)
                first = with_nearest(r)
                rows = np.flatnonzero(remaining & (np.arange(n) != r))
                s = _scores(X, X[r], rows, kind, zeta)  # r's comparison set, before its group leaves
                outside = ~np.isin(rows, first)
                rows, s = rows[outside], s[outside]
                s_rec = int(rows[s == s.min()].min())
                form(first)
                form(with_nearest(s_rec))
            if remaining.sum() >= 2 * k:
                form(with_nearest(farthest(X[remaining].mean(axis=0), remaining)))
        if remaining.any():
            form(np.flatnonzero(remaining))
        return labels

    while remaining.sum() >= (k if stop == "k" else 2 * k):
        e = farthest(X[remaining].mean(axis=0), remaining)
        group = list(with_nearest(e))
        remaining[group] = False
        while len(group) < 2 * k - 1 and remaining.sum() >= 2:
            rows = np.flatnonzero(remaining)
            b_in, e_in = -np.inf, -1
            for m in group:
                top, j = _best_value(X, X[m], rows, kind, zeta)
                if top > b_in or (top == b_in and j < e_in):
                    b_in, e_in = top, j
            b_out, _ = _best_value(X, X[e_in], rows[rows != e_in], kind, zeta)
            if kind == "euclid":
                ok = math.sqrt(-b_in) < gamma * math.sqrt(-b_out)
            else:
                ok = gamma * b_in > b_out
            if not ok:
                break
            remaining[e_in] = False
            group.append(e_in)
        labels[group] = count[0]
        count[0] += 1
    rest = np.flatnonzero(remaining)
    if rest.size >= k or (rest.size and count[0] == 0):
        labels[rest] = count[0]
    elif rest.size:  # leftovers join the group with the nearest centroid
        centroids = np.array([X[labels == g].mean(axis=0) for g in range(count[0])])
        for row in rest:
            labels[row] = int(np.argmax(_scores(centroids, X[row], np.arange(count[0]), kind, zeta)))
    return labels


def fast(X, k, algo, kind, gamma=0.2, stop="k", zeta=1.8):
    sim = Euclidean() if kind == "euclid" else Grey(zeta)
    if algo == "mdav":
        return mdav_partition(X, k, similarity=sim)
    return vmdav_partition(X, k, gamma, stop=stop, similarity=sim)


VARIANTS = [  # (algorithm, similarity, gamma, stop)
    ("mdav", "grey", None, "k"),  # GRAV
    ("vmdav", "euclid", 0.2, "k"),  # V-MDAV, SPEC's stopping rule
    ("vmdav", "euclid", 1.1, "2k"),  # V-MDAV, seed 003's stopping rule, extending often
    ("vmdav", "grey", 0.2, "k"),  # V-GRAV as in seed 003 (never extends)
    ("vmdav", "grey", 1.05, "k"),  # V-GRAV extending often
    ("vmdav", "grey", 1.2, "2k"),
]


def small_cases():
    rng = np.random.default_rng(20261125)
    cases = [(f"gauss-{n}x{d}", rng.standard_normal((n, d))) for n, d in [(7, 2), (20, 2), (61, 3), (150, 4), (200, 6)]]
    cases += [(f"grid{v}-{n}x{d}", rng.integers(0, v, size=(n, d)).astype(float))
              for n, d, v in [(30, 2, 2), (64, 3, 3), (120, 2, 4), (90, 5, 3)]]
    cases.append(("duplicates-80x3", rng.standard_normal((15, 3))[rng.integers(0, 15, size=80)]))
    cases.append(("identical-20x2", np.ones((20, 2))))
    cases.append(("one-column-40x1", rng.standard_normal((40, 1))))
    return cases


SMALL = small_cases()


@pytest.mark.parametrize("variant", VARIANTS, ids=["-".join(map(str, v)) for v in VARIANTS])
@pytest.mark.parametrize("name,X", SMALL, ids=[c[0] for c in SMALL])
def test_labels_equal_the_reference_on_small_arrays_with_ties(name, X, variant):
    algo, kind, gamma, stop = variant
    for k in (2, 3, 5):
        if k <= X.shape[0]:
            np.testing.assert_array_equal(fast(X, k, algo, kind, gamma or 0.2, stop),
                                          reference(X, k, algo, kind, gamma or 0.2, stop))


REAL_CASES = [("tarragona", v) for v in VARIANTS] + [("census", v) for v in VARIANTS[:4]]


@pytest.mark.parametrize("name,variant", REAL_CASES, ids=[f"{n}-" + "-".join(map(str, v)) for n, v in REAL_CASES])
def test_labels_equal_the_reference_on_real_data(name, variant):
    algo, kind, gamma, stop = variant
    X = load_z(name)
    if gamma and gamma > 1 and kind == "grey":
        X = X[:400]  # the reference's extension is slow (a full scan per member and step)
    k = 5
    np.testing.assert_array_equal(fast(X, k, algo, kind, gamma or 0.2, stop),
                                  reference(X, k, algo, kind, gamma or 0.2, stop))


def test_euclidean_similarity_is_mdav_unchanged():
    X = load_z("tarragona")
    np.testing.assert_array_equal(mdav_partition(X, 4, similarity=Euclidean()), mdav_partition(X, 4))


# -- the balanced adjacent degree in the loops ------------------------------------------


def test_grey_scores_equal_the_engine_kernel():
    rng = np.random.default_rng(3)
    for m in (1, 2, 6, 13):
        X = rng.standard_normal((200, m))
        x0 = rng.standard_normal(m)
        D = np.abs(X - x0)
        for zeta in (0.3, 1.8, 5.0):
            ours = grey_scores(D.T, float(D.min()), float(D.max()), zeta)
            np.testing.assert_allclose(ours, balanced_adjacent_degree(x0, X, zeta), rtol=1e-12, atol=0)
            # B0 (Dmin = 0) ranks as B does: B = c * B0 with c = (Dmin + zeta Dmax) / (zeta Dmax)
            b0 = grey_scores(D.T, 0.0, float(D.max()), zeta)
            assert (np.argsort(-b0, kind="stable") == np.argsort(-ours, kind="stable")).all()
            assert ours.min() >= zeta / (1 + zeta) - 1e-12  # the bound behind never_extends


def test_hand_example_of_a_tiny_grav_run():
    # Six records, two attributes, k = 3, no standardization; n = 2k: GRAV forms one group
    # around r = the record least similar to the centroid, the rest form the last group.
    X = np.array([(3, 0), (-2, -2), (-1, 2), (0, 1), (1, -1), (-1, 0)], dtype=float)
    # Centroid c = (0, 0); |x - c| = (3,0) (2,2) (1,2) (0,1) (1,1) (1,0): Dmin = 0, Dmax = 3,
    # zeta*Dmax = 5.4, numerator 0 + 5.4.
    #   record 0: r = 5.4/8.4, 5.4/5.4 = 0.642857, 1; mean 0.821429; p = 0.391304, 0.608696;
    #             -sum p ln p = 0.669328, / ln 2 -> E = 0.965636; B = 0.793201
    #   record 1: r = 5.4/7.4 = 0.729730 twice; E = 1; B = 0.729730   <- least: r = record 1
    #   record 2: r = 0.84375, 0.729730 -> B = 0.783757; records 3, 5: 0.917093; record 4: 0.84375
    B_c = balanced_adjacent_degree([0, 0], X)
    np.testing.assert_allclose(B_c, [0.793201, 0.729730, 0.783757, 0.917093, 0.84375, 0.917093], atol=1e-6)
    # (Euclidean MDAV would start from record 0, at distance 3 > sqrt(8).)
    # Record 1 = (-2,-2) against the other five: |d| = (5,2) (1,4) (2,3) (3,1) (1,2):
    # Dmin = 1, Dmax = 5, zeta*Dmax = 9, numerator 10.
    #   record 5: r = 10/10, 10/11 = 1, 0.909091; mean 0.954545; p = 0.523810, 0.476190;
    #             -sum p ln p = 0.692013, / ln 2 -> E = 0.998364; B = 0.952984
    #   record 4: r = 10/12, 10/10; mean 0.916667; p = 0.454545, 0.545455; E = 0.994030; B = 0.911194
    #   record 2: r = 1, 10/13 -> B = 0.873728; record 3: 10/11, 10/12 -> 0.870024;
    #   record 0: 10/14, 10/11 -> 0.803237
    B_r = balanced_adjacent_degree(X[1], X[[0, 2, 3, 4, 5]])
    np.testing.assert_allclose(B_r, [0.803237, 0.873728, 0.870024, 0.911194, 0.952984], atol=1e-6)
    # so r's group is {1, 5, 4} (largest B) and {0, 2, 3} is the last group
    np.testing.assert_array_equal(mdav_partition(X, 3, similarity=Grey()), [1, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(mdav_partition(X, 3), [0, 1, 1, 0, 0, 1])  # MDAV differs
    # the plugin (no standardization) publishes the group means
    table = typed_table({"a": X[:, 0].tolist(), "b": X[:, 1].tolist()}, quasi={"a": "continuous", "b": "continuous"})
    out = Grav().run(table, {"k": 3, "zeta": 1.8, "standardize": False}, make_context())
    assert out.data.column("a").to_pylist() == pytest.approx([2 / 3, -2 / 3, 2 / 3, 2 / 3, -2 / 3, -2 / 3])


def test_v_grav_with_seed_003_gamma_never_extends():
    # B >= zeta/(1+zeta) = 0.643 and B <= 1: gamma * b_in > b_out fails for gamma = 0.2, so
    # every group has exactly k records until the leftovers join.
    X = load_z("census")
    labels = vmdav_partition(X, 4, 0.2, similarity=Grey())
    sizes = np.bincount(labels)
    assert (sizes >= 4).all() and sizes.sum() == 1080
    assert sorted(set(sizes.tolist())) == [4]  # 1080 = 270 * 4: no leftovers either
    ctx = make_context()
    table = load_table("tarragona")
    VGrav().run(table, {"k": 5, "zeta": 1.8, "gamma": 0.2, "stop": "k", "standardize": True}, ctx)
    assert any("never holds" in note for note in ctx.notes)


# -- group sizes, leftovers and k-anonymity on real data ------------------------------


PLUGINS = {
    "v-mdav": (VMdav(), {"gamma": 0.2, "stop": "k"}),
    "grav": (Grav(), {"zeta": 1.8}),
    "v-grav": (VGrav(), {"zeta": 1.8, "gamma": 0.2, "stop": "k"}),
}


def anonymize(plugin, table, **params):
    params = {"standardize": True, **params}
    plugin.check(params, table=table)
    out = plugin.run(table, params, make_context())
    return out.replace(claims=plugin.claims(params))


@pytest.mark.parametrize("name", ["census", "tarragona", "eia"])
@pytest.mark.parametrize("algorithm", sorted(PLUGINS))
def test_group_sizes_and_k_anonymity_on_real_data(name, algorithm):
    plugin, extra = PLUGINS[algorithm]
    table = load_table(name)
    for k in (3, 10) if name != "eia" else (5,):
        out = anonymize(plugin, table, k=k, **extra)
        sizes = np.bincount(out.classes())
        n = table.num_rows
        if algorithm == "grav":  # MDAV's sizes: k, the last group k..2k-1
            assert (sizes[:-1] == k).all() and k <= sizes[-1] <= 2 * k - 1
        else:  # k..2k-1, plus at most k-1 leftovers in all
            assert sizes.min() >= k
            assert (sizes - np.minimum(sizes, 2 * k - 1)).sum() <= k - 1
            assert sizes.max() <= 3 * k - 2
        assert sizes.sum() == n
        check = KAnonymity().compute(None, out, {"k": None, "by": None}, make_context())
        assert check["k-anonymity.holds"] == 1 and check["k-anonymity"] >= k
        assert np.array_equal(out.rows(), table.rows())


def test_leftovers_join_the_group_with_the_nearest_centroid_and_may_exceed_2k_minus_1():
    # 1-D, k = 3. Records: five near 0, two at 10 and 11.
    X = np.array([[0.0], [0.1], [0.2], [0.35], [0.4], [10.0], [11.0]])
    # gamma = 10: the centroid is 3.15, the farthest record 11 (row 6); with its 2 nearest,
    # 10 and 0.4, it forms group 0 = {6, 5, 4}. Extension: the unassigned record nearest to the
    # group is 0.35 (d_in = 0.05, from 0.4), whose nearest other is 0.2 (d_out = 0.15):
    # 0.05 < 10 * 0.15, added; then 0.2 (d_in 0.15; d_out 0.1 to 0.1) is added: 5 = 2k - 1.
    # Rows 0 and 1 are left (2 < k): both join the only group, which ends with 7 = 3k - 2.
    np.testing.assert_array_equal(vmdav_partition(X, 3, 10.0), np.zeros(7, dtype=np.int64))
    # gamma = 0.2: 0.05 < 0.2 * 0.15 fails, group 0 stays {6, 5, 4}. Of the four left, 0.35
    # (row 3) is farthest from their centroid 0.1625: group 1 = {3, 2, 1}. Row 0 is then the
    # only unassigned record: nothing to compare it with, so it is a leftover and joins the
    # group with the nearest centroid: group 1 (0.217) rather than group 0 (7.13).
    np.testing.assert_array_equal(vmdav_partition(X, 3, 0.2), [1, 1, 1, 1, 0, 0, 0])
    # seed 003's rule (stop at 2k): after group 0, 4 records remain (< 2k = 6, >= k): last group
    np.testing.assert_array_equal(vmdav_partition(X, 3, 0.2, stop="2k"), [1, 1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(vmdav_partition(X[:5], 3, 0.2, stop="2k"), [0, 0, 0, 0, 0])  # n < 2k: one group
    for gamma in (0.2, 10.0):
        np.testing.assert_array_equal(vmdav_partition(X, 3, gamma, similarity=Grey()),
                                      reference(X, 3, "vmdav", "grey", gamma))


def test_stop_rules_differ_as_documented():
    X = load_z("tarragona")
    for sim in (Euclidean(), Grey()):
        a = vmdav_partition(X, 7, 0.2, stop="k", similarity=sim)
        b = vmdav_partition(X, 7, 0.2, stop="2k", similarity=sim)
        for labels in (a, b):
            sizes = np.bincount(labels)
            assert sizes.min() >= 7 and sizes.sum() == 834
        # the groups formed while >= 2k remain are the same under both rules (here the "2k"
        # run ends with a last group of k..2k-1 records and no leftovers)
        assert np.array_equal(a[b < b.max()], b[b < b.max()])


# -- DLD ---------------------------------------------------------------------------


def test_dld_hand_example_with_ties():
    Zo = np.array([[0.0], [1.0], [2.0], [4.0]])
    Zm = np.array([[0.5], [0.5], [3.0], [1.5]])
    # record 0: distances 0.5 0.5 1.5 3.5 -> d(2) = 0.5 = own -> linked (tie at the top)
    # record 1: same distances, own 0.5 -> linked
    # record 2: distances 3 2 1 1 -> d(2) = 1 = own (records 2 and 3 tie) -> linked
    # record 3: distances 1.5 0.5 0.5 2.5 -> d(2) = 0.5 < own 2.5 -> not linked
    np.testing.assert_array_equal(linked_records(Zo, Zm), [True, True, True, False])
    # a three-way tie at the second-nearest distance: all three count. Record 2 is published
    # at (0, 0): its distances to the originals (1, 0), (-1, 0), (0, 1) are 1, 1, 1 (its own
    # is (0, 1)) and 7.07 to (5, 5), so d(1) = d(2) = 1 = own -> linked; records 0, 1 and 3
    # are published unchanged (own distance 0) -> linked
    Zo = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    Zm = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0], [5.0, 5.0]])
    assert linked_records(Zo, Zm).tolist() == [True, True, True, True]
    # a tie in exact arithmetic that floating point splits by one ulp. Record 1 is published
    # at 0.3; by hand its distances to the originals 0.1, 0.5 (its own) and 0.31 are 0.2, 0.2
    # and 0.01, so d(2) = 0.2 = own -> linked. In doubles 0.3 - 0.1 = 0.19999999999999998 and
    # 0.5 - 0.3 = 0.2, so a comparison without the tie tolerance calls it not linked.
    # Records 0 and 2 are published unchanged -> linked.
    Zo = np.array([[0.1], [0.5], [0.31]])
    Zm = np.array([[0.1], [0.3], [0.31]])
    assert linked_records(Zo, Zm).tolist() == [True, True, True]
    # the tolerance absorbs rounding, not real gaps: with record 1's original at 0.5000001
    # its own distance is 0.2000001 > d(2) = 0.2 (5e-7 relative) -> not linked; record 2's
    # distances become 0, 0.1900001, 0.21 (own 0) -> still linked
    Zo = np.array([[0.1], [0.5000001], [0.31]])
    assert linked_records(Zo, Zm).tolist() == [True, False, True]


def test_dld_metric_standardizes_by_the_original_and_reports_a_fraction():
    # Identity masking: every record is its own nearest -> 1. Everything published at the
    # global mean: only the originals nearest to the mean (with ties) are linked.
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    table = typed_table({"a": values, "b": [v * 1000 for v in values]},
                        quasi={"a": "continuous", "b": "continuous"})
    assert Dld().compute(table, table, {"columns": None}, make_context())["dld"] == 1.0
    flat = typed_table({"a": [4.0] * 5, "b": [4000.0] * 5}, quasi={"a": "continuous", "b": "continuous"})
    out = Dld().compute(table, flat, {"columns": None}, make_context())
    # distances to the mean 4: 3, 2, 1, 0, 6 (scaled alike): the two nearest are rows 3 and 2
    assert out == {"dld": 2 / 5, "dld.linked": 2.0, "dld.records": 5.0}


def test_dld_on_mdav_output_decreases_with_k():
    table = load_table("census")
    dld = [Dld().compute(table, anonymize(Mdav(), table, k=k), {"columns": None}, make_context())["dld"]
           for k in (3, 10)]
    assert 0 < dld[1] < dld[0] < 1


def test_dld_rejects_non_numeric_columns():
    table = typed_table({"a": [1.0, 2.0], "s": ["x", "y"]}, quasi={"a": "continuous", "s": "nominal"})
    with pytest.raises(InputError, match="not numeric"):
        Dld().compute(table, table, {"columns": ["a", "s"]}, make_context())


# -- refine ----------------------------------------------------------------------------


def refine_table(original, partition, **params):
    params = {"k": None, "neighbours": 8, "rounds": 100, "kicks": 0, "seconds": 60.0, "standardize": True,
              **params}
    ctx = make_context()
    ctx.inputs = [original, partition]
    Refine().check(params, table=original)
    return Refine().run(original, params, ctx), ctx


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 120), d=st.integers(1, 4), k=st.integers(2, 6),
       kicks=st.integers(0, 30), variable=st.booleans())
def test_refine_never_increases_sse_and_keeps_sizes(seed, n, d, k, kicks, variable):
    rng = np.random.default_rng(seed)
    k = min(k, n // 2)
    Z = rng.standard_normal((n, d))
    labels = vmdav_partition(Z, k, 1.5) if variable else mdav_partition(Z, k)
    sizes = np.bincount(labels)
    res = refine_partition(Z, labels, k, np.random.default_rng(seed), kicks=kicks)
    assert res.sse_after <= res.sse_before + 1e-12
    assert sse(Z, res.labels) == pytest.approx(res.sse_after)
    after = np.bincount(res.labels)
    assert after.min() >= k
    # groups within [k, 2k-1] stay there; a group above 2k-1 only shrinks
    upper = np.maximum(sizes, 2 * k - 1)
    assert (after <= upper).all()


def test_refine_reaches_the_literature_on_census():
    # simple move/swap search is reported at 5.26 / 8.21 / 12.34 from MDAV's 5.69 / 9.09 / 14.16
    table = load_table("census")
    for k, target, kicks in [(3, 5.26, 300), (5, 8.21, 300), (10, 12.34, 150)]:
        grouped = anonymize(Mdav(), table, k=k)
        out, ctx = refine_table(table, grouped, kicks=kicks)
        il = SseIl().compute(table, out, {"columns": None}, make_context())["sse-il"]
        assert il <= target, (k, il)
        sizes = np.bincount(out.classes())
        assert sizes.min() >= k and sizes.max() <= 2 * k - 1
        assert out.claims == {"k-anonymity": {"k": k}}
        assert KAnonymity().compute(None, out, {"k": None, "by": None}, make_context())["k-anonymity.holds"] == 1
        assert any("SSE" in note for note in ctx.notes)


def test_refine_descent_alone_improves_and_is_seeded():
    table = load_table("tarragona")
    grouped = anonymize(VMdav(), table, k=4, gamma=0.2, stop="k")
    a, _ = refine_table(table, grouped)
    b, _ = refine_table(table, grouped)
    assert a.data.equals(b.data)  # same seed (the context's), same output
    il = [SseIl().compute(table, t, {"columns": None}, make_context())["sse-il"] for t in (grouped, a)]
    assert il[1] < il[0]


def test_refine_matches_records_through_row_ids():
    table = load_table("tarragona")
    grouped = anonymize(Mdav(), table, k=5)
    shuffled = grouped.replace(data=grouped.data.take(np.random.default_rng(1).permutation(834)))
    a, _ = refine_table(table, grouped, rounds=1)
    b, _ = refine_table(table, shuffled, rounds=1)
    assert a.data.equals(b.data)


def test_refine_bad_inputs():
    table = load_table("tarragona")
    with pytest.raises(InputError, match="no _class column"):
        refine_table(table, table)
    grouped = anonymize(Mdav(), table, k=5)
    with pytest.raises(InputError, match="parameter 'k' = 6, but the given partition has a group of 5"):
        refine_table(table, grouped, k=6)
    with pytest.raises(InputError, match="different records"):
        refine_table(table, grouped.replace(data=grouped.data.slice(0, 800)))


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("plugin", [Grav(), VGrav()])
def test_zeta_must_be_positive(plugin):
    with pytest.raises(ParamError, match="parameter 'zeta': expected a number > 0, got -1"):
        validate_params(plugin.params, {"k": 3, "zeta": -1})
    with pytest.raises(ParamError, match="parameter 'zeta': expected a number > 0, got 0"):
        validate_params(plugin.params, {"k": 3, "zeta": 0})
    with pytest.raises(ValueError, match="zeta"):
        Grey(0)


@pytest.mark.parametrize("plugin", [VMdav(), VGrav()])
def test_gamma_must_not_be_negative(plugin):
    with pytest.raises(ParamError, match="parameter 'gamma': expected a number >= 0, got -0.1"):
        validate_params(plugin.params, {"k": 3, "gamma": -0.1})
    with pytest.raises(ParamError, match="parameter 'stop': expected one of 'k', '2k'"):
        validate_params(plugin.params, {"k": 3, "stop": "3k"})
    with pytest.raises(ValueError, match="gamma"):
        vmdav_partition(np.zeros((4, 1)), 2, -1.0)


@pytest.mark.parametrize("plugin", [VMdav(), Grav(), VGrav(), Refine()])
def test_non_numeric_quasi_identifiers_are_named_with_a_typing_hint(plugin):
    table = typed_table({"age": [1.0, 2.0, 3.0], "sex": ["F", "M", "F"]},
                        quasi={"age": "continuous", "sex": "nominal"})
    params = validate_params(plugin.params, {"k": 2} if plugin.name != "refine" else {})
    with pytest.raises(InputError, match=r"quasi-identifier 'sex' is typed nominal; type it continuous in the "
                                         r"typing step \(quasi: \{sex: continuous\}\)"):
        plugin.check(params, table=table)


@pytest.mark.parametrize("algorithm", sorted(PLUGINS))
def test_constant_columns_are_ignored_for_grouping_and_published_unchanged(algorithm):
    plugin, extra = PLUGINS[algorithm]
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(40).tolist(), rng.standard_normal(40).tolist()
    with_constant = typed_table({"a": a, "c": [7.0] * 40, "b": b},
                                quasi={"a": "continuous", "c": "continuous", "b": "continuous"})
    without = typed_table({"a": a, "b": b}, quasi={"a": "continuous", "b": "continuous"})
    params = {"k": 3, "standardize": True, **extra}
    ctx = make_context()
    out = plugin.run(with_constant, params, ctx)
    np.testing.assert_array_equal(out.classes(), plugin.run(without, params, make_context()).classes())
    assert out.data.column("c").to_pylist() == [7.0] * 40
    assert any("constant column(s) c" in note for note in ctx.notes)
    # all columns constant: every record is alike, groups follow the row order's tie rule
    flat = typed_table({"c": [7.0] * 9}, quasi={"c": "continuous"})
    sizes = np.bincount(plugin.run(flat, params, make_context()).classes())
    assert sizes.min() >= 3 and sizes.sum() == 9


# -- workflows ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["census", "tarragona", "eia"])
def test_the_experiment_workflows_are_valid(cli, name):
    res = cli("plan", WORKFLOWS / f"microaggregation-{name}.yaml", "--set", "vgrav.k=7")
    assert res.exit_code == 0, res.output
    for step in ("mdav", "vmdav", "grav", "vgrav", "refined", "score-refined"):
        assert step in res.output


def test_census_experiment_runs_end_to_end(cli, tmp_path):
    import json

    res = cli("run", WORKFLOWS / "microaggregation-census.yaml", "--db", tmp_path / "s.duckdb", "--json",
              "--set", "refined.kicks=50", *[arg for s in ("mdav", "vmdav", "grav", "vgrav")
                                              for arg in ("--set", f"{s}.k=10")])
    assert res.exit_code == 0, res.output
    metrics = json.loads(res.output)["metrics"]
    assert metrics["score-mdav.sse-il"] == pytest.approx(14.16, abs=0.05)
    for s in ("mdav", "vmdav", "grav", "vgrav", "refined"):
        assert metrics[f"score-{s}.k-anonymity.holds"] == 1.0
        assert 0 < metrics[f"score-{s}.dld"] < 1
    assert metrics["score-refined.sse-il"] < metrics["score-mdav.sse-il"]


def test_zeta_zero_is_rejected_before_anything_runs(cli, project):
    wf = census_workflow(project, extra="""
        grey: {uses: v-grav, input: typed, with: {k: 5, zeta: 0}}
    """)
    for command in ("plan", "run"):
        res = cli(command, wf, "--db", project / "s.duckdb") if command == "run" else cli(command, wf)
        assert res.exit_code == 2, res.output
        assert "step 'grey': parameter 'zeta': expected a number > 0, got 0" in res.output
        assert res.output.count("\n") == 1 and "recorded as failed" not in res.output
