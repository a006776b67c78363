"""``workflows/sdc-adult.yaml`` as shipped (about 10 s): recode, local suppression, PRAM and
correlated noise chained on Adult. Its release is re-read with pandas, next to the source file,
and checked against what the workflow says each step does: the keys are the recoded keys with
some cells blanked (PRAM and noise touch no key); occupation and workclass keep their
frequencies (invariant PRAM) and change about as often as the run says; the noised columns keep
their means and the correlated noise's covariance (1 + c) S within sampling error; every other
column is published unchanged; the manifest states each step's declaration; and the published
order follows the values, not the source."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.support.helpers import DATA
from tests.support.shipped import shipped_run

pytestmark = pytest.mark.slow

KEYS = ["age", "sex", "race", "marital-status", "education", "native-country"]
PRAMED = ["occupation", "workclass"]
NOISED = ["capital-gain", "capital-loss", "hours-per-week"]
UNCHANGED = ["fnlwgt", "education-num", "relationship", "income"]
BREAKS = [16, 24, 34, 44, 54, 64, 90]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return shipped_run("sdc-adult", tmp_path_factory)


@pytest.fixture(scope="module")
def frames(run):
    release = run["dir"] / "sdc-adult-release"
    published = pd.read_csv(release / "published.csv", keep_default_na=False, na_values=[""])
    source = pd.read_csv(DATA / "adult" / "adult_full.csv")
    manifest = json.loads((release / "manifest.json").read_text())
    return source, published, manifest


def test_every_record_and_every_unchanged_column_is_published_as_it_was(frames):
    source, published, _ = frames
    assert len(published) == len(source)
    for col in UNCHANGED:
        assert sorted(published[col].astype(str)) == sorted(source[col].astype(str)), col
    # the order follows the published values (class ids renumbered by them), not the source
    assert published["_class"].tolist() == list(range(len(published)))
    assert not (published["fnlwgt"].to_numpy() == source["fnlwgt"].to_numpy()).all()


def test_keys_are_the_recoded_keys_with_cells_blanked_and_k_5_holds(frames):
    source, published, _ = frames
    # records are matched by fnlwgt + education-num + relationship + income where that is unique
    ident = ["fnlwgt", "education-num", "relationship", "income"]
    src = source.assign(age=pd.cut(source["age"], BREAKS).astype(str).str.replace(", ", ",", regex=False))
    src = src.drop_duplicates(ident, keep=False).set_index(ident)
    pub = published.drop_duplicates(ident, keep=False).set_index(ident)
    both = src.index.intersection(pub.index)
    assert len(both) > 0.85 * len(source)
    s, p = src.loc[both, KEYS], pub.loc[both, KEYS]
    blank = p.isna()
    assert ((s == p) | blank).all().all()
    assert 0 < blank.to_numpy().sum() < 0.02 * blank.size  # local suppression blanked about 1 % of key cells
    assert set(published["age"].dropna()) <= {f"({a},{b}]" for a, b in zip(BREAKS, BREAKS[1:])}
    assert (published["capital-gain"] <= 20000 + 6 * np.sqrt(0.1) * source["capital-gain"].clip(upper=20000).std()
            ).all()


def test_pram_keeps_the_frequencies_and_changes_about_what_the_run_says(frames, run):
    source, published, _ = frames
    notes = next(s for s in run["steps"] if s["step"] == "pramed")["notes"]
    for col in PRAMED:
        before = source[col].value_counts(normalize=True)
        after = published[col].value_counts(normalize=True).reindex(before.index, fill_value=0.0)
        # invariant PRAM: E[after] = before; one draw is off by about sqrt(p (1 - p) / n) per category
        se = np.sqrt(before * (1 - before) / len(source))
        assert (abs(after - before) < 5 * se + 1e-4).all(), col
        changed = next(n for n in notes if n.startswith(f"pram '{col}'"))
        share = float(changed.split("(")[1].split("%")[0]) / 100
        assert 0.02 < share < 0.2  # pd 0.8 (diagonal in [0.8, 1], then alpha 0.5 halfway to the identity)


def test_the_noise_keeps_means_and_the_covariance_of_correlated_noise(frames):
    source, published, _ = frames
    x = source[NOISED].assign(**{"capital-gain": source["capital-gain"].clip(upper=20000)}).to_numpy(float)
    y = published[NOISED].to_numpy(float)
    n = len(x)
    S = np.cov(x, rowvar=False)
    sd = np.sqrt(np.diag(S))
    # means: the noise has mean 0 and sd sqrt(0.1) s_j per column
    assert (abs(y.mean(axis=0) - x.mean(axis=0)) < 5 * np.sqrt(0.1) * sd / np.sqrt(n)).all()
    # covariance: (1 + 0.1) S, within a loose sampling bound (the noise's own covariance varies)
    assert np.allclose(np.cov(y, rowvar=False), 1.1 * S, rtol=0.05, atol=0.05 * np.outer(sd, sd).max() / 10)


def test_the_release_states_each_steps_declaration(frames):
    _, _, manifest = frames
    steps = {s["step"]: s for s in manifest["steps"]}
    assert steps["recoded"]["perturbs"]["age"]["breaks"] == BREAKS
    assert steps["topcoded"]["perturbs"] == {"capital-gain": {"kind": "recode", "method": "top-bottom-coding",
                                                              "top": 20000, "top_value": 20000}}
    assert sorted(steps["pramed"]["perturbs"]) == PRAMED
    assert {w["pd"] for w in steps["pramed"]["perturbs"].values()} == {0.8}
    assert sorted(steps["noised"]["perturbs"]) == sorted(NOISED)
    assert {(w["method"], w["noise"]) for w in steps["noised"]["perturbs"].values()} == {("correlated", 10.0)}
    assert "perturbs" not in steps["suppressed"]
    assert manifest["release"]["claims"] == {"k-anonymity": {"k": 5}}
