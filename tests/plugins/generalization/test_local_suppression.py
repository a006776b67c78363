"""Suppressed cells as wildcards (``anonflow_std.common.wildcard``) and the sdcMicro-style
``local-suppression`` algorithm (``anonflow_std.generalization.local_suppression``)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from anonflow.api import CLASS, ROW, InputError, RunError, sql_ident
from anonflow.params import validate_params
from anonflow.testing import check_claims, make_context, run_workflow, typed_table
from anonflow_std.generalization.local_suppression import LocalSuppression, importance_order, suppress
from anonflow_std.common import wildcard as W


ROOT = Path(__file__).resolve().parents[3]
ADULT = ROOT / "workflows" / "data" / "arx" / "adult.csv"
ADULT_QIS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]
QI_SQL = ", ".join(sql_ident(q) for q in ADULT_QIS)


def sql_counts(columns: dict, quasi: list[str]) -> list[int]:
    t = typed_table(columns, quasi={q: "nominal" for q in quasi})
    out = W.compatible_counts(make_context(), t, quasi)
    assert out.column(ROW).to_pylist() == list(range(t.num_rows))
    return out.column(W.COUNT).to_pylist()


# -- the convention: compatible counts ------------------------------------------------------

HAND = {  # sex, age, zip; None is a suppressed cell
    "sex": ["M", "M", "M", "F", None, None],
    "age": [30, 30, None, 30, 30, None],
    "zip": ["A", "A", "A", "B", None, None],
}
# r0 (M,30,A): r0, r1 (equal); r2 (M,*,A) agrees on sex and zip; r3 (F,30,B) differs on sex;
#              r4 (*,30,*) agrees on age; r5 (*,*,*) has nothing to disagree on  -> 1+1+1+1+1 = 5
# r1 (M,30,A): the same as r0                                                   -> 5
# r2 (M,*,A):  r0, r1 agree on sex, zip; r3 differs on sex; r4 shares no non-null
#              QI with it (its age is blank, r4's sex and zip are); r5; itself  -> 5
# r3 (F,30,B): r0, r1, r2 differ on sex; r4 agrees on age; r5; itself           -> 3
# r4 (*,30,*): everyone has age 30 or a blank age                               -> 6
# r5 (*,*,*):  everyone                                                         -> 6
# r2 ~ r4 and r4 ~ r3 but not r2 ~ r3: compatibility is not transitive. Smallest: 3.
HAND_COUNTS = [5, 5, 5, 3, 6, 6]


def test_hand_computed_example():
    assert sql_counts(HAND, ["sex", "age", "zip"]) == HAND_COUNTS
    rows = list(zip(HAND["sex"], HAND["age"], HAND["zip"]))
    assert W.compatible_counts_reference(rows).tolist() == HAND_COUNTS
    codes = W.encode_codes([HAND["sex"], HAND["age"], HAND["zip"]])
    assert W.compatible_counts_codes(codes).tolist() == HAND_COUNTS
    t = typed_table(HAND, quasi={"sex": "nominal", "age": "continuous", "zip": "nominal"})
    assert W.min_compatible_count(make_context(), t, ["sex", "age", "zip"]) == \
        {"k": 3, "keys": 5, "patterns": 4, "records": 6}


def test_sdcmicro_freqcalc_test_vectors():
    """sdcMicro's tests/testthat/test_freqCalc.R, the non-weighted fk with missing values."""
    a = [2, 3, 2, 2, 3, 3, 1, 2]
    b = [3, 3, 3, 3, 3, 3, 4, 3]
    c = [1, 3, None, 2, 1, 1, None, 1]
    assert sql_counts({"A": a, "B": b, "C": c}, ["A", "B", "C"]) == [3, 1, 4, 2, 2, 2, 1, 3]
    # "one column and one row with NAs": C all NA, record 3 all NA (fk = n = 8)
    a = [2, 3, None, 2, 3, 3, 1, 2]
    b = [3, 3, None, 3, 3, 3, 4, 3]
    c = [None] * 8
    assert sql_counts({"A": a, "B": b, "C": pa.array(c, pa.int64())}, ["A", "B", "C"]) == [4, 4, 8, 4, 4, 4, 2, 4]


def test_without_nulls_the_count_is_the_class_size():
    rng = np.random.default_rng(3)
    cols = {"a": rng.integers(0, 3, 200).tolist(), "b": rng.choice(["x", "y"], 200).tolist()}
    got = sql_counts(cols, ["a", "b"])
    keys = list(zip(cols["a"], cols["b"]))
    assert got == [keys.count(key) for key in keys]


def _random_table(seed: int, n: int, m: int, null_rate: float):
    rng = np.random.default_rng(seed)
    cols = {}
    for j in range(m):
        card = int(rng.integers(1, 6))
        vals = rng.integers(0, card, n)
        if j % 2:
            data = [f"v{v}" for v in vals]  # text and integer columns
        else:
            data = vals.tolist()
        blank = rng.random(n) < null_rate
        cols[f"q{j}"] = pa.array([None if z else v for v, z in zip(data, blank)],
                                 pa.string() if j % 2 else pa.int64())
    return cols


@pytest.mark.parametrize("seed", range(12))
def test_sql_and_numpy_agree_with_the_reference(seed):
    rng = np.random.default_rng(100 + seed)
    n, m = int(rng.integers(1, 250)), int(rng.integers(1, 6))
    cols = _random_table(seed, n, m, null_rate=float(rng.choice([0.0, 0.1, 0.4, 0.9])))
    quasi = list(cols)
    rows = list(zip(*(cols[q].to_pylist() for q in quasi)))
    ref = W.compatible_counts_reference(rows)
    assert sql_counts(cols, quasi) == ref.tolist()
    codes = W.encode_codes([cols[q] for q in quasi])
    assert W.compatible_counts_codes(codes).tolist() == ref.tolist()
    # weighted distinct keys give the same counts per key
    keys, inv, w = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    assert W.compatible_counts_codes(keys, w)[inv.reshape(-1)].tolist() == ref.tolist()
    t = typed_table(cols, quasi={q: "nominal" for q in quasi})
    assert W.min_compatible_count(make_context(), t, quasi)["k"] == int(ref.min())


def test_min_codes_is_the_min_over_compatible_rows():
    cols = _random_table(7, 120, 4, 0.3)
    codes = W.encode_codes(list(cols.values()))
    values = np.random.default_rng(1).integers(0, 1000, len(codes))
    query = codes[::3].copy()
    query[:, 1] = -1
    got = W.compatible_min_codes(codes, values, query)
    ok = ((query[:, None, :] == codes[None]) | (query[:, None, :] < 0) | (codes[None] < 0)).all(axis=2)
    assert got.tolist() == np.where(ok, values[None], np.iinfo(np.int64).max).min(axis=1).tolist()


def test_too_many_null_patterns_are_refused():
    rng = np.random.default_rng(0)
    n, m = 3000, 9
    cols = {f"q{j}": pa.array([None if rng.random() < 0.5 else 1 for _ in range(n)], pa.int64()) for j in range(m)}
    t = typed_table(cols, quasi={q: "nominal" for q in cols})
    with pytest.raises(RunError, match=r"distinct patterns .* more than the 256 allowed"):
        W.min_compatible_count(make_context(), t, list(cols))
    with pytest.raises(RunError, match="more than the 256 allowed"):
        W.compatible_counts_codes(W.encode_codes(list(cols.values())))


# -- the algorithm ----------------------------------------------------------------------------

def run(table, params, ctx=None):
    ctx = ctx or make_context()
    alg = LocalSuppression()
    p = validate_params(alg.params, dict(params))
    out = check_claims(alg, table, p, ctx=ctx)  # the engine's rules: same _row ids, a _class
    data = ctx.sql(f"SELECT * FROM o ORDER BY {ROW}", o=out)
    return out, data, ctx


def test_two_keys_one_cell_apart_need_one_blank():
    # (a,b,x) and (a,b,y) are unique; blanking z of one makes both compatible with it: 1 cell,
    # not 2 (the second waits for the first); (c,d,z) twice is 2-anonymous already
    cols = {"p": ["a", "a", "c", "c"], "q": ["b", "b", "d", "d"], "z": ["x", "y", "z", "z"]}
    t = typed_table(cols, quasi={"p": "nominal", "q": "nominal", "z": "nominal"})
    out, data, ctx = run(t, {"k": 2})
    assert data.column("z").to_pylist() == [None, "y", "z", "z"]
    assert data.column("p").to_pylist() == cols["p"] and data.column("q").to_pylist() == cols["q"]
    assert W.min_compatible_count(ctx, data, ["p", "q", "z"])["k"] == 2
    # classes: the published keys (a,b,NULL), (a,b,y), (c,d,z) -- nulls are part of the key
    assert data.column(CLASS).type == pa.int64()
    cl = data.column(CLASS).to_pylist()
    assert cl[2] == cl[3] and len({cl[0], cl[1], cl[2]}) == 3
    assert out.claims == {"k-anonymity": {"k": 2}}  # checked by k-anonymity, nulls as wildcards
    assert any("k = 2 reached" in n and "1 cell(s) suppressed" in n for n in ctx.notes)


def test_input_nulls_are_wildcards_not_counted_as_suppressed():
    cols = {"p": ["a", "a", None, "c"], "q": ["b", "x", "b", "d"]}
    t = typed_table(cols, quasi={"p": "nominal", "q": "nominal"})
    # counts: (a,b): itself and (*,b) -> 2; (a,x): 1; (*,b): itself and (a,b) -> 2; (c,d): 1
    out, data, ctx = run(t, {"k": 2, "max_cells": 1.0})
    assert W.min_compatible_count(ctx, data, ["p", "q"])["k"] >= 2
    before = sum(v is None for c in cols.values() for v in c)
    after = sum(v is None for c in ("p", "q") for v in data.column(c).to_pylist())
    note = next(n for n in ctx.notes if n.startswith("local-suppression"))
    assert f"{after - before} cell(s) suppressed" in note


def test_default_importance_is_sdcmicros():
    # fewest distinct values first (most important), ties in typing order
    assert importance_order(["a", "b", "c", "d"], np.array([5, 2, 5, 3]), None) == ["b", "d", "a", "c"]
    assert importance_order(["a", "b", "c", "d"], np.array([5, 2, 5, 3]), ["c"]) == ["c", "b", "d", "a"]


def test_bad_parameters():
    t = typed_table({"p": ["a", "b", "c"]}, quasi={"p": "nominal"})
    with pytest.raises(InputError, match="'zip', which is not a quasi-identifier"):
        run(t, {"k": 2, "importance": ["zip"]})
    with pytest.raises(RunError, match="3 records, fewer than k = 4"):
        run(t, {"k": 4})
    with pytest.raises(InputError, match="needs quasi-identifiers"):
        run(typed_table({"p": ["a", "b"]}), {"k": 2})


def test_the_cap_names_the_fraction_needed():
    t = typed_table({"p": ["a", "b", "c", "d"], "q": ["x", "x", "y", "y"]},
                    quasi={"p": "nominal", "q": "nominal"})
    # every record is unique; p (4 values) is the least important. Blanking p of (a,x) makes
    # (*,x) compatible with (b,x), which then has 2 as well (it waits, then needs nothing); the
    # same for (c,y): 2 of 8 cells = 25%
    with pytest.raises(RunError, match=r"needs 2 suppressed cells, 25\.00% .* max_cells = 0\.1; "
                                       r"--set test\.max_cells=0\.25 "):
        run(t, {"k": 2})
    _, data, _ = run(t, {"k": 2, "max_cells": 0.25})
    assert data.column("p").to_pylist() == [None, "b", None, "d"] and data.column("q").null_count == 0


# -- on Adult ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def adult(arx_adult):
    arrow = arx_adult.cast(pa.schema([(c, pa.string()) for c in arx_adult.column_names]))  # every cell as text
    return typed_table({c: arrow.column(c) for c in arrow.column_names},
                       quasi={c: "nominal" for c in ADULT_QIS}, sensitive={"salary-class": "nominal"})


_RUNS: dict = {}


def adult_run(adult, k, importance=None, strategy="importance"):
    key = (k, tuple(importance or ()), strategy)
    if key not in _RUNS:
        _RUNS[key] = run(adult, {"k": k, "importance": importance, "strategy": strategy, "max_cells": 0.2})
    return _RUNS[key]


def suppressed_per_qi(adult, data):
    return {q: data.column(q).null_count - adult.column(q).null_count for q in ADULT_QIS}


def naive_cells(adult, k):
    """The naive baseline: suppress every QI cell of each record whose class is below k."""
    sizes = make_context().sql(f"SELECT count(*) OVER (PARTITION BY {QI_SQL}) AS n FROM t",
                               t=adult).column("n").to_numpy()
    return int((sizes < k).sum()) * len(ADULT_QIS)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_adult_reaches_k_with_few_cells(adult, k):
    out, data, ctx = adult_run(adult, k)
    assert data.num_rows == adult.num_rows == 30162
    # every record compatible with k records (SQL count on the published table), and only blanks
    got = W.min_compatible_count(ctx, data, ADULT_QIS)
    assert got["k"] >= k
    counts = W.compatible_counts(ctx, data, ADULT_QIS).column(W.COUNT).to_numpy()
    assert counts.min() >= k
    orig = ctx.sql(f"SELECT * FROM t ORDER BY {ROW}", t=adult)
    for q in ADULT_QIS:
        kept = np.array([v is not None for v in data.column(q).to_pylist()])
        assert np.array_equal(np.array(data.column(q).to_pylist(), dtype=object)[kept],
                              np.array(orig.column(q).to_pylist(), dtype=object)[kept])
    assert data.column("salary-class").to_pylist() == orig.column("salary-class").to_pylist()
    # _class: one id per published key, nulls included
    keys = ctx.sql(f"SELECT count(DISTINCT {CLASS}) AS c, count(DISTINCT ({QI_SQL}, {CLASS})) AS ck FROM d",
                   d=data).to_pylist()[0]
    assert keys["c"] == keys["ck"] == got["keys"]
    # few cells: an order of magnitude below suppressing the violating records whole
    cells = sum(suppressed_per_qi(adult, data).values())
    assert 0 < cells * 10 < naive_cells(adult, k)
    assert any(f"k = {got['k']} reached" in n and f"{cells} cell(s) suppressed" in n for n in ctx.notes)


def test_adult_importance_is_respected(adult):
    _, data, _ = adult_run(adult, 3)
    per = suppressed_per_qi(adult, data)
    # the default order: sex (2 values) most important, age (many values) least
    order = importance_order(ADULT_QIS, np.array([len(set(adult.column(q).to_pylist())) for q in ADULT_QIS]), None)
    assert order[0] == "sex" and order[-1] == "age"
    assert per["sex"] == min(per.values())
    assert per["age"] == max(per.values())
    # naming age most important: it goes from the most suppressed QI to a small share
    _, data2, _ = adult_run(adult, 3, importance=["age"])
    per2 = suppressed_per_qi(adult, data2)
    assert per2["age"] * 5 < per["age"]
    assert per2["age"] < sorted(per2.values())[len(per2) // 2]  # below the median QI


def test_adult_cells_strategy_spends_fewer_cells(adult):
    _, data, _ = adult_run(adult, 5)
    _, data2, ctx = adult_run(adult, 5, strategy="cells")
    assert W.min_compatible_count(ctx, data2, ADULT_QIS)["k"] >= 5
    assert sum(suppressed_per_qi(adult, data2).values()) < sum(suppressed_per_qi(adult, data).values())


def test_deterministic_and_independent_of_record_order(adult):
    _, data, _ = adult_run(adult, 3)
    _, again, _ = run(adult, {"k": 3, "max_cells": 0.2})
    assert again.equals(data)
    perm = np.random.default_rng(5).permutation(adult.num_rows)
    shuffled = adult.replace(data=adult.data.take(perm))
    _, data3, _ = run(shuffled, {"k": 3, "max_cells": 0.2})
    assert data3.equals(data)


def test_waiting_saves_cells_on_adult(adult):
    ctx = make_context()
    keys = ctx.sql(f"SELECT {QI_SQL}, count(*)::BIGINT AS n FROM t GROUP BY ALL ORDER BY ALL", t=adult)
    codes = W.encode_codes([keys.column(q) for q in ADULT_QIS])
    w = keys.column("n").to_numpy()
    rank = np.arange(len(ADULT_QIS))

    def cells(wait):
        cur, info = suppress(codes, w, 2, rank, wait_rounds=wait)
        assert W.compatible_counts_codes(cur, w).min() >= 2 == info["k"]
        return int((((cur < 0) & (codes >= 0)) * w[:, None]).sum())

    assert cells(None) < cells(0)


def test_workflow_runs_local_suppression(tmp_path):
    text = f"""
name: ls-adult
seed: 1
sources:
  adult: {{path: {ADULT}, delimiter: ";"}}
steps:
  typed:
    uses: typing
    input: adult
    with:
      quasi: {{sex: nominal, age: nominal, race: nominal, marital-status: nominal}}
      sensitive: [salary-class]
  blanked:
    uses: local-suppression
    input: typed
    with: {{k: 5, importance: [race]}}
  published:
    uses: publish
    input: blanked
    with: {{publisher: csv, path: ls-adult.csv}}
"""
    result = run_workflow(text, tmp_path)
    assert result.status == "succeeded"
    step = next(s for s in result.steps if s["step"] == "blanked")
    assert step["rows"] == 30162 and any("k = 5 reached" in n for n in step["notes"])
    published = duckdb.sql(f"SELECT * FROM read_csv('{tmp_path / 'out' / 'ls-adult.csv'}', all_varchar=true)").to_arrow_table()
    assert published.num_rows == 30162 and published.column("age").null_count > 0  # blank cells are empty
    assert published.column("race").null_count == 0  # named most important, never needed here
    counted = typed_table({q: published.column(q) for q in ("sex", "age", "race", "marital-status")},
                          quasi={q: "nominal" for q in ("sex", "age", "race", "marital-status")})
    assert W.min_compatible_count(make_context(), counted, ["sex", "age", "race", "marital-status"])["k"] >= 5
