"""SafePub in the lattice (model ``ed-differential-privacy``): the exponential mechanism's
selection frequencies against its exact probabilities, the sampling rate, every published
class of at least k sampled records (checked with pandas), the score functions on a hand
example, and a deterministic CLI run on ARX's Adult."""

import json
from fractions import Fraction

import numpy as np
import pyarrow.csv as pacsv
import pytest
from scipy import stats

from anonflow import registry as plugins
from anonflow.api import CLASS
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.generalization.lattice_search import Space
from anonflow_std.generalization.safepub import Scores, exponential_choice, exponential_probabilities, walk

from tests.plugins.generalization.test_lattice import adult, arx_hierarchy
from tests.support.helpers import DATA, write

QUASI = ("age", "sex", "race", "marital-status")


def lattice():
    return plugins.get_registry().get("algorithm", "lattice").obj


def test_exponential_mechanism_frequencies_match_the_exact_probabilities():
    # scores of a tiny lattice's candidates; epsilon 2: weights exp(score) -> 1, e^-1, e^-2, e^-4
    scores, eps = [0.0, -1.0, -2.0, -4.0], 2.0
    exact = exponential_probabilities(scores, eps)
    w = np.exp(np.array(scores))
    assert np.allclose(exact, w / w.sum())
    rng = np.random.default_rng(20261208)
    draws = np.array([exponential_choice(scores, eps, rng) for _ in range(20000)])
    counts = np.bincount(draws, minlength=4)
    assert stats.chisquare(counts, exact * draws.size).pvalue > 0.01


def test_walk_on_a_tiny_lattice_draws_the_first_pivot_with_the_exact_probabilities():
    # a 2 x 2 lattice, top (1, 1) scored worst: one step draws (0, 1) or (1, 0), the candidates in
    # that order, with probabilities exp(-1) : exp(-2) at epsilon 2 (exp(eps * score / 2))
    score = {(1, 1): -10, (0, 1): -1, (1, 0): -2, (0, 0): -100}
    rng = np.random.default_rng(7)
    picks = [walk((1, 1), lambda v: Fraction(score[v]), 1, 2.0, rng)[0] for _ in range(4000)]
    counts = np.array([picks.count((0, 1)), picks.count((1, 0))])
    exact = np.exp([-1.0, -2.0]) / np.exp([-1.0, -2.0]).sum()  # 0.731, 0.269
    assert np.allclose(exponential_probabilities([-1, -2], 2.0), exact)
    assert counts.sum() == 4000 and stats.chisquare(counts, exact * 4000).pvalue > 0.01


def test_scores_on_a_hand_example():
    # 6 records, QI sex (hierarchy: value -> *), all sampled, k = 2 at node (0,): classes M:4, F:2
    t = typed_table({"sex": ["Male"] * 4 + ["Female"] * 2}, quasi={"sex": "nominal"})
    t = t.replace(hierarchies={"sex": arx_hierarchy("sex")})
    space = Space(t, ["sex"], np.ones(6, dtype=np.int64))
    part = space.partition((0,))
    # discernibility: -(6*0 + 16 + 4) / (6 * (4/1 + 1)) = -20/30
    assert Scores(space, 6, 2, "discernibility")(part) == pytest.approx(-20 / 30)
    # loss: shares 1/2 each (2 leaves): -(1*0 + (4*1/2 + 2*1/2)) / 1 / (2-1) = -3
    assert Scores(space, 6, 2, "loss")(part) == -3
    # precision at level 0: -(6*0/1 + 0) = 0; aecs: 2 classes, none suppressed
    assert Scores(space, 6, 2, "precision")(part) == 0 and Scores(space, 6, 2, "aecs")(part) == 2
    # entropy: -(16 + 4) / (6 * 1) / 5
    assert Scores(space, 6, 2, "entropy")(part) == pytest.approx(-20 / 6 / 5)
    # with k = 3 the 2 women are suppressed: discernibility -(6*2 + 16) / (6 * (9/2 + 1))
    assert Scores(space, 6, 3, "discernibility")(part) == pytest.approx(-28 / 33)


def run(table, seed, eps=1.0, utility="loss", steps=30):
    lat = lattice()
    params = validate_params(lat.params, {"model": "ed-differential-privacy", "utility": utility,
                                          "model_params": {"epsilon": eps, "delta": 1e-6, "steps": steps}})
    ctx = make_context(seed=seed)
    return lat.run(table, params, ctx), ctx


@pytest.fixture(scope="module")
def sample():
    return adult(4000, quasi=QUASI)


def test_sampling_rate_over_seeds_is_beta(sample):
    rates = []
    for seed in range(5):
        _, ctx = run(sample, seed, eps=1.0, steps=2)
        dp = ctx.fitted["differential_privacy"]
        rates.append(dp["sampled"] / dp["records"])
        assert dp["covers"] == "the whole input table" and dp["suppressed"] == dp["records"] - dp["published"]
    beta = 0.5934303402594007  # epsilon 0.9 after the search's 10 % (ARX)
    # 5 x 4000 Bernoulli(beta) draws: the mean is within 4 standard errors
    assert abs(np.mean(rates) - beta) < 4 * np.sqrt(beta * (1 - beta) / (5 * 4000))


@pytest.mark.parametrize("utility", ["loss", "discernibility", "entropy", "precision", "aecs"])
def test_every_published_class_has_k_records_checked_with_pandas(sample, utility):
    out, ctx = run(sample, 5, eps=1.0, utility=utility)
    dp = ctx.fitted["differential_privacy"]
    frame = out.data.to_pandas()
    published = frame[frame[CLASS].notna()]
    sizes = published.groupby(list(QUASI), dropna=False).size()
    assert sizes.min() >= dp["k"] == 74
    assert len(published) == dp["published"] and len(frame) == sample.num_rows
    assert published[CLASS].nunique() == len(sizes) == dp["classes"]
    # the guarantee is not claimed as a syntactic model
    assert out.claims == {}


def workflow(folder, seed):
    return write(folder / f"dp{seed}.yaml", f"""name: dp-test
seed: {seed}
sources:
  adult: {{path: {DATA / 'arx' / 'adult.csv'}, delimiter: ";"}}
steps:
  typed:
    uses: typing
    input: adult
    with: {{quasi: {{age: continuous, sex: nominal, race: nominal, education: nominal}}, others: drop}}
  hier:
    uses: hierarchy
    input: typed
    with:
{chr(10).join(f"      {c}: {{arx: {DATA / 'arx' / f'adult_hierarchy_{c}.csv'}}}" for c in ('age', 'sex', 'race', 'education'))}
  anon:
    uses: lattice
    input: hier
    with: {{model: ed-differential-privacy, model_params: {{epsilon: 1.0, delta: 1.0e-6, steps: 20}}, utility: loss}}
  out:
    uses: publish
    input: anon
    with: {{publisher: csv, path: anon.csv}}
""")


def test_cli_run_on_arx_adult_is_deterministic_and_states_the_guarantee(cli, tmp_path):
    outputs = []
    for i, seed in enumerate((7, 7, 8)):
        (tmp_path / f"r{i}").mkdir()
        wf = workflow(tmp_path / f"r{i}", seed)
        res = cli("run", wf, "--db", tmp_path / f"s{i}.duckdb", "--json")
        assert res.exit_code == 0, res.output
        outputs.append((tmp_path / f"r{i}" / "out" / "anon.csv").read_bytes())
        if i == 0:
            steps = {s["step"]: s for s in json.loads(res.output)["steps"]}
            notes = " ".join(steps["anon"]["notes"])
            assert "differential privacy covering the whole input table of 30162 records" in notes
            assert "derived k = 74" in notes and "beta = 0.5934303402594007" in notes
    assert outputs[0] == outputs[1] and outputs[0] != outputs[2]
    plan = cli("plan", tmp_path / "r0" / "dp7.yaml")
    assert plan.exit_code == 0, plan.output
    assert "SafePub on" in plan.output and "beta 0.59343, k 74, 20 search steps; scored by loss" in plan.output
    published = pacsv.read_csv(tmp_path / "r0" / "out" / "anon.csv").to_pandas()
    assert published.groupby(["age", "sex", "race", "education"], dropna=False).size().min() >= 74
    assert len(published) < 30162 * 0.6
