"""``linkability-risk``, ``inference-risk`` and ``singling-out-risk`` (anonymeter's attacks with a
control set):
hand-computed examples of the distance, the neighbour search, the success counting and the
risk with its Wilson interval (the arithmetic in comments); the search against a literal
double loop over anonymeter's distance; property tests on sdcMicro's Census and on Adult (the
training records released unchanged: risk near 1; heavily noised: risk 0 within the interval);
refusals in one line; one workflow through the CLI with a train/control split made by two
``filter`` steps, run twice with the same seed and once with another."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from anonflow.api import InputError
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.risk.attacks import (InferenceRisk, LinkabilityRisk, attack_risk, encode, inference_successes,
                                       link_successes, nearest, random_subsets, scale, secret_values, wilson)
from anonflow_std.risk.attacks_singling import SinglingOutRisk
from tests.support import data

CENSUS_A = ["AFNLWGT", "AGI", "EMCONTRB"]
CENSUS_B = ["FEDTAX", "PTOTVAL", "STATETAX"]


def table_of(frame: pd.DataFrame):
    return typed_table({c: frame[c].tolist() for c in frame.columns})


def run_metric(metric, original, released, control, seed=0, **params):
    ctx = make_context(seed=seed)
    if control is not None:
        ctx.tables = {"ctl": control}.__getitem__
        params.setdefault("control", "ctl")
    return metric.compute(original, released, validate_params(metric.params, params), ctx), ctx


# -- the distance and the neighbour search, by hand ----------------------------------------


def test_mixed_distance_scales_numbers_by_the_range_over_both_tables():
    released = typed_table({"x": [0.0, 10.0], "c": ["a", "b"]})
    query = typed_table({"x": [4.0], "c": ["b"]})
    (R, Q), n_num = encode([released, query], ["x", "c"], "m", ["released", "query"])
    assert n_num == 1
    Rs, Qs = scale(R, Q, n_num)
    # range of x over both tables: 10 - 0 = 10; distances from (4, b):
    #   to (0, a): |0 - 4| / 10 + 1 (a != b) = 1.4;   to (10, b): |10 - 4| / 10 + 0 = 0.6
    idx, dist = nearest(Rs, Qs, n_num, 2)
    assert idx.tolist() == [[1, 0]]
    np.testing.assert_allclose(dist, [[0.6, 1.4]], rtol=1e-15)


def test_columns_sum_numeric_by_name_then_categorical_by_name():
    t = typed_table({"z": ["u"], "b": [1], "a": [2.5], "c": ["v"]})
    (X,), n_num = encode([t], ["z", "b", "a", "c"], "m", ["t"])
    # numeric a, b (by name) then categorical c, z: codes 0 each (one value per column)
    assert n_num == 2 and X.tolist() == [[2.5, 1.0, 0.0, 0.0]]


def test_ties_go_to_the_lowest_index_in_both_searches():
    # released 1, 3, 3, 5 and the query 2 (range 5 - 1 = 4): distances 0.25, 0.25, 0.25, 0.75
    R = np.array([[1.0], [3.0], [3.0], [5.0]])
    Q = np.array([[2.0]])
    Rs, Qs = scale(R, Q, 1)
    assert nearest(Rs, Qs, 1, 1)[0].tolist() == [[0]]  # the kd-tree path (numeric, one neighbour)
    assert nearest(Rs, Qs, 1, 2)[0].tolist() == [[0, 1]]  # the blockwise path
    assert nearest(Rs, Qs, 1, 3)[0].tolist() == [[0, 1, 2]]
    # query 3: distance 0 to records 1 and 2 (duplicates): the lower one, 1
    Rs, Qs = scale(R, np.array([[3.0]]), 1)
    assert nearest(Rs, Qs, 1, 1)[0].tolist() == [[1]]


def test_missing_numbers_are_one_away_and_missing_categories_match():
    R = typed_table({"x": [0.0, None], "c": ["a", None]})
    Q = typed_table({"x": [None], "c": [None]})
    (Rm, Qm), n_num = encode([R, Q], ["x", "c"], "m", ["r", "q"])
    Rs, Qs = scale(Rm, Qm, n_num)
    # to (0, a): missing x -> 1, None != a -> 1: 2;  to (None, None): missing x -> 1, None == None -> 0: 1
    assert nearest(Rs, Qs, n_num, 2)[1].tolist() == [[1.0, 2.0]]


def literal_nearest(R: np.ndarray, Q: np.ndarray, n_num: int, k: int) -> np.ndarray:
    """anonymeter's gower_distance in a double loop (missing numbers at distance 1), then the
    k smallest with ties to the lowest index (Python's sort is stable)."""
    out = []
    for q in Q:
        d = []
        for j, r in enumerate(R):
            s = 0.0
            for c in range(len(q)):
                if c < n_num:
                    s += 1.0 if (np.isnan(q[c]) or np.isnan(r[c])) else abs(q[c] - r[c])
                else:
                    s += float(q[c] != r[c])
            d.append((s, j))
        out.append([j for _, j in sorted(d, key=lambda t: t[0])[:k]])
    return np.array(out)


@pytest.mark.parametrize("n_num, n_cat, k", [(2, 0, 1), (2, 0, 3), (1, 2, 1), (0, 3, 2), (2, 2, 4)])
def test_search_matches_a_literal_double_loop(n_num, n_cat, k):
    rng = np.random.default_rng(n_num * 10 + n_cat + k)
    # small integer values: many exact ties, the hard case for tie-breaking
    R = np.hstack([rng.integers(0, 4, (60, n_num)).astype(float), rng.integers(0, 3, (60, n_cat)).astype(float)])
    Q = np.hstack([rng.integers(0, 4, (25, n_num)).astype(float), rng.integers(0, 3, (25, n_cat)).astype(float)])
    Rs, Qs = scale(R, Q, n_num)
    np.testing.assert_array_equal(nearest(Rs, Qs, n_num, k)[0], literal_nearest(Rs, Qs, n_num, k))
    # continuous values: the kd-tree path for one neighbour
    R = rng.normal(size=(200, 2))
    Q = rng.normal(size=(50, 2))
    Rs, Qs = scale(R, Q, 2)
    np.testing.assert_array_equal(nearest(Rs, Qs, 2, 1)[0], literal_nearest(Rs, Qs, 2, 1))


def test_blockwise_search_gives_the_same_answer_in_small_blocks(monkeypatch):
    import anonflow_std.risk.attacks as attacks

    rng = np.random.default_rng(5)
    R = np.hstack([rng.normal(size=(300, 1)), rng.integers(0, 3, (300, 1))])
    Q = np.hstack([rng.normal(size=(70, 1)), rng.integers(0, 3, (70, 1))])
    whole = nearest(R, Q, 1, 2)
    monkeypatch.setattr(attacks, "BLOCK_CELLS", 301)  # one query per block
    blocks = nearest(R, Q, 1, 2)
    np.testing.assert_array_equal(whole[0], blocks[0])
    np.testing.assert_array_equal(whole[1], blocks[1])


# -- success counting, by hand ----------------------------------------------------------------


def test_a_link_is_a_shared_neighbour():
    # record 0: {0, 1} and {1, 5} share 1 -> linked; record 1: {2, 3} and {4, 6} share none
    assert link_successes(np.array([[0, 1], [2, 3]]), np.array([[1, 5], [4, 6]])).tolist() == [True, False]


def test_inference_success_exact_and_within_tolerance():
    # categorical, as codes of one dictionary over both columns (a 0, b 1, c 2; missing NaN): equal, or both
    # missing
    g, s = secret_values([pa.array(["a", "b", None, None]), pa.array(["a", "c", None, "a"])], False)
    np.testing.assert_array_equal(g, [0, 1, np.nan, np.nan])
    np.testing.assert_array_equal(s, [0, 2, np.nan, 0])
    assert inference_successes(g, s, False, 0.05).tolist() == [True, False, True, False]
    # numeric, tolerance 0.05 relative to the guess: |100 - 104| / 100 = 0.04 yes; |100 - 106| / 100 = 0.06 no;
    # guess -10, secret 50: |-10 - 50| / 10 = 6 no (anonymeter divides by -10 and says yes); NaN and NaN yes
    g = np.array([100.0, 100.0, -10.0, np.nan])
    s = np.array([104.0, 106.0, 50.0, np.nan])
    assert inference_successes(g, s, True, 0.05).tolist() == [True, False, False, True]


def test_random_subsets_are_distinct_and_seeded():
    a = random_subsets(np.random.default_rng(1), 500, 6, 4)
    assert a.shape == (500, 4) and all(len(set(r)) == 4 for r in a.tolist()) and a.min() >= 0 and a.max() < 6
    np.testing.assert_array_equal(a, random_subsets(np.random.default_rng(1), 500, 6, 4))
    # Floyd's algorithm is uniform: each of the 6 values is in a row with probability 4/6
    assert np.allclose(np.bincount(a.ravel(), minlength=6) / 500, 4 / 6, atol=0.08)


# -- the risk and the Wilson interval, by hand ---------------------------------------------


def test_wilson_score_by_hand():
    # z = 1.959964 (95 %), z^2 = 3.841459; 50 of 100:
    #   rate = (50 + 1.920729) / 103.841459 = 0.5
    #   error = 1.959964 / 103.841459 * sqrt(50 * 50 / 100 + 0.960365) = 0.0188746 * 5.095131 = 0.0961688
    rate, err = wilson(50, 100, 0.95)
    assert rate == pytest.approx(0.5, abs=1e-12)
    assert err == pytest.approx(0.0961688, abs=1e-6)
    # 0 of 10: rate = 1.920729 / 13.841459 = 0.138767, error = 1.959964 / 13.841459 * sqrt(0.960365) = 0.138767
    rate, err = wilson(0, 10, 0.95)
    assert rate == pytest.approx(0.138767, abs=1e-6) and err == pytest.approx(0.138767, abs=1e-6)


def test_residual_risk_and_its_interval_by_hand():
    # 80 of 100 targets, 20 of 100 control records:
    #   a = 81.920729 / 103.841459 = 0.788902, c = 21.920729 / 103.841459 = 0.211098
    #   ea = 1.959964 / 103.841459 * sqrt(80 * 20 / 100 + 0.960365) = 0.0188746 * 4.118296 = 0.077731 = ec
    #   risk = (0.788902 - 0.211098) / (1 - 0.211098) = 0.577804 / 0.788902 = 0.732415
    #   error = sqrt((0.077731 / 0.788902)^2 + (0.077731 * (0.788902 - 1) / 0.788902^2)^2)
    #         = sqrt(0.098531^2 + 0.026365^2) = 0.101997
    r = attack_risk("x", 100, 80, 100, 20, 100, 1, 0.95)
    assert r["x"] == pytest.approx(0.732415, abs=1e-6)
    assert r["x.ci_low"] == pytest.approx(0.732415 - 0.101997, abs=2e-6)
    assert r["x.ci_high"] == pytest.approx(0.732415 + 0.101997, abs=2e-6)
    assert r["x.attack_rate"] == pytest.approx(0.788902, abs=1e-6)
    assert r["x.control_rate"] == pytest.approx(0.211098, abs=1e-6)
    # the control more attackable than the targets: residual negative, risk clipped to 0
    r = attack_risk("x", 100, 20, 100, 80, 100, 1, 0.95)
    assert r["x"] == 0.0 and r["x.ci_low"] == 0.0 and r["x.residual"] < 0


def test_linkability_by_hand():
    # released x = 0, 10, 20 and y = 0, 10, 20; targets (0, 0.4) and (10, 20): the first's nearest on
    # x is record 0 and on y record 0 -> linked; the second's are 1 and 2 -> not. Control (20, 20):
    # 2 and 2 -> linked. 1 of 2 targets and 1 of 1 control record linked.
    rel = typed_table({"x": [0.0, 10.0, 20.0], "y": [0.0, 10.0, 20.0]})
    ori = typed_table({"x": [0.0, 10.0], "y": [0.4, 20.0]})
    ctl = typed_table({"x": [20.0], "y": [20.0]})
    r, ctx = run_metric(LinkabilityRisk(), ori, rel, ctl, aux_a=["x"], aux_b=["y"])
    assert (r["linkability-risk.attack_successes"], r["linkability-risk.control_successes"]) == (1, 1)
    assert r["linkability-risk.attack_rate"] == pytest.approx(wilson(1, 2, 0.95)[0], rel=1e-15)
    assert r["linkability-risk.control_rate"] == pytest.approx(wilson(1, 1, 0.95)[0], rel=1e-15)
    assert ctx.notes[0].startswith("linkability-risk: 1 of 2 targets and 1 of 1 control records linked")


def test_inference_by_hand():
    # released (x, s): (0, a), (10, b), (20, a); targets x = 1 (s = a), 9 (s = a): guesses a (record 0,
    # right) and b (record 1, wrong); control x = 19 (s = a): guess a (record 2, right)
    rel = typed_table({"x": [0.0, 10.0, 20.0], "s": ["a", "b", "a"]})
    ori = typed_table({"x": [1.0, 9.0], "s": ["a", "a"]})
    ctl = typed_table({"x": [19.0], "s": ["a"]})
    r, _ = run_metric(InferenceRisk(), ori, rel, ctl, aux=["x"], secret="s")
    assert (r["inference-risk.attack_successes"], r["inference-risk.control_successes"]) == (1, 1)
    # numeric secret: guesses 100 (for 104: 0.04, right) and 200 (for 150: 0.25, wrong)
    rel = typed_table({"x": [0.0, 10.0], "s": [100.0, 200.0]})
    ori = typed_table({"x": [1.0, 9.0], "s": [104.0, 150.0]})
    ctl = typed_table({"x": [0.0], "s": [50.0]})
    r, _ = run_metric(InferenceRisk(), ori, rel, ctl, aux=["x"], secret="s")
    assert (r["inference-risk.attack_successes"], r["inference-risk.control_successes"]) == (1, 0)
    r, _ = run_metric(InferenceRisk(), ori, rel, ctl, aux=["x"], secret="s", tolerance=0.3)
    assert r["inference-risk.attack_successes"] == 2


# -- refusals -----------------------------------------------------------------------------


def test_refusals_are_one_line():
    rel = typed_table({"x": [0.0, 1.0, 2.0], "y": [0.0, 1.0, 2.0], "s": ["a", "b", "c"]})
    lk, inf = LinkabilityRisk(), InferenceRisk()
    cases = [
        (lk, dict(aux_a=["x"], aux_b=["y"]), None, "needs a control set: name with control:"),
        (lk, dict(aux_a=["x"]), rel, "needs aux_b"),
        (lk, dict(aux_a=["x"], aux_b=["x", "y"]), rel, "aux_a and aux_b share"),
        (lk, dict(aux_a=["x"], aux_b=["nope"]), rel, "column 'nope' is not in the released table"),
        (inf, dict(aux=["x"], secret="s"), None, "needs a control set"),
        (inf, dict(aux=["x", "s"], secret="s"), rel, "the secret 's' is among the aux"),
        (SinglingOutRisk(), dict(), None, "singling-out-risk needs a control set"),
        (SinglingOutRisk(), dict(columns=["x", "nope"]), rel, "column 'nope' is not in the released table"),
        (inf, dict(aux=["x"], secret="s", regression=True), rel, "regression: true needs a numeric secret"),
    ]
    for metric, params, control, message in cases:
        with pytest.raises(InputError, match=message) as err:
            run_metric(metric, rel, rel, control, **params)
        assert "\n" not in str(err.value)
    text = typed_table({"x": ["0", "1", "2"], "y": [0.0, 1.0, 2.0], "s": ["a", "b", "c"]})
    with pytest.raises(InputError, match="'x' is numeric in one table and not in another"):
        run_metric(lk, rel, text, rel, aux_a=["x"], aux_b=["y"])


# -- on real data -----------------------------------------------------------------------------


def census_split():
    frame = data.sdcmicro("census").to_pandas()
    order = np.random.default_rng(11).permutation(len(frame))
    return frame.iloc[order[:540]].reset_index(drop=True), frame.iloc[order[540:]].reset_index(drop=True)


def noised(frame: pd.DataFrame, columns, relative_sd: float, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    out = frame.copy()
    for c in columns:
        out[c] = out[c] + rng.normal(0.0, relative_sd * out[c].std(), len(out))
    return out


def test_census_linkability_released_as_is_is_near_one_and_heavy_noise_near_zero():
    train, control = census_split()
    T, C = table_of(train), table_of(control)
    params = dict(aux_a=CENSUS_A, aux_b=CENSUS_B)
    r, _ = run_metric(LinkabilityRisk(), T, T, C, **params)
    # each target is its own nearest on both halves (the halves are unique on Census) ...
    assert r["linkability-risk.attack_successes"] >= 535
    # ... while a control record's two nearest released records are the same one only by chance
    assert r["linkability-risk"] > 0.95 and r["linkability-risk.control_successes"] < 25
    # released with noise of 3 sd per column: the targets link no better than the control records
    r, _ = run_metric(LinkabilityRisk(), T, table_of(noised(train, CENSUS_A + CENSUS_B, 3.0)), C, **params)
    assert r["linkability-risk.ci_low"] == 0.0 and r["linkability-risk"] < 0.05
    # the same counts from an independent pass: numpy's full L1 matrix on range-scaled columns
    rel = noised(train, CENSUS_A + CENSUS_B, 3.0)
    nearest_by_half = []
    for half in (CENSUS_A, CENSUS_B):
        both = pd.concat([rel[half], train[half]])
        rng = (both.max() - both.min()).to_numpy()
        D = np.abs(train[half].to_numpy()[:, None, :] / rng - rel[half].to_numpy()[None, :, :] / rng).sum(axis=2)
        nearest_by_half.append(D.argmin(axis=1))
    assert r["linkability-risk.attack_successes"] == np.count_nonzero(nearest_by_half[0] == nearest_by_half[1])


def adult_split(n: int = 1500):
    frame = data.adult_full().to_pandas()
    order = np.random.default_rng(4).permutation(len(frame))
    return frame.iloc[order[:n]].reset_index(drop=True), frame.iloc[order[n:2 * n]].reset_index(drop=True)


ADULT_AUX = ["age", "fnlwgt", "workclass", "education", "hours-per-week", "occupation"]


def test_adult_inference_released_as_is_is_near_one_and_heavy_noise_near_zero():
    train, control = adult_split()
    T, C = table_of(train), table_of(control)
    r, _ = run_metric(InferenceRisk(), T, T, C, aux=ADULT_AUX, secret="income")
    # each target's nearest released record is itself: its income guessed right
    assert r["inference-risk.attack_successes"] >= 1490 and r["inference-risk"] > 0.95
    # the control: guessed from a similar person, right about as often as the majority class (76 %)
    assert 0.6 < r["inference-risk.control_rate"] < 0.9
    # fnlwgt, age and hours noised with 2 sd, workclass, education and occupation shuffled across records
    rel = noised(train, ["age", "fnlwgt", "hours-per-week"], 2.0)
    rng = np.random.default_rng(8)
    for c in ["workclass", "education", "occupation"]:
        rel[c] = rel[c].to_numpy()[rng.permutation(len(rel))]
    r, _ = run_metric(InferenceRisk(), T, table_of(rel), C, aux=ADULT_AUX, secret="income")
    assert r["inference-risk.ci_low"] == 0.0 and r["inference-risk"] < 0.05
    # numeric secret: hours-per-week from the rest, released as is -> each guess exact
    r, _ = run_metric(InferenceRisk(), T, T, C, aux=["age", "fnlwgt", "education"], secret="hours-per-week")
    assert r["inference-risk.attack_successes"] >= 1490


def test_sampled_attacks_are_seeded():
    train, control = census_split()
    T, C = table_of(train), table_of(control)
    rel = table_of(noised(train, CENSUS_A + CENSUS_B, 0.3))
    params = dict(aux_a=CENSUS_A, aux_b=CENSUS_B, n_attacks=200)
    r1, _ = run_metric(LinkabilityRisk(), T, rel, C, seed=1, **params)
    r2, _ = run_metric(LinkabilityRisk(), T, rel, C, seed=1, **params)
    r3, _ = run_metric(LinkabilityRisk(), T, rel, C, seed=2, **params)
    assert r1 == r2 and r1["linkability-risk.attacks"] == 200
    assert r3 != r1
    # more attacks than records: every record, as without n_attacks (anonymeter 1.1's min(n_attacks, n))
    r4, _ = run_metric(LinkabilityRisk(), T, rel, C, seed=1, **{**params, "n_attacks": 5000})
    r5, _ = run_metric(LinkabilityRisk(), T, rel, C, seed=1, **{**params, "n_attacks": None})
    assert r4["linkability-risk.attacks"] == 540 and r4["linkability-risk"] == r5["linkability-risk"]


# -- through the CLI ----------------------------------------------------------------------


def test_workflow_with_a_filter_split_and_a_control_is_deterministic(cli, project):
    cols = ", ".join(CENSUS_A + CENSUS_B)
    wf = project / "attacks.yaml"
    wf.write_text(textwrap.dedent(f"""\
        name: attacks-test
        seed: 7
        sources:
          census: {{path: data/sdcmicro/CASCrefmicrodata.csv}}
        steps:
          typed:
            uses: typing
            input: census
            with:
              quasi: [{cols}]
          train:
            uses: filter
            input: typed
            with: {{where: "_row % 2 = 0"}}
          held_out:
            uses: filter
            input: typed
            with: {{where: "_row % 2 = 1"}}
          noised:
            uses: noise
            input: train
            with: {{columns: [{cols}], noise: 10}}
          attacks:
            uses: evaluate
            input: [train, noised]
            with:
              risk_before: true
              metrics:
                linkability-risk: {{aux_a: [{", ".join(CENSUS_A)}], aux_b: [{", ".join(CENSUS_B)}],
                                    control: held_out, n_attacks: 300}}
                inference-risk: {{aux: [{", ".join(CENSUS_A)}], secret: FEDTAX, control: held_out}}
                singling-out-risk: {{columns: [{cols}], control: held_out, n_attacks: 100}}
        """))
    runs = []
    for i, seed in enumerate(("7", "7", "8")):
        res = cli("run", wf, "--db", project / f"s{i}.duckdb", "--out-dir", project / f"out{i}", "--json",
                  "--seed", seed)
        assert res.exit_code == 0, res.output
        runs.append({k: v for k, v in json.loads(res.output)["metrics"].items() if k.startswith("attacks.")})
    m = runs[0]
    assert m["attacks.linkability-risk.before"] > 0.9  # the training half published unchanged
    assert m["attacks.linkability-risk.attacks"] == 300 and m["attacks.inference-risk.attacks"] == 540
    assert 0.0 <= m["attacks.linkability-risk"] <= m["attacks.linkability-risk.before"]
    assert m["attacks.singling-out-risk.before"] > 0.9 and m["attacks.singling-out-risk.queries"] == 100
    assert runs[1] == m  # same seed: same figures
    assert runs[2] != m  # another seed: other noise and other sampled attacks
    # without control: refused in one line naming the parameter
    wf.write_text(wf.read_text().replace("secret: FEDTAX, control: held_out}", "secret: FEDTAX}"))
    res = cli("run", wf, "--db", project / "s9.duckdb", "--out-dir", project / "out9")
    assert res.exit_code != 0 and "needs a control set: name with control:" in res.output


# -- singling-out-risk (univariate) ----------------------------------------------------------


def test_query_counts_by_hand():
    from anonflow_std.risk.attacks_singling import EQ, GE, GT, LE, LT, NE, NOT_NULL, NULL, query_counts

    X = np.array([[1.0], [2.0], [2.0], [np.nan], [5.0]])
    cols = np.zeros(8, dtype=np.int64)
    ops = np.array([EQ, NE, GT, LT, GE, LE, NULL, NOT_NULL])
    vals = np.array([2.0, 2.0, 2.0, 2.0, 2.0, 2.0, np.nan, np.nan])
    # == 2: 2;  != 2: 1 and 5 (the missing value matches no comparison): 2;  > 2: 1;  < 2: 1;
    # >= 2: 3;  <= 2: 3;  is null: 1;  not null: 4
    assert query_counts(X, cols, ops, vals).tolist() == [2, 2, 1, 1, 3, 3, 1, 4]


def test_singling_out_by_hand():
    from anonflow_std.risk.attacks_singling import probability_integral

    rel = typed_table({"x": [1, 2, 2, 5], "c": ["a", "b", "c", "c"]})
    # the queries singling out one released record: x <= 1, x >= 5, x == 1, x == 5 (rare values),
    # c == a, c == b (c == c matches two): 6
    ori = typed_table({"x": [1, 1, 3, 5], "c": ["a", "b", "b", "d"]})
    # on the original: x <= 1 matches 2, x >= 5 1, x == 1 2, x == 5 1, c == a 1, c == b 2 -> 3 single out
    ctl = typed_table({"x": [0, 5, 6, 7], "c": ["a", "a", "e", "f"]})
    # on the control set: x <= 1 1, x >= 5 3, x == 1 0, x == 5 1, c == a 2, c == b 0 -> 2; 4 distinct
    # records as in the original: no size correction
    r, ctx = run_metric(SinglingOutRisk(), ori, rel, ctl, n_attacks=6)
    assert r["singling-out-risk.queries"] == 6
    assert (r["singling-out-risk.attack_successes"], r["singling-out-risk.control_successes"]) == (3, 2)
    assert r["singling-out-risk.control_correction"] == 1.0
    assert r["singling-out-risk.attack_rate"] == pytest.approx(wilson(3, 6, 0.95)[0], rel=1e-15)
    # n_attacks = 2: the first 2 of the shuffled queries, the rates over 2
    r, _ = run_metric(SinglingOutRisk(), ori, rel, ctl, n_attacks=2)
    assert r["singling-out-risk.queries"] == 2 and r["singling-out-risk.attacks"] == 2
    # the singling-out probability integrated over weights 0..w: (1 - (n w + 1)(1 - w)^n) / (n + 1)
    # n = 1, w = 1: (1 - 2 * 0) / 2 = 0.5;  n = 2, w = 0.5: (1 - 2 * 0.25) / 3 = 1/6
    np.testing.assert_allclose(probability_integral(np.array([1, 2]), 1.0)[0], 0.5)
    np.testing.assert_allclose(probability_integral(np.array([2]), 0.5), [1 / 6])


def test_singling_out_on_adult_as_is_and_noised():
    train, control = adult_split()
    T, C = table_of(train), table_of(control.iloc[:1000])  # another size: the control count is corrected
    r, ctx = run_metric(SinglingOutRisk(), T, T, C)
    # a query that singles out one released record singles out the same original record
    assert r["singling-out-risk.attack_successes"] == 500 and r["singling-out-risk"] > 0.9
    assert 0 < r["singling-out-risk.control_correction"] < 10 and "count x" in ctx.notes[0]
    noisy = noised(train, ["age", "fnlwgt", "hours-per-week", "capital-gain", "capital-loss", "education-num"], 1.0)
    r2, _ = run_metric(SinglingOutRisk(), T, table_of(noisy), C)
    assert r2["singling-out-risk.ci_low"] == 0.0 and r2["singling-out-risk"] < 0.05
    r3, _ = run_metric(SinglingOutRisk(), T, T, C)
    assert r3 == r  # seeded: queries' order, subsamples, random guesser


def test_a_size_model_that_cannot_be_fitted_leaves_the_control_count_uncorrected_and_says_so(monkeypatch):
    import anonflow_std.risk.attacks_singling as singling

    def no_fit(*_):  # what scipy's curve_fit raised on sdc-adult-heldout's release
        raise RuntimeError("Optimal parameters not found: The maximum number of function evaluations is exceeded.")

    monkeypatch.setattr(singling, "size_correction", no_fit)
    train, control = adult_split()
    T, C = table_of(train.iloc[:3000]), table_of(control.iloc[:1000])
    r, ctx = run_metric(SinglingOutRisk(), T, T, C, n_attacks=100)
    assert r["singling-out-risk.control_correction"] == 1.0 and r["singling-out-risk.control_correction_fitted"] == 0
    assert r["singling-out-risk.control_successes"] == int(r["singling-out-risk.control_successes"])  # as counted
    assert "not corrected for the control set's size" in ctx.notes[0] and "could not be fitted" in ctx.notes[0]
