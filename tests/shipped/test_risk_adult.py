"""``workflows/risk-adult.yaml`` run as shipped (about 6 s), and its figures re-derived
independently with pandas from the source file and from the published CSV files alone: the
prosecutor risks from the class sizes, sample uniques, records at risk, sdcMicro's
individual risk under simple random sampling, risk after <= risk before, and the lattice's
t-closeness and entropy-l-diversity outputs re-checked by their definitions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tests.support.helpers import DATA, WORKFLOWS
from tests.support.shipped import shipped_run

QIS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]
SA = "salary-class"
N_POP = 317_238_626
THRESHOLD = 0.2


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return shipped_run("risk-adult", tmp_path_factory)


def _csv(path: Path, **kw) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False, **kw)


def _sizes(df: pd.DataFrame) -> np.ndarray:
    return df.groupby(QIS, sort=False).size().to_numpy()


@pytest.fixture(scope="module")
def original() -> pd.DataFrame:
    return _csv(DATA / "arx" / "adult.csv", sep=";")


def test_plan_passes():
    from anonflow.cli import main

    res = CliRunner().invoke(main, ["plan", str(WORKFLOWS / "risk-adult.yaml")], catch_exceptions=False)
    assert res.exit_code == 0, res.output


def test_outputs_published(run):
    names = {Path(o["path"]).relative_to(run["dir"]).as_posix() for o in run["outputs"]}
    assert {"risk-adult-k5.csv", "risk-adult-tcloseness.csv", "risk-adult-entropy-l.csv",
            "risk-adult-release/manifest.json", "risk-adult-release/published.csv"} <= names
    k5 = _csv(run["dir"] / "risk-adult-k5.csv")
    release = _csv(run["dir"] / "risk-adult-release" / "published.csv")
    assert len(k5) == len(release) == 30162
    assert sorted(map(tuple, k5[QIS + [SA]].to_numpy())) == sorted(map(tuple, release[QIS + [SA]].to_numpy()))


@pytest.mark.parametrize("which", ["after", "before"])
def test_reidentification_and_uniqueness_match_class_sizes(run, original, which):
    m = run["metrics"]
    pre = "risk.reidentification-risk" + (".before" if which == "before" else "")
    su = "risk.sample-uniqueness" + (".before" if which == "before" else "")
    df = original if which == "before" else _csv(run["dir"] / "risk-adult-k5.csv")
    f = _sizes(df)
    n = f.sum()
    assert m[f"{pre}.records"] == n == 30162
    assert m[f"{pre}.classes"] == len(f)
    assert m[pre] == pytest.approx(1 / f.min(), rel=1e-12)  # headline = prosecutor highest
    assert m[f"{pre}.prosecutor.highest"] == pytest.approx(1 / f.min(), rel=1e-12)
    assert m[f"{pre}.prosecutor.lowest"] == pytest.approx(1 / f.max(), rel=1e-12)
    assert m[f"{pre}.prosecutor.average"] == pytest.approx(len(f) / n, rel=1e-12)
    at_risk = f[1 / f > THRESHOLD].sum() / n  # strictly greater: a class of 5 is not at risk
    assert m[f"{pre}.prosecutor.records_at_risk"] == pytest.approx(at_risk, abs=1e-12)
    # no population table: journalist = prosecutor, marketer = success rate
    assert m[f"{pre}.journalist.highest"] == m[f"{pre}.prosecutor.highest"]
    assert m[f"{pre}.marketer"] == pytest.approx(len(f) / n, rel=1e-12)
    assert m[su] == pytest.approx((f == 1).sum() / n, abs=1e-12)
    assert m[f"{su}.uniques"] == (f == 1).sum()
    # the k-anonymity check of the anonymized table agrees with the smallest class
    if which == "after":
        assert m["risk.k-anonymity"] == f.min() >= 5
        assert m["risk.k-anonymity.holds"] == 1


def _individual_risk_srs(f: np.ndarray, n: int, big_n: int) -> np.ndarray:
    """sdcMicro's approximate individual risk per class, every record weighing N/n."""
    p = n / big_n  # f_k / F_k with F_k = f_k N / n
    r = np.where(f == 1, p / (1 - p) * np.log(1 / p),
                 np.where(f == 2, p / (1 - p) - (p / (1 - p)) ** 2 * np.log(1 / p), p / (f - 1 + p)))
    return r


@pytest.mark.parametrize("which", ["after", "before"])
def test_individual_risk_matches_sdcmicro_formula(run, original, which):
    m = run["metrics"]
    pre = "risk.individual-risk" + (".before" if which == "before" else "")
    df = original if which == "before" else _csv(run["dir"] / "risk-adult-k5.csv")
    f = _sizes(df)
    n = int(f.sum())
    r = _individual_risk_srs(f, n, N_POP)
    assert m[f"{pre}.keys"] == len(f)
    assert m[f"{pre}.sample_uniques"] == (f == 1).sum()
    assert m[f"{pre}.expected_reidentifications"] == pytest.approx((r * f).sum(), rel=1e-9)
    assert m[pre] == pytest.approx((r * f).sum() / n, rel=1e-9)
    assert m[f"{pre}.max"] == pytest.approx(r.max(), rel=1e-9)


def test_risk_after_is_at_most_before(run):
    m = run["metrics"]
    for name in ("reidentification-risk", "reidentification-risk.prosecutor.average",
                 "reidentification-risk.prosecutor.records_at_risk", "reidentification-risk.marketer",
                 "sample-uniqueness", "population-uniqueness", "population-uniqueness.uniques",
                 "individual-risk", "individual-risk.max", "individual-risk.expected_reidentifications",
                 "suda2", "suda2.dis_max", "suda2.score_mean", "suda2.msus", "suda2.records_with_msu"):
        after, before = m[f"risk.{name}"], m[f"risk.{name.split('.')[0]}.before" +
                                              (name[len(name.split('.')[0]):])]
        assert after <= before, (name, after, before)
    # the original is far from safe; the k = 5 output has no sample unique and nothing at risk
    assert m["risk.reidentification-risk.before"] == 1.0
    assert m["risk.reidentification-risk.before.prosecutor.records_at_risk"] > 0.5
    assert m["risk.reidentification-risk.prosecutor.records_at_risk"] == 0
    assert m["risk.sample-uniqueness"] == 0 and m["risk.population-uniqueness"] == 0
    assert m["risk.population-uniqueness.before"] > 0
    assert m["risk.population-uniqueness.before.population_size"] == N_POP
    assert m["risk.suda2.msus"] == 0 and m["risk.suda2.before.msus"] > 0


def _distributions(path: Path) -> tuple[pd.DataFrame, pd.Series]:
    df = _csv(path)
    df = df[df[SA] != "?"]
    counts = df.groupby(QIS, sort=False)[SA].value_counts().unstack(fill_value=0)
    q = df[SA].value_counts(normalize=True)
    return counts, q


def test_t_closeness_output_is_t_close(run):
    m = run["metrics"]
    counts, q = _distributions(run["dir"] / "risk-adult-tcloseness.csv")
    p = counts.div(counts.sum(axis=1), axis=0)
    emd = 0.5 * (p - q.reindex(p.columns)).abs().sum(axis=1)  # equal ground distance
    assert m["tclose-check.t-closeness.t"] == 0.2
    assert m["tclose-check.t-closeness.holds"] == 1
    assert emd.max() <= 0.2 + 1e-12
    assert m["tclose-check.t-closeness"] == pytest.approx(emd.max(), abs=1e-12)
    assert m["tclose-check.t-closeness.classes"] == len(counts) > 1  # a solution below the top


def test_entropy_l_output_is_entropy_l_diverse(run):
    m = run["metrics"]
    counts, _ = _distributions(run["dir"] / "risk-adult-entropy-l.csv")
    p = counts.div(counts.sum(axis=1), axis=0).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
    assert m["entropy-check.entropy-l-diversity.l"] == 1.2
    assert m["entropy-check.entropy-l-diversity.holds"] == 1
    assert h.min() >= math.log(1.2) - 1e-12
    assert m["entropy-check.entropy-l-diversity"] == pytest.approx(math.exp(h.min()), rel=1e-12)
    assert m["entropy-check.entropy-l-diversity.classes"] == len(counts) > 1
