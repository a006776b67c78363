"""``workflows/dp-adult.yaml`` as shipped: SafePub on ARX's Adult and OpenDP's noisy aggregates
of the same records within one budget the store keeps. Re-checked with pandas beside the source
file: the release holds sampled records in classes of at least SafePub's k (ARX's figures for
ε = 1, δ = 10⁻⁶), the aggregates hold every cell of their domains near the exact counts, both
steps' losses are stated, and a second run against the same store is refused before it reads
a record."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from tests.support.helpers import DATA, WORKFLOWS
from tests.support.shipped import shipped_run

pytestmark = pytest.mark.slow

QUASI = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]
#: ARX's own figures for ε = 1, δ = 10⁻⁶ with 10 % of ε to the search (docs/differential-privacy.md)
BETA, K = 0.5934303402594007, 74


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return shipped_run("dp-adult", tmp_path_factory)


@pytest.fixture(scope="module")
def source() -> pd.DataFrame:
    return pd.read_csv(DATA / "arx" / "adult.csv", sep=";")


def test_the_release_holds_sampled_records_in_classes_of_at_least_k(run, source):
    published = pd.read_csv(run["dir"] / "dp-adult-release" / "published.csv", dtype=str, keep_default_na=False)
    n = len(source)
    # about β of the records are sampled, then classes below k go: never more than the sample
    assert 0 < len(published) < BETA * n + 4 * (n * BETA * (1 - BETA)) ** 0.5
    assert published.groupby(QUASI).size().min() >= K
    # the values are truthful: salary-class is published as it is, a multiset within the source's
    assert (published["salary-class"].value_counts() <= source["salary-class"].value_counts()).all()


def test_both_losses_are_stated_and_the_budget_holds_them(run):
    manifest = json.loads((run["dir"] / "dp-adult-release" / "manifest.json").read_text())
    steps = {s["step"]: s for s in manifest["steps"]}
    safepub, aggregates = steps["safepub"]["privacy_loss"], steps["aggregates"]["privacy_loss"]
    assert (safepub["measure"], safepub["epsilon"], safepub["delta"], safepub["beta"], safepub["k"]) == (
        "approximate", 1.0, 1e-06, BETA, K)
    assert (aggregates["measure"], aggregates["epsilon"]) == ("pure", 0.5)
    assert steps["aggregates"]["reproducible"] is False
    page = (run["dir"] / "dp-adult-release" / "report.html").read_text()
    dp = page.split('<p id="differential-privacy">')[1].split('<p class="note">')[0]
    assert "<code>safepub</code>" in dp and "<code>aggregates</code>" in dp
    assert "the run's seed" in dp and "OpenDP's cryptographically safe sampler" in dp


def test_every_cell_is_released_near_its_exact_count(run, source):
    folder = run["dir"] / "dp-adult-aggregates"
    accounting = json.loads((folder / "accounting.json").read_text())
    noisy = pd.read_csv(folder / "marginal_sex_x_race.csv")
    exact = source.groupby(["sex", "race"]).size()
    assert len(noisy) == 2 * 5  # every sex x race cell of ARX's hierarchies, whether or not it occurs
    scale = max(float(q["scale"]) for q in accounting["queries"])
    merged = noisy.set_index(["sex", "race"])["count"]
    # discrete Laplace of that scale: 30 scales off has probability about e^-30 per cell
    assert (abs(merged - exact.reindex(merged.index, fill_value=0)) <= 30 * scale).all()


def test_a_second_run_against_the_same_store_is_refused_before_it_reads(run, cli, tmp_path):
    db = tmp_path / "s.duckdb"
    shutil.copyfile(run["db"], db)
    db.chmod(0o600)  # the store's own mode: a copy others may read is warned about
    res = cli("run", WORKFLOWS / "dp-adult.yaml", "--db", db, "--out-dir", tmp_path / "o")
    assert res.exit_code == 2
    assert "over the budget ε=2, δ=1e-06 of source 'adult'" in res.output and "refused before any record is read" \
        in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    shown = cli("budget", "--db", db)
    assert "left    ε=0.5, δ=0" in shown.output
