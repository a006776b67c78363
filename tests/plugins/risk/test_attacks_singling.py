"""``singling-out-risk`` in its multivariate mode (anonymeter's queries on several columns):
conjunctive queries counted by hand on a tiny table, the rank-code counting against a plain
float comparison of every query with every row, the generator's queries checked with pandas
``.query`` on Adult (each singles out one released record, operators chosen by the median), the
whole attack by hand, a workflow through the CLI (determinism), and refusals in one line."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pandas as pd
import pytest

from anonflow.api import InputError
from anonflow.params import ParamError, validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.risk import singling_multi as sm
from anonflow_std.risk.attacks import encode, wilson
from anonflow_std.risk.attacks_singling import (EQ, GE, GT, LE, LT, NE, NOT_NULL, NULL, SinglingOutRisk,
                                                distinct_records)
from anonflow_std.risk.singling_multi import (Ranks, conjunction_counts, conjunction_counts_dense,
                                              conjunction_matches, multivariate_queries, random_conjunctions)
from tests.support import data


def run_metric(original, released, control, seed=0, **params):
    ctx = make_context(seed=seed)
    ctx.tables = {"ctl": control}.__getitem__
    params.setdefault("control", "ctl")
    m = SinglingOutRisk()
    return m.compute(original, released, validate_params(m.params, params), ctx), ctx


def test_conjunctions_by_hand():
    # rows:    0     1     2     3     4
    # x:       1     2     2    nan    5
    # c:       0     1     0     0    nan      (a category's codes)
    X = np.array([[1.0, 0.0], [2.0, 1.0], [2.0, 0.0], [np.nan, 0.0], [5.0, np.nan]])
    cols = np.array([[0, 1]] * 8)
    ops = np.array([[LE, EQ], [GE, EQ], [GT, NE], [LT, NULL], [NE, EQ], [NULL, EQ], [NOT_NULL, NOT_NULL],
                    [EQ, EQ]])
    vals = np.array([[2, 0], [2, 0], [1, 0], [5, np.nan], [2, 0], [np.nan, 0], [np.nan, np.nan], [np.nan, 0]])
    expected = [
        [0, 2],  # x <= 2 and c == 0: rows 0, 2 (row 3's missing x fails the comparison)
        [2],  # x >= 2 and c == 0: row 2 (row 4's c is missing)
        [1],  # x > 1 and c != 0: row 1 (row 4: a missing c fails !=)
        [],  # x < 5 and c is null: row 4 alone has c null, and its x = 5 is not < 5
        [0],  # x != 2 and c == 0: row 0 (row 3's missing x fails !=)
        [3],  # x is null and c == 0: row 3
        [0, 1, 2],  # x and c both present
        [],  # x == missing: a comparison with a missing value holds nowhere
    ]
    got = conjunction_matches(X, cols, ops, vals)
    assert [g.tolist() for g in got] == expected
    assert conjunction_counts(X, cols, ops, vals).tolist() == [2, 1, 1, 0, 1, 1, 3, 0]
    # single: exactly one match
    assert Ranks(X).single(cols, ops, vals).tolist() == [False, True, True, False, True, True, False, False]


def test_rank_counting_equals_a_plain_comparison_in_small_blocks(monkeypatch):
    rng = np.random.default_rng(5)
    for _ in range(40):
        n, m = int(rng.integers(1, 120)), int(rng.integers(1, 5))
        k, q = int(rng.integers(1, m + 1)), int(rng.integers(0, 150))
        X = rng.integers(0, 5, (n, m)).astype(float)
        X[rng.random((n, m)) < 0.2] = np.nan
        cols = np.sort(np.argsort(rng.random((q, m)), axis=1)[:, :k], axis=1)
        ops = rng.integers(0, 8, (q, k))
        vals = rng.integers(-1, 6, (q, k)) + rng.choice([0.0, 0.5], (q, k))
        vals[rng.random((q, k)) < 0.1] = np.nan
        monkeypatch.setattr(sm, "BLOCK_CELLS", int(rng.integers(1, 500)))
        ranks, dense = Ranks(X), conjunction_counts_dense(X, cols, ops, vals)
        assert ranks.counts(cols, ops, vals).tolist() == dense.tolist()
        assert ranks.single(cols, ops, vals).tolist() == (dense == 1).tolist()
        qid, _ = ranks.pairs(cols, ops, vals)
        assert np.bincount(qid, minlength=q).tolist() == dense.tolist()


def pandas_query(cols, ops, vals) -> str:
    """A query as pandas writes it, on columns named c0, c1, ..."""
    sym = {EQ: "==", NE: "!=", GT: ">", LT: "<", GE: ">=", LE: "<="}
    parts = []
    for j, o, v in zip(cols.tolist(), ops.tolist(), vals.tolist()):
        parts.append(f"c{j}.isna()" if o == NULL else f"c{j}.notna()" if o == NOT_NULL else f"c{j} {sym[o]} {v!r}")
    return " and ".join(parts)


def test_generated_queries_single_out_one_released_record_checked_with_pandas():
    frame = data.adult_full().to_pandas()
    frame = frame.iloc[np.random.default_rng(2).permutation(len(frame))[:3000]].reset_index(drop=True)
    cols = ["age", "fnlwgt", "hours-per-week", "education", "occupation", "sex", "race"]
    t = typed_table({c: frame[c].tolist() for c in cols})
    (X,), n_num = encode((t,), cols, "test", ("released",))
    X[:, n_num:][X[:, n_num:] == -1] = np.nan
    R = distinct_records(X)
    numeric = np.arange(len(cols)) < n_num
    (qc, qo, qv), attempts = multivariate_queries(R, numeric, np.random.default_rng(0), 120, 3, None)
    assert qc.shape == (120, 3) and attempts % 1000 == 0
    df = pd.DataFrame(R, columns=[f"c{j}" for j in range(R.shape[1])])
    medians = df.median()
    for c, o, v in zip(qc, qo, qv):
        assert len(df.query(pandas_query(c, o, v), engine="python")) == 1
        for j, op, val in zip(c, o, v):
            want = NULL if np.isnan(val) else (GE if val > medians[f"c{j}"] else LE) if numeric[j] else EQ
            assert op == want
    # distinct queries; the same queries counted on another table agree with pandas
    assert len({(tuple(c), tuple(v)) for c, v in zip(qc.tolist(), qv.tolist())}) == 120
    other = pd.DataFrame(X[::2], columns=df.columns)
    theirs = [len(other.query(pandas_query(c, o, v), engine="python")) for c, o, v in zip(qc, qo, qv)]
    assert conjunction_counts(X[::2], qc, qo, qv).tolist() == theirs
    # the random guesser: distinct columns per query, values among the released ones
    rc, ro, rv = random_conjunctions(R, numeric, np.random.default_rng(1), 200, 3)
    assert (np.diff(rc, axis=1) > 0).all()
    for j in range(len(cols)):
        released = set(np.unique(R[:, j][~np.isnan(R[:, j])]).tolist())
        assert set(rv[(rc == j) & ~np.isnan(rv)].tolist()) <= released
    assert set(ro[:, :][np.isin(rc, np.flatnonzero(~numeric))].tolist()) <= {EQ, NE, NULL, NOT_NULL}


def test_multivariate_attack_by_hand():
    rel = typed_table({"x": [1, 2, 3, 4], "c": ["a", "b", "a", "a"]})
    # n_cols 2 = every column: one query per released record; the median of x is 2.5:
    # (1, a): x <= 1 and c == a  -> record 0 alone: singles out
    # (2, b): x <= 2 and c == b  -> record 1 alone: singles out
    # (3, a): x >= 3 and c == a  -> records 2, 3: does not
    # (4, a): x >= 4 and c == a  -> record 3 alone: singles out
    ori = typed_table({"x": [1, 1, 2, 5], "c": ["a", "b", "b", "a"]})
    # on the original: (1, a) 1 match; x <= 2 and b: (1, b), (2, b) 2; x >= 4 and a: (5, a) 1 -> 2 successes
    ctl = typed_table({"x": [0, 3, 4, 6], "c": ["a", "a", "b", "a"]})
    # on the control: (0, a) 1; none 0; (6, a) 1 -> 2 (4 distinct records each: no size correction)
    r, ctx = run_metric(ori, rel, ctl, mode="multivariate", n_cols=2, n_attacks=3)
    assert r["singling-out-risk.queries"] == 3 and r["singling-out-risk.attempts"] == 1000
    assert (r["singling-out-risk.attack_successes"], r["singling-out-risk.control_successes"]) == (2, 2)
    assert r["singling-out-risk.attack_rate"] == pytest.approx(wilson(2, 3, 0.95)[0], rel=1e-15)
    assert "3 multivariate queries on 2 columns" in ctx.notes[0]
    # asked for 4: only 3 exist; max_attempts 5 stops after one batch of 5 attempts
    r, _ = run_metric(ori, rel, ctl, mode="multivariate", n_cols=2, n_attacks=4, max_attempts=5)
    assert r["singling-out-risk.attempts"] == 5 and r["singling-out-risk.attacks"] == 4
    assert r["singling-out-risk.queries"] <= 3
    # the control set's size differs: the count is corrected as in the univariate mode
    big = typed_table({"x": list(range(40)), "c": ["a", "b"] * 20})
    r, _ = run_metric(ori, rel, big, mode="multivariate", n_cols=2, n_attacks=3)
    assert r["singling-out-risk.control_correction"] != 1.0 or r["singling-out-risk.control_correction_fitted"] == 0


def test_refusals_are_one_line():
    rel = typed_table({"x": [0.0, 1.0, 2.0], "s": ["a", "b", "c"]})
    cases = [(dict(mode="multivariate", n_cols=3), "n_cols 3 exceeds the 2 columns queried"),
             (dict(mode="multivariate", n_cols=0), "n_cols"),
             (dict(mode="bivariate"), "mode"),
             (dict(mode="multivariate", max_attempts=0), "max_attempts")]
    for params, message in cases:
        with pytest.raises(Exception, match=message) as err:
            run_metric(rel, rel, rel, **params)
        assert isinstance(err.value, (InputError, ParamError)) and "\n" not in str(err.value)


def test_workflow_multivariate_is_deterministic(cli, project):
    cols = "AFNLWGT, AGI, EMCONTRB, FEDTAX, PTOTVAL, STATETAX"
    wf = project / "singling.yaml"
    wf.write_text(textwrap.dedent(f"""\
        name: singling-test
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
                singling-out-risk: {{columns: [{cols}], control: held_out, n_attacks: 60, mode: multivariate}}
        """))
    runs = []
    for i, seed in enumerate(("7", "7", "8")):
        res = cli("run", wf, "--db", project / f"s{i}.duckdb", "--out-dir", project / f"out{i}", "--json",
                  "--seed", seed)
        assert res.exit_code == 0, res.output
        runs.append({k: v for k, v in json.loads(res.output)["metrics"].items() if k.startswith("attacks.")})
    m = runs[0]
    assert m["attacks.singling-out-risk.queries"] == 60 and m["attacks.singling-out-risk.attacks"] == 60
    assert m["attacks.singling-out-risk.before"] > 0.8  # the training half published as is
    assert 0.0 <= m["attacks.singling-out-risk"] <= 1.0
    assert runs[1] == m  # same seed: same figures
    assert runs[2] != m  # another seed: other noise, other queries
