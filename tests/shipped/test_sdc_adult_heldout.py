"""``workflows/sdc-adult-heldout.yaml`` as shipped: one Adult record in five held out as the
control set, PRAM then correlated noise on the rest, risks measured by attacks before and after,
utilities, a release that states both perturbations, and a noise sweep whose report plots
linkability against IL1s. The release is re-read with pandas next to the source file."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from tests.support.helpers import DATA, WORKFLOWS
from tests.support.shipped import shipped_run

pytestmark = pytest.mark.slow

NOISED = ["age", "capital-gain", "capital-loss", "hours-per-week"]
PRAMED = ["occupation", "workclass"]
ATTACKS = ["linkability-risk", "inference-risk", "singling-out-risk"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return shipped_run("sdc-adult-heldout", tmp_path_factory)


@pytest.fixture(scope="module")
def frames(run):
    release = run["dir"] / "sdc-adult-heldout"
    published = pd.read_csv(release / "published.csv", keep_default_na=False, na_values=[""])
    source = pd.read_csv(DATA / "adult" / "adult_full.csv")
    manifest = json.loads((release / "manifest.json").read_text())
    return source, published, manifest


def test_the_held_out_records_are_not_released(run, frames):
    source, published, _ = frames
    rows = {s["step"]: s["rows"] for s in run["steps"]}
    assert rows["train"] + rows["held_out"] == len(source)
    assert 0.18 < rows["held_out"] / len(source) < 0.22  # one in five, by a hash of the position
    assert len(published) == rows["train"]
    # fnlwgt is published unchanged: its multiset is the training records', never the held-out ones'
    counts = source["fnlwgt"].value_counts()
    released = published["fnlwgt"].value_counts()
    assert (released.reindex(counts.index, fill_value=0) <= counts).all()
    assert int((counts - released.reindex(counts.index, fill_value=0)).sum()) == rows["held_out"]


def test_the_release_states_both_perturbations_and_no_class_claim(frames):
    _, _, manifest = frames
    steps = {s["step"]: s for s in manifest["steps"]}
    assert sorted(steps["pramed"]["perturbs"]) == PRAMED
    assert {w["kind"] for w in steps["pramed"]["perturbs"].values()} == {"randomize"}
    assert {w["pd"] for w in steps["pramed"]["perturbs"].values()} == {0.7}
    assert sorted(steps["noised"]["perturbs"]) == sorted(NOISED)
    assert {(w["kind"], w["method"], w["noise"]) for w in steps["noised"]["perturbs"].values()} == {
        ("noise", "correlated", 20.0)}
    assert not manifest["release"].get("claims")


def test_risks_fall_and_utilities_are_measured(run):
    m = run["metrics"]
    # the training records as they are: about 17 % link back to themselves on the four columns
    assert m["risk.dbrl.before"] > 0.1 and m["risk.dbrl"] < m["risk.dbrl.before"] / 10
    for name in ATTACKS:
        assert 0.0 <= m[f"risk.{name}"] <= 1.0 and f"risk.{name}.before" in m, name
        assert m[f"risk.{name}.attacks"] == 500 and m[f"risk.{name}.control_attacks"] == 500, name
    assert m["risk.linkability-risk"] <= m["risk.linkability-risk.before"]
    assert m["risk.inference-risk"] < m["risk.inference-risk.before"]
    assert 0 < m["utility.il1s"] < 1 and m["utility.eigen-utility"] >= 0
    assert m["utility.pmse"] > 0 and m["utility.pmse.records"] == 2 * {s["step"]: s["rows"] for s in run["steps"]}["train"]


def test_the_noise_moves_each_noised_column_by_about_its_stated_share(frames):
    source, published, _ = frames
    # correlated noise at 20 % of the covariance: each column's variance grows by a fifth
    # (the training records are 4/5 of the source: their variance is the source's within sampling error)
    for col in NOISED:
        ratio = published[col].var() / source[col].var()
        assert 1.1 < ratio < 1.3, (col, ratio)


def test_a_noise_sweep_plots_linkability_against_il1s(run, cli, tmp_path):
    db = tmp_path / "s.duckdb"
    shutil.copyfile(run["db"], db)
    res = cli("run", WORKFLOWS / "sdc-adult-heldout.yaml", "--db", db, "--set", "noised.noise=100",
              "--out-dir", tmp_path / "o")
    assert res.exit_code == 0, res.output
    page = (tmp_path / "o" / "sdc-adult-heldout" / "report.html").read_text()
    assert 'id="tradeoff"' in page
    assert "<code>risk.linkability-risk</code> (lower is better) and its <code>utility.il1s</code>" in page
    assert 'aria-label="utility.il1s against risk.linkability-risk for each run of the sweep"' in page
    assert page.count("<td>20.0</td>") == 1 and page.count("<td>100.0</td>") == 1
