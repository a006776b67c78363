"""``workflows/population-adult.yaml`` as shipped (about 5 s): sampling weights from the typing
drive sdcMicro's individual risk, and a 10% extract is released under k-map against the whole
file. Its figures are re-derived with pandas from the source file and the published CSV files:
the weighted individual risk (sdcMicro's approximation) before and after, and each published
class of the extract matching at least k records of the population, with the journalist's
highest risk 1 / the smallest of them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tests.support.helpers import DATA
from tests.support.shipped import shipped_run

QIS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return shipped_run("population-adult", tmp_path_factory)


def _risk(f: np.ndarray, F: np.ndarray) -> np.ndarray:
    """sdcMicro's individual risk per key (method approx), written from its formulas."""
    p = f / F
    r = np.empty_like(p)
    for i, (fi, pi) in enumerate(zip(f, p)):
        if pi >= 1 - 1e-12:
            r[i] = 1 / fi
        elif fi == 1:
            r[i] = pi / (1 - pi) * math.log(1 / pi)
        elif fi == 2:
            r[i] = pi / (1 - pi) - (pi / (1 - pi)) ** 2 * math.log(1 / pi)
        else:
            r[i] = pi / (fi - (1 - pi))
    return r


def _global_risk(frame: pd.DataFrame) -> tuple[float, float]:
    keys = frame.groupby(QIS, dropna=False).agg(f=("fnlwgt", "size"), F=("fnlwgt", "sum"))
    f, F = keys["f"].to_numpy(float), keys["F"].to_numpy(float)
    r = _risk(f, F)
    expected = float((f * r).sum())
    return expected / f.sum(), expected


def test_weighted_individual_risk_before_and_after(run):
    m = run["metrics"]
    source = pd.read_csv(DATA / "adult" / "adult_full.csv", dtype={"age": str})
    before, expected_before = _global_risk(source)
    assert m["risk.individual-risk.before"] == pytest.approx(before, rel=1e-9)
    assert m["risk.individual-risk.before.expected_reidentifications"] == pytest.approx(expected_before, rel=1e-9)
    published = pd.read_csv(run["dir"] / "population-adult.csv", dtype=str)
    # the weights are published unchanged, record for record
    assert sorted(published["fnlwgt"].astype(float)) == sorted(source["fnlwgt"].astype(float))
    published["fnlwgt"] = published["fnlwgt"].astype(float)
    after, expected_after = _global_risk(published)
    assert m["risk.individual-risk"] == pytest.approx(after, rel=1e-9)
    assert m["risk.individual-risk.expected_reidentifications"] == pytest.approx(expected_after, rel=1e-9)
    assert after < before


def test_the_extract_matches_k_population_records_per_class(run):
    m = run["metrics"]
    extract = pd.read_csv(run["dir"] / "population-adult-extract.csv", dtype=str)
    population = pd.read_csv(DATA / "adult" / "adult_full.csv", dtype=str)
    # generalize the population to the published labels: age through the interval labels
    # (width 5 .. 40 from 0, as the workflow's hierarchy), the others through ARX's files
    for q in QIS:
        labels = set(extract[q])
        if q == "age":  # interval labels "[lo-hi)" of width 5 .. 40 from 0, or "*"
            ages = population["age"].astype(int)
            levels = [ages.astype(str)] + [
                "[" + (ages // w * w).astype(str) + "-" + (ages // w * w + w).astype(str) + ")" for w in (5, 10, 20, 40)]
            levels.append(pd.Series("*", index=ages.index))
            population[q] = next(lab for lab in levels if set(lab) >= labels)
            continue
        if q == "workclass":
            h = {"Private": "Non-Government", "Self-emp-not-inc": "Non-Government", "Self-emp-inc": "Non-Government",
                 "Federal-gov": "Government", "Local-gov": "Government", "State-gov": "Government",
                 "Without-pay": "Unemployed"}
            if not labels <= set(population[q]):
                population[q] = population[q].map(h) if labels <= set(h.values()) else "*"
            continue
        h = pd.read_csv(DATA / "arx" / f"adult_hierarchy_{q}.csv", sep=";", header=None, dtype=str)
        level = next(j for j in range(h.shape[1]) if labels <= set(h[j]))
        population[q] = population[q].map(dict(zip(h[0], h[level])))
    classes = extract.groupby(QIS).size()
    pop = population.groupby(QIS).size().reindex(classes.index)
    assert pop.notna().all()
    assert (pop >= 20).all() and int(pop.min()) == m["kmap-check.k-map"]
    assert m["kmap-check.k-map.holds"] == 1.0
    assert m["kmap-check.reidentification-risk.journalist.highest"] == pytest.approx(1 / int(pop.min()))
    assert m["kmap-check.delta-presence"] == pytest.approx(float((classes / pop).max()))
