"""``max-population-uniqueness``: a threshold on the estimated population uniqueness (ARX's
privacy model ``PopulationUniqueness``).

- the estimate and ARX's verdict on hand-computed histograms (Zayatz by hand; Pitman / Zayatz
  figures of ARX's own classes from tests/plugins/risk/test_reidentification.py), including ARX's
  Dankar rule *without* the Zayatz fallback, and the edge cases (no sample unique, nothing left);
- ARX's binary search over the number of smallest classes suppressed, against a line-by-line
  simulation of ``HashGroupifyDistribution.suppressWhileNotFulfilledBinary`` (entry flags and
  all) on random verdict sequences, and by hand where the estimate is not monotone in j;
- ``compute`` (DuckDB) and ``partition_holds`` agree on random partitions;
- the check on a published table through a workflow's evaluate step, and its refusals;
- the lattice searching under it on ARX's Adult (directly, and in a workflow whose claim the
  engine re-checks), with the chosen node's suppression re-derived independently, and a
  property test that every output satisfies the model it claims.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anonflow.api import CLASS, Partition
from anonflow.errors import InputError
from anonflow.params import ParamError, validate_params
from anonflow.registry import get_registry
from anonflow.testing import make_context, typed_table
from anonflow_std.generalization.hierarchies import ArxFile
from anonflow_std.generalization.lattice import Lattice
from anonflow_std.privacy import population_uniqueness as PU
from anonflow_std.privacy.population_uniqueness import MaxPopulationUniqueness, arx_suppressed_classes, estimate
from anonflow_std.common import uniqueness as U

from tests.support import data
from tests.support.helpers import DATA

ARX_DIR = DATA / "arx"
NAME = "max-population-uniqueness"
M = MaxPopulationUniqueness()
USA = 317_238_626

# ARX's own figures (tests/plugins/risk/test_reidentification.py): HIST has n = 251 records, u = 114
# classes, c_1 = 50; at N = 5000 Dankar takes Pitman, 15.223150721164707 uniques; at N = 600
# (f = 0.418) SNB is NaN and Dankar takes Zayatz, 52.42546971366605 uniques. SMALL at the USA:
# Pitman fails, Zayatz 33011307.663388487 (the risk metric's Dankar falls back to it).
HIST = ([1, 2, 3, 4, 7, 20], [50, 30, 20, 10, 3, 1])
SMALL = ([1, 2, 3, 5], [10, 5, 2, 1])


def params(**given):
    return validate_params(M.params, given)


def published(classes, by_values=True, extra_nulls=0):
    """A published table with one QI ``q``: record i is in class ``classes[i]`` (q = "c<class>")."""
    q = [f"c{c:04d}" for c in classes] + [None] * extra_nulls
    cls = list(classes) + list(range(max(classes, default=-1) + 1, max(classes, default=-1) + 1 + extra_nulls))
    return typed_table({"q": q, "s": ["x"] * len(q)}, quasi={"q": "nominal"}, sensitive={"s": "nominal"},
                       extra={CLASS: pa.array(cls, pa.int64())})


def classes_of(sizes):
    return np.repeat(np.arange(len(sizes)), sizes).tolist()


def run(tab, **given):
    return M.compute(None, tab, params(**given), make_context())


def holds_mask(sizes, **given):
    sizes = np.asarray(sizes, dtype=np.int64)
    t = published(classes_of(sizes))
    part = Partition(np.asarray(classes_of(sizes)), sizes, t)
    got = M.partition_holds(part, params(**given))
    assert got.dtype == np.bool_ and got.shape == sizes.shape
    return got


# -- the estimate and ARX's verdict ---------------------------------------------------------


def test_zayatz_by_hand():
    # classes of size 1 and 2 (n = 3, u = 2), N = 10, f = 0.3:
    # h_1 = 3/10, h_2 = C(2,1) C(8,2) / C(10,3) = 56/120; uniqueness = (3/20) / (3/20 + 56/240) = 9/23
    # uniques = c_1 * 9/23 / f = 30/23; fraction = 30/23 / 10 = 3/23 = 0.1304
    e = estimate([1, 2], [1, 1], 10, "zayatz")
    assert e.uniques == pytest.approx(30 / 23, rel=1e-14) and e.fraction == pytest.approx(3 / 23, rel=1e-14)
    assert (e.records, e.classes, e.sample_uniques, e.population_size, e.available) == (3, 2, 1, 10, True)
    assert e.sampling_fraction == pytest.approx(0.3)
    assert PU.holds(e, 0.14) and not PU.holds(e, 0.13)
    # the same on a published table, counted by DuckDB (q = a, b, b)
    out = run(published([0, 1, 1]), max=0.14, model="zayatz", population_size=10)
    assert out[NAME] == pytest.approx(3 / 23, rel=1e-14) and out[f"{NAME}.holds"] == 1.0
    assert out[f"{NAME}.uniques"] == pytest.approx(30 / 23, rel=1e-14)
    assert (out[f"{NAME}.records"], out[f"{NAME}.classes"], out[f"{NAME}.sample_uniques"]) == (3, 2, 1)
    assert run(published([0, 1, 1]), max=0.13, model="zayatz", population_size=10)[f"{NAME}.holds"] == 0.0
    # sampling_fraction 0.3: N = round(3 / 0.3) = 10, the same
    assert run(published([0, 1, 1]), max=0.13, model="zayatz", sampling_fraction=0.3)[NAME] == \
        pytest.approx(3 / 23, rel=1e-14)


def test_dankar_follows_arx_figures():
    e = estimate(*HIST, 5000)                      # f = 0.0502 <= 0.1: Pitman
    assert e.chosen == "pitman" and e.uniques == pytest.approx(15.223150721164707, rel=1e-7)
    assert e.fraction == pytest.approx(15.223150721164707 / 5000, rel=1e-7)    # 0.0030446
    assert PU.holds(e, 0.0031) and not PU.holds(e, 0.0030)
    e = estimate(*HIST, 600)                       # f = 0.418 > 0.1, SNB NaN: Zayatz
    assert e.chosen == "zayatz" and e.uniques == pytest.approx(52.42546971366605, rel=1e-12)
    assert e.fraction == pytest.approx(52.42546971366605 / 600, rel=1e-12)   # 0.0873758
    # the named models
    assert estimate(*HIST, 5000, "zayatz").uniques == pytest.approx(228.01937292366605, rel=1e-12)
    assert estimate(*HIST, 5000, "pitman").uniques == pytest.approx(15.223150721164707, rel=1e-7)
    snb = estimate(*HIST, 600, "snb")              # NaN in ARX too: not available, fails any max
    assert (snb.available, snb.fraction, PU.holds(snb, 1.0)) == (False, 0.0, False)


def test_dankar_without_the_zayatz_fallback_as_arx_criterion():
    """ARX's criterion calls getFractionOfUniqueTuplesDankar(false): Pitman failing at f <= 0.1
    fails the check, where the risk metric (and ARX's risk estimator) falls back to Zayatz."""
    metric = U.population_uniqueness(*SMALL, USA)
    assert metric.dankar_model == "zayatz" and metric.dankar == pytest.approx(33011307.663388487, rel=1e-12)
    e = estimate(*SMALL, USA)
    assert (e.available, e.chosen, e.fraction, e.sample_uniques) == (False, "pitman", 0.0, 10)
    assert not PU.holds(e, 1.0)
    z = estimate(*SMALL, USA, "zayatz")            # asked for by name, Zayatz is there: 0.10406
    assert z.fraction == pytest.approx(33011307.663388487 / USA, rel=1e-12)
    assert PU.holds(z, 0.2) and not PU.holds(z, 0.1)


def test_no_sample_unique_and_nothing_left_hold_whatever_max():
    e = estimate([2, 3], [5, 1], 1000)
    assert (e.fraction, e.uniques, e.available, e.chosen) == (0.0, 0.0, True, "none") and PU.holds(e, 0.0)
    e = estimate([], [], 1000)
    assert e.records == 0 and PU.holds(e, 0.0)
    out = run(published([0, 0, 1, 1, 1]), max=0.0)
    assert out[f"{NAME}.holds"] == 1.0 and out[NAME] == 0.0 and out[f"{NAME}.dankar_model"] == 0.0
    # a unique always makes the estimate > 0 or unavailable: max = 0 fails
    assert run(published([0, 1, 1]), max=0.0, population_size=10)[f"{NAME}.holds"] == 0.0


def test_population_defaults_and_errors():
    out = run(published([0, 1, 1, 2]), max=0.5)
    assert out[f"{NAME}.population_size"] == USA and out[f"{NAME}.sampling_fraction"] == pytest.approx(4 / USA)
    with pytest.raises(InputError, match="population_size or sampling_fraction, not both"):
        run(published([0, 1]), max=0.5, population_size=10, sampling_fraction=0.5)
    with pytest.raises(InputError, match="population .* is smaller than the 3 published records"):
        run(published([0, 1, 1]), max=0.5, population_size=2)
    with pytest.raises(InputError, match="population_size = 2 is smaller than the table's 3 records"):
        holds_mask([1, 2], max=0.5, population_size=2)
    with pytest.raises(InputError, match=r"needs max, e\.g\. model_params"):
        holds_mask([1, 2])
    with pytest.raises(ParamError):
        params(max=0.1, model="poisson")
    with pytest.raises(ParamError):
        params(max=1.5)


def test_unclaimed_parameters_come_from_the_claim():
    t = published([0, 1, 1])
    t = t.replace(claims={NAME: {"max": 0.13, "model": "zayatz", "population_size": 10}})
    out = M.compute(None, t, params(), make_context())
    assert out[NAME] == pytest.approx(3 / 23) and out[f"{NAME}.max"] == 0.13 and out[f"{NAME}.holds"] == 0.0
    out = M.compute(None, t, params(max=0.2, population_size=20), make_context())   # given ones win
    assert out[f"{NAME}.population_size"] == 20 and out[f"{NAME}.max"] == 0.2


def test_suppressed_cells_are_refused_in_one_line_and_by_class_counts_class_ids():
    t = published([0, 1, 1], extra_nulls=1)
    with pytest.raises(InputError) as exc:
        run(t, max=0.5)
    assert "\n" not in str(exc.value) and NAME in str(exc.value) and "disjoint classes" in str(exc.value)
    out = run(t, max=0.5, by="class", population_size=10)        # 3 classes by _class: 1, 2, 1 records
    assert (out[f"{NAME}.classes"], out[f"{NAME}.sample_uniques"], out[f"{NAME}.records"]) == (3, 2, 4)


def test_suppressed_records_are_left_out():
    t = published([0, 1, 1, 2, 2])
    cls = t.data.column(CLASS).to_pylist()
    t = t.replace(data=t.data.set_column(t.data.column_names.index(CLASS), CLASS,
                                         pa.array([None if c == 0 else c for c in cls], pa.int64())))
    out = run(t, max=0.5, population_size=100)
    assert (out[f"{NAME}.records"], out[f"{NAME}.sample_uniques"], out[NAME]) == (4, 0, 0.0)


# -- ARX's binary search over the smallest classes ---------------------------------------------


def java_binary_search(c, ok):
    """``suppressWhileNotFulfilledBinary`` line by line, with the entries' outlier flags; ``ok``
    is read at the number of classes suppressed, which must always be a prefix."""
    outlier = [False] * c

    def state():
        j = sum(outlier)
        assert outlier == [True] * j + [False] * (c - j)
        return ok(j)

    def jdiv(a):
        return int(a / 2)          # Java's int division truncates toward zero

    low, high = 0, c - 1
    mid = jdiv(low + high)
    for i in range(low, mid + 1):
        outlier[i] = True
    fulfilled = None
    while low <= high:
        fulfilled = state()
        if fulfilled:
            high = mid - 1
            mid = jdiv(low + high)
            i = mid + 1
            while i < c and outlier[i]:
                outlier[i] = False
                i += 1
        else:
            low = mid + 1
            mid = jdiv(low + high)
            for i in range(low, mid + 1):
                outlier[i] = True
    fulfilled = state()
    if not fulfilled and mid + 1 < c and not outlier[mid + 1]:
        outlier[mid + 1] = True
    return sum(outlier)


def test_binary_search_by_hand():
    # 8 classes, holds from 3 suppressed on: ok(4) yes, ok(2) no, ok(3) yes -> 3
    assert arx_suppressed_classes(np.arange(8), lambda j: j >= 3) == 3
    # not monotone in j: holds at 2 and from 5 on. ok(4) no -> ok(6) yes -> ok(5) yes -> end,
    # final ok(4) no -> one more: 5 classes, though 2 would have done (ARX's answer)
    good = {2, 5, 6, 7, 8}
    assert arx_suppressed_classes(np.arange(8), lambda j: j in good) == 5
    assert java_binary_search(8, lambda j: j in good) == 5
    # one class that fails: suppress it (nothing left holds)
    assert arx_suppressed_classes(np.arange(1), lambda j: j == 1) == 1
    # holds after the first one: ok(1) with mid = 0, then the midpoint of 0 and -1 is 0 (Java)
    assert arx_suppressed_classes(np.arange(2), lambda j: j >= 1) == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_binary_search_is_arxs_and_ends_on_a_state_that_holds(verdicts):
    c = len(verdicts)
    ok_at = [False] + verdicts[:-1] + [True]       # nothing suppressed fails; all suppressed holds
    calls = []

    def ok(j):
        calls.append(j)
        return ok_at[j]

    j = arx_suppressed_classes(np.arange(c), ok)
    assert j == java_binary_search(c, lambda i: ok_at[i])
    assert ok_at[j] and 1 <= j <= c
    assert len(set(calls)) <= 2 * math.ceil(math.log2(c + 1)) + 2


def test_partition_holds_suppresses_arxs_classes_by_hand():
    # sizes 2, 1, 2 (class 1 is the unique), N = 10, zayatz: 5 records, f = 0.5, c_1 = 1:
    # fails at max 0.05; the smallest class (class 1) suppressed leaves 2, 2: no unique -> holds
    assert holds_mask([2, 1, 2], max=0.05, model="zayatz", population_size=10).tolist() == [True, False, True]
    # the estimate as it is
    e = estimate([1, 2], [1, 2], 10, "zayatz")
    assert e.fraction > 0.05 and PU.holds(e, e.fraction)
    assert holds_mask([2, 1, 2], max=e.fraction, model="zayatz", population_size=10).all()


def test_partition_holds_replays_arxs_search_with_the_real_estimates():
    """Sizes where the real Dankar estimate makes the verdict non-monotone in j: the classes
    marked False are exactly the j of the line-by-line simulation, smallest first, ties by
    class number."""
    rng = np.random.default_rng(7)
    for trial in range(25):
        sizes = rng.integers(1, 6, size=int(rng.integers(5, 40)))
        model = ["dankar", "zayatz", "pitman"][trial % 3]
        pop = {"population_size": int(sizes.sum() * rng.choice([3, 20, 500]))}
        mx = float(rng.choice([1e-4, 1e-3, 1e-2, 5e-2]))
        ordered = np.sort(sizes, kind="stable")

        def ok(j):
            rest = ordered[j:]
            if rest.size == 0:
                return True
            return PU.holds(estimate(*np.unique(rest, return_counts=True), pop["population_size"], model), mx)

        got = holds_mask(sizes, max=mx, model=model, **pop)
        if ok(0):
            assert got.all()
            continue
        j = java_binary_search(len(sizes), ok)
        order = np.argsort(sizes, kind="stable")
        want = np.ones(len(sizes), dtype=bool)
        want[order[:j]] = False
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("model, pop", [("zayatz", {"population_size": 400}), ("dankar", {"sampling_fraction": 0.2}),
                                        ("dankar", {}), ("pitman", {"population_size": 2000})])
def test_compute_and_partition_holds_agree_on_random_partitions(model, pop):
    rng = np.random.default_rng(3)
    for _ in range(6):
        sizes = rng.integers(1, 5, size=int(rng.integers(8, 30)))
        for mx in (1e-3, 2e-2):
            keep = holds_mask(sizes, max=mx, model=model, **pop)
            kept = [c for c in classes_of(sizes) if keep[c]]
            tab = published(kept)
            out = run(tab, max=mx, model=model, **pop)
            assert out[f"{NAME}.holds"] == 1.0, (sizes.tolist(), keep.tolist(), out)
            if keep.all():   # as it is: compute on the whole table agrees
                assert out[f"{NAME}.records"] == sizes.sum()


def test_weighted_partition_counts_records():
    # a frequency table: 3 rows standing for 2, 1 and 2 records, in classes 0, 1, 2
    t = published([0, 1, 2])
    part = Partition(np.array([0, 1, 2]), np.array([2, 1, 2]), t, weights=np.array([2, 1, 2]))
    got = M.partition_holds(part, params(max=0.05, model="zayatz", population_size=10))
    assert got.tolist() == [True, False, True]
    assert M.weighted_partitions and not M.monotone and not M.monotone_with_suppression


def test_not_monotone_counterexamples():
    """Why both flags are false: merging two classes can raise the estimate, even Zayatz's
    (ARX declares Zayatz monotone with generalization)."""
    before = estimate([1, 3, 4, 5], [1, 1, 2, 1], 5000, "zayatz").fraction   # sizes 1, 3, 4, 4, 5
    after = estimate([1, 3, 4, 9], [1, 1, 1, 1], 5000, "zayatz").fraction    # 4 and 5 merged
    assert before == pytest.approx(0.003493, abs=1e-6) and after == pytest.approx(0.003519, abs=1e-6)
    assert PU.holds(estimate([1, 3, 4, 5], [1, 1, 2, 1], 5000, "zayatz"), 0.0035)
    assert not PU.holds(estimate([1, 3, 4, 9], [1, 1, 1, 1], 5000, "zayatz"), 0.0035)
    d_before = estimate([1, 2, 3], [1, 1, 1], 50).fraction                   # Dankar: 1, 2, 3
    d_after = estimate([1, 5], [1, 1], 50).fraction                          # 2 and 3 merged
    assert d_after > d_before


# -- a published table through an evaluate step ----------------------------------------------------


def _workflow(tmp_path: Path, text: str) -> dict:
    from anonflow.cli import main

    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    res = CliRunner().invoke(main, ["run", str(wf), "--db", str(tmp_path / "s.duckdb"), "--out-dir",
                                    str(tmp_path / "out"), "--json"], catch_exceptions=False)
    out = json.JSONDecoder().raw_decode(res.output[res.output.index("{"):])[0]   # a failed run adds a line
    out["exit_code"] = res.exit_code
    return out


def test_evaluate_step_checks_a_published_table(tmp_path):
    # q = a, b, b: classes of size 1 and 2, N = 10: Zayatz 3/23 = 0.1304 (by hand above)
    (tmp_path / "t.csv").write_text("q,s\na,x\nb,y\nb,x\n")
    base = f"""
name: pu-eval
sources:
  t: {{path: {tmp_path / 't.csv'}}}
steps:
  typed:
    uses: typing
    input: t
    with: {{quasi: {{q: nominal}}, sensitive: [s]}}
  check:
    uses: evaluate
    input: typed
    with:
      metrics:
        {NAME}: {{max: MAX, model: zayatz, population_size: 10}}
        population-uniqueness: {{model: zayatz, population_size: 10}}
"""
    out = _workflow(tmp_path, base.replace("MAX", "0.14"))
    assert out["status"] == "succeeded" and out["exit_code"] == 0
    m = out["metrics"]
    assert m[f"check.{NAME}"] == pytest.approx(3 / 23) == m["check.population-uniqueness"]
    assert m[f"check.{NAME}.holds"] == 1.0
    out = _workflow(tmp_path, base.replace("MAX", "0.13"))
    assert out["status"] == "failed" and out["exit_code"] != 0
    assert f"privacy check '{NAME}' does not hold" in json.dumps(out)


# -- the lattice on ARX's Adult ------------------------------------------------------------------------

QUASI = ("age", "sex", "race", "marital-status")


def adult(n=None, quasi=QUASI, seed=1):
    raw = data.arx_adult()
    if n is not None:
        raw = raw.take(pa.array(np.sort(np.random.default_rng(seed).choice(raw.num_rows, n, replace=False))))
    t = typed_table({c: raw.column(c).to_pylist() for c in (*quasi, "salary-class")},
                    quasi={q: "continuous" if q == "age" else "nominal" for q in quasi},
                    sensitive={"salary-class": "nominal"})
    hier = {q: ArxFile().build(q, pa.array([]), {"file": str(ARX_DIR / f"adult_hierarchy_{q}.csv"), "delimiter": ";"},
                               make_context()) for q in quasi}
    return t.replace(hierarchies=hier)


def run_lattice(table, model_params, suppression):
    ctx = make_context()
    p = validate_params(Lattice.params, {"model": NAME, "model_params": model_params, "suppression": suppression})
    lattice = get_registry().get("algorithm", "lattice").obj  # it looks its models up in its registry
    lattice.check(p, table=table)
    return lattice.run(table, p, ctx), ctx


def independent_fraction(sizes, population_size, model):
    """The estimate from the risk module's functions directly (not through the plugin)."""
    s, c = U.class_size_histogram(sizes)
    if c[s == 1].sum() == 0:
        return 0.0, True
    if model == "zayatz":
        u = U.zayatz(s, c, population_size)
    elif model == "pitman":
        u = U.pitman(s, c, population_size)[0]
    else:
        pu = U.population_uniqueness(s, c, population_size, models=())
        if (s * c).sum() / population_size <= 0.1 and pu.dankar_model != "pitman":
            return 0.0, False
        u = pu.dankar
    ok = not math.isnan(u) and u != 0
    return (u / population_size if ok else 0.0), ok


def check_output(t, out, ctx, mp, suppression):
    """The published records satisfy the model (the plugin's SQL check and the risk module's
    functions on pandas class sizes), nothing is lost, and the records suppressed are the
    classes ARX's binary search suppresses on the chosen node's classes."""
    assert out.claims == {NAME: {k: v for k, v in params(**mp).items() if v is not None}}
    assert sorted(out.data.column("_row").to_pylist()) == list(range(t.num_rows))
    keep = pc.is_valid(out.data.column(CLASS))
    pub = out.replace(data=out.data.filter(keep))
    assert t.num_rows - pub.num_rows <= int(suppression * t.num_rows + 1e-9)
    res = M.compute(None, pub, params(), ctx)       # everything from the claim
    assert res[f"{NAME}.holds"] == 1.0, res
    quasi = list(t.typing.quasi)
    df = out.data.select(quasi + [CLASS]).to_pandas()
    kept = df[df[CLASS].notna()]
    sizes = kept.groupby(quasi, dropna=False).size().to_numpy()
    n = int(sizes.sum())
    model = mp.get("model") or "dankar"
    N = mp.get("population_size") or (int(math.floor(n / mp["sampling_fraction"] + 0.5))
                                      if mp.get("sampling_fraction") else USA)
    frac, ok = independent_fraction(sizes, N, model)
    assert frac == pytest.approx(res[NAME], rel=1e-12, abs=0)
    assert (ok and 0 < frac <= mp["max"]) or (frac == 0 and (sizes != 1).all()) or n == 0
    # the chosen node's classes over every record (the output's generalized QIs), replayed
    full = np.sort(df.groupby(quasi, dropna=False).size().to_numpy(), kind="stable")

    def ok_j(j):
        rest = full[j:]
        if rest.size == 0:
            return True
        rn = int(rest.sum())
        rN = mp.get("population_size") or (int(math.floor(rn / mp["sampling_fraction"] + 0.5))
                                           if mp.get("sampling_fraction") else USA)
        f, good = independent_fraction(rest, rN, model)
        return (f == 0 and (rest != 1).all()) or (good and 0 < f <= mp["max"])

    j = 0 if ok_j(0) else java_binary_search(len(full), ok_j)
    assert t.num_rows - pub.num_rows == int(full[:j].sum())
    return res


def test_lattice_on_adult_with_suppression():
    t = adult()                                                         # all 30,162 records
    mp = {"max": 1e-12}
    out, ctx = run_lattice(t, mp, 0.02)
    res = check_output(t, out, ctx, mp, 0.02)
    note = next(x for x in ctx.notes if "chosen node" in x)
    assert "120 record(s) suppressed" in note and "[age=1, sex=0, race=0, marital-status=0]" in note
    assert res[f"{NAME}.records"] == 30162 - 120 and res[f"{NAME}.population_size"] == USA
    assert any("is not monotone under generalization" in x for x in ctx.notes)


def test_lattice_on_adult_without_suppression_checks_every_node():
    t = adult(600, seed=1)
    mp = {"max": 1e-9}
    out, ctx = run_lattice(t, mp, 0.0)
    check_output(t, out, ctx, mp, 0.0)
    assert any("every one of the 60 nodes was checked" in x for x in ctx.notes)
    assert out.data.column(CLASS).null_count == 0


def test_max_zero_leaves_no_sample_unique():
    """max = 0 holds only where no class has one record (every estimate is then 0): the top
    node always qualifies, so the lattice always finds a node."""
    t = adult(300, quasi=("age", "sex"), seed=2)
    mp = {"max": 0.0, "model": "pitman", "population_size": 301}
    out, ctx = run_lattice(t, mp, 0.0)
    res = check_output(t, out, ctx, mp, 0.0)
    assert res[NAME] == 0.0 and res[f"{NAME}.sample_uniques"] == 0.0
    sizes = out.data.select(["age", "sex"]).to_pandas().value_counts().to_numpy()
    assert sizes.min() >= 2


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), suppression=st.sampled_from([0.02, 0.05]),
       mp=st.sampled_from([{"max": 1e-9}, {"max": 0.01, "model": "zayatz", "sampling_fraction": 0.1},
                           {"max": 0.01, "sampling_fraction": 0.1}, {"max": 0.02, "population_size": 3000},
                           {"max": 0.005, "model": "pitman", "population_size": 6000}]))
def test_every_output_satisfies_the_model_it_claims(seed, suppression, mp):
    """Property: on random samples of Adult the lattice's published records satisfy the model
    by its SQL check and by the risk module's functions, and the records suppressed are ARX's."""
    t = adult(600, seed=seed)
    try:
        out, ctx = run_lattice(t, mp, suppression)
    except InputError as exc:   # a sample no node can protect is refused, naming the closest node
        assert "the least violating node" in str(exc)
        return
    check_output(t, out, ctx, mp, suppression)


def test_lattice_workflow_claim_is_rechecked_and_evaluated(tmp_path):
    """Through the engine: the lattice's claim is re-checked on the published records (the
    run would fail otherwise), and an evaluate step re-checks it from the claim alone."""
    d = ARX_DIR
    hier = "\n".join(f"      {q}: {{arx: {d / f'adult_hierarchy_{q}.csv'}}}" for q in QUASI)
    text = f"""
name: pu-lattice
sources:
  adult: {{path: {d / 'adult.csv'}, delimiter: ";"}}
steps:
  typed:
    uses: typing
    input: adult
    with:
      quasi: {{age: continuous, sex: nominal, race: nominal, marital-status: nominal}}
      sensitive: [salary-class]
  hier:
    uses: hierarchy
    input: typed
    with:
{hier}
  anon:
    uses: lattice
    input: hier
    with:
      model: {NAME}
      model_params: {{max: 0.0005, sampling_fraction: 0.1}}
      suppression: 0.02
      utility: loss
  check:
    uses: evaluate
    input: [hier, anon]
    with:
      metrics:
        {NAME}: {{}}
        population-uniqueness: {{sampling_fraction: 0.1}}
"""
    out = _workflow(tmp_path, text)
    assert out["status"] == "succeeded", out.get("error")
    m = out["metrics"]
    assert m[f"check.{NAME}.holds"] == 1.0 and m[f"check.{NAME}.max"] == 0.0005
    assert 0 <= m[f"check.{NAME}"] <= 0.0005
    n = m[f"check.{NAME}.records"]
    assert m[f"check.{NAME}.population_size"] == math.floor(n / 0.1 + 0.5)
    anon = next(s for s in out["steps"] if s["step"] == "anon")
    assert n == 30162 - anon["suppressed"]
    if m[f"check.{NAME}.available"] and m[f"check.{NAME}.dankar_model"] == 1.0:   # Pitman: both agree
        assert m[f"check.{NAME}"] == m["check.population-uniqueness"]


# -- agreement with ARX 3.9.2 ------------------------------------------------------------------------
# ARX 3.9.2 (commit aacd487f, core built from source) on all of Adult with the QIs sex, age, race,
# marital-status, education and ARX's hierarchies: PopulationUniqueness(max, model,
# ARXPopulationModel.create(N)), the loss metric with the arithmetic mean, and for every one of
# the 240 nodes ARXResult.getOutput(node) -- the records ARX's enforcement suppresses (all 240
# agree with partition_holds; a few are pinned here) and the optimum it picks.

Q5 = ("sex", "age", "race", "marital-status", "education")

# dankar, N = USA, max = 1e-10: records ARX suppresses at a node. At [0,3,0,0,0] the fewest
# would be the 8 records of the 8 smallest classes, but ARX's binary search ends at 435.
ARX_SUPPRESSED = {(0, 0, 0, 0, 0): 3187, (0, 0, 0, 2, 2): 264, (0, 1, 0, 2, 2): 44, (0, 3, 0, 0, 0): 435,
                  (0, 4, 0, 0, 0): 147}
# (model, N, max, suppression) -> ARX's optimum and the records it suppresses
ARX_OPTIMA = {("dankar", USA, 1e-10, 0.05): ((0, 2, 0, 0, 0), 673),
              ("zayatz", 300_000, 0.001, 0.05): ((0, 2, 0, 0, 0), 377),
              ("pitman", 100_000, 0.005, 0.05): ((0, 3, 0, 0, 0), 0),
              ("dankar", 200_000, 0.01, 0.05): ((0, 1, 0, 0, 0), 53)}


def test_suppression_at_nodes_is_arxs():
    from anonflow_std.generalization.lattice_search import Space

    t = adult(quasi=Q5)
    space = Space(t, list(Q5))
    p = params(max=1e-10)
    for levels, want in ARX_SUPPRESSED.items():
        part = space.partition(levels)
        ok = M.partition_holds(Partition(None, part.sizes, t), p)
        assert int(part.sizes[~ok].sum()) == want, levels
    # the top node holds as it is (one class, no unique); ARX counts its records as suppressed
    # (fully generalized), but holds too
    top = space.partition(tuple(int(h) for h in space.heights))
    assert M.partition_holds(Partition(None, top.sizes, t), p).all()


@pytest.mark.parametrize("key", sorted(ARX_OPTIMA, key=str), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_lattice_optimum_is_arxs(key):
    model, population, mx, suppression = key
    levels, suppressed = ARX_OPTIMA[key]
    t = adult(quasi=Q5)
    out, ctx = run_lattice(t, {"max": mx, "model": model, "population_size": population}, suppression)
    note = next(x for x in ctx.notes if "chosen node" in x)
    shown = ", ".join(f"{q}={lv}" for q, lv in zip(Q5, levels))
    assert f"chosen node [{shown}]" in note and f"{suppressed} record(s) suppressed" in note, note
