"""Suppressed cells as wildcards in every privacy check and risk measure (docs/algorithms.md,
"Suppressed cells as wildcards"): hand-computed values with nulls, refusals where a wildcard
has no meaning, unchanged values without nulls, and local-suppression's claim checked by the
engine through a real workflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anonflow.api import InputError
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.common import wildcard as W
from anonflow_std.privacy.alphak import AlphaKAnonymity
from anonflow_std.privacy.distinct_diversity import LDiversity, PSensitiveKAnonymity
from anonflow_std.privacy.entropy_l_diversity import EntropyLDiversity
from anonflow_std.privacy.kanonymity import KAnonymity
from anonflow_std.privacy.population_models import DeltaPresence, KMap
from anonflow_std.privacy.recursive_cl_diversity import RecursiveCLDiversity
from anonflow_std.privacy.reidentification_risk import AverageRisk, HighestRisk
from anonflow_std.privacy.t_closeness import TCloseness
from anonflow_std.risk.individual import IndividualRisk
from anonflow_std.risk.reidentification import PopulationUniquenessMetric, ReidentificationRisk, SampleUniqueness
from anonflow_std.risk.suda import Suda2

ROOT = Path(__file__).resolve().parents[3]

# sex, age, zip; None is a suppressed cell (the example of docs/algorithms.md)
# compatible counts: r0 5, r1 5, r2 5, r3 3, r4 6, r5 6; distinct keys: 5
HAND = {
    "sex": ["M", "M", "M", "F", None, None],
    "age": [30, 30, None, 30, 30, None],
    "zip": ["A", "A", "A", "B", None, None],
    "disease": ["flu", "cold", "flu", "flu", "cold", "flu"],
}
QUASI = {"sex": "nominal", "age": "nominal", "zip": "nominal"}
COUNTS = [5, 5, 5, 3, 6, 6]


def hand():
    return typed_table(HAND, quasi=QUASI, sensitive={"disease": "nominal"})


def plain():
    # no null: classes (M,30,A) x3, (F,30,B) x2, (F,40,B) x1
    return typed_table({"sex": ["M", "M", "M", "F", "F", "F"], "age": [30, 30, 30, 30, 30, 40],
                        "zip": ["A", "A", "A", "B", "B", "B"],
                        "disease": ["flu", "cold", "flu", "flu", "cold", "flu"]}, quasi=QUASI, sensitive={"disease": "nominal"})


def compute(metric, table, **params):
    return metric.compute(None, table, validate_params(metric.params, params), make_context())


def test_the_hand_example_counts():
    assert W.compatible_counts_reference(list(zip(HAND["sex"], HAND["age"], HAND["zip"]))).tolist() == COUNTS
    keys = W.key_counts(make_context(), hand(), list(QUASI))
    assert sorted(keys.column(W.COUNT).to_pylist()) == [3, 5, 5, 6, 6] and sum(keys.column("_af_n").to_pylist()) == 6
    assert W.null_records(make_context(), hand(), list(QUASI)) == 3


def test_k_anonymity_counts_nulls_as_wildcards():
    out = compute(KAnonymity(), hand(), k=3)
    assert out == {"k-anonymity": 3.0, "k-anonymity.classes": 5.0, "k-anonymity.null_records": 3.0,
                   "k-anonymity.k": 3.0, "k-anonymity.violating_classes": 0.0, "k-anonymity.holds": 1.0}
    out = compute(KAnonymity(), hand(), k=4)
    assert out["k-anonymity.holds"] == 0.0 and out["k-anonymity.violating_classes"] == 1.0  # (F,30,B): 3


def test_k_anonymity_without_nulls_is_unchanged():
    assert compute(KAnonymity(), plain(), k=2) == {
        "k-anonymity": 1.0, "k-anonymity.classes": 3.0, "k-anonymity.k": 2.0,
        "k-anonymity.violating_classes": 1.0, "k-anonymity.holds": 0.0}


def test_prosecutor_risks_use_compatible_counts():
    # risks 1/5, 1/5, 1/5, 1/3, 1/6, 1/6: mean (3/5 + 1/3 + 2/6) / 6
    mean = (3 / 5 + 1 / 3 + 2 / 6) / 6
    out = compute(AverageRisk(), hand(), max=0.25)
    assert out["average-risk"] == pytest.approx(mean) and out["average-risk.holds"] == 1.0
    assert out["average-risk.classes"] == 5.0 and out["average-risk.records"] == 6.0
    assert compute(AverageRisk(), hand(), max=0.2)["average-risk.holds"] == 0.0
    out = compute(HighestRisk(), hand(), max=0.25)  # 1/3 > 0.25: the key (F,30,B) violates
    assert out["highest-risk"] == pytest.approx(1 / 3) and out["highest-risk.smallest_class"] == 3.0
    assert out["highest-risk.violating_classes"] == 1.0 and out["highest-risk.records_at_risk"] == 1.0
    assert out["highest-risk.holds"] == 0.0
    out = compute(ReidentificationRisk(), hand(), threshold=0.2)
    assert out["reidentification-risk.prosecutor.highest"] == pytest.approx(1 / 3)
    assert out["reidentification-risk.prosecutor.lowest"] == pytest.approx(1 / 6)
    assert out["reidentification-risk.prosecutor.average"] == pytest.approx(mean)
    assert out["reidentification-risk.marketer"] == pytest.approx(mean)
    assert out["reidentification-risk.prosecutor.records_at_risk"] == pytest.approx(1 / 6)  # only 1/3 > 0.2
    assert out["reidentification-risk.classes"] == 5.0 and out["reidentification-risk.records"] == 6.0


def test_sample_uniques_are_records_compatible_with_no_other():
    assert compute(SampleUniqueness(), hand())["sample-uniqueness"] == 0.0
    # (a,x) unique; (b,*) is compatible with (b,y); (b,y) with (b,*); (c,z) unique
    t = typed_table({"p": ["a", "b", "b", "c"], "q": ["x", None, "y", "z"]}, quasi={"p": "nominal", "q": "nominal"})
    out = compute(SampleUniqueness(), t)
    assert out["sample-uniqueness"] == 0.5 and out["sample-uniqueness.uniques"] == 2.0


def test_individual_risk_with_wildcards_and_weights():
    # without weights the risk is 1 / f: expected = 3/5 + 1/3 + 2/6
    out = compute(IndividualRisk(), hand())
    assert out["individual-risk.expected_reidentifications"] == pytest.approx(3 / 5 + 1 / 3 + 2 / 6)
    assert out["individual-risk.keys"] == 5.0 and out["individual-risk.records"] == 6.0
    # with weights 10 each: F_k = 10 f_k, p = 0.1; f >= 3 (approx) r = p / (f - 1 + p)
    t = typed_table({**HAND, "w": [10.0] * 6}, quasi=QUASI, sensitive={"disease": "nominal"})
    out = compute(IndividualRisk(), t, weight="w")
    r = {f: 0.1 / (f - 1 + 0.1) for f in (3, 5, 6)}
    assert out["individual-risk.expected_reidentifications"] == pytest.approx(3 * r[5] + r[3] + 2 * r[6])
    # compatible weight sums: record (F,30,B) counts itself, (*,30,*) and (*,*,*): 1 + 2 + 3
    t = typed_table({**HAND, "w": [1.0, 1.0, 1.0, 1.0, 2.0, 3.0]}, quasi=QUASI, sensitive={"disease": "nominal"})
    keys = W.key_counts(make_context(), t, list(QUASI), weight="w")
    by_count = dict(zip(keys.column(W.COUNT).to_pylist(), keys.column(W.WEIGHT).to_pylist()))
    assert by_count[3] == 6.0 and by_count[5] == 1 + 1 + 1 + 2 + 3


@pytest.mark.parametrize("metric,params", [
    (LDiversity(), {"l": 2}),
    (PSensitiveKAnonymity(), {"k": 2, "p": 2}),
    (EntropyLDiversity(), {"l": 1.5}),
    (RecursiveCLDiversity(), {"c": 2.0, "l": 2}),
    (TCloseness(), {"t": 0.5}),
    (PopulationUniquenessMetric(), {"population_size": 100}),
    (Suda2(), {}),
    (DeltaPresence(), {"delta_max": 0.5, "population": "p"}),
    (KMap(), {"k": 2, "estimator": "poisson", "sampling_fraction": 0.1}),
    (ReidentificationRisk(), {"population": "p"}),
])
def test_class_based_metrics_refuse_nulls_in_one_line(metric, params):
    with pytest.raises(InputError) as exc:
        compute(metric, hand(), **params)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{metric.name}: 3 published record(s)") and "suppressed" in msg


def test_alpha_k_refuses_nulls():
    m = AlphaKAnonymity()
    with pytest.raises(InputError, match=r"^alpha-k-anonymity: 3 published record\(s\)"):
        m.compute(None, hand(), validate_params(m.params, {"alpha": 0.5, "k": 2}), make_context())


def test_class_based_metrics_without_nulls_still_compute():
    assert compute(LDiversity(), plain(), l=2)["l-diversity"] == 1.0
    assert compute(SampleUniqueness(), plain())["sample-uniqueness"] == pytest.approx(1 / 6)
    assert compute(AverageRisk(), plain())["average-risk"] == pytest.approx(3 / 6)
    assert compute(HighestRisk(), plain())["highest-risk"] == 1.0
    assert compute(IndividualRisk(), plain())["individual-risk.expected_reidentifications"] == pytest.approx(3.0)


WORKFLOW = """
name: wildcards-adult
sources:
  adult: {{path: {data}, delimiter: ";"}}
steps:
  typed:
    uses: typing
    input: adult
    with:
      quasi: {{sex: nominal, age: continuous, race: nominal, marital-status: nominal, education: nominal,
              native-country: nominal, workclass: nominal, occupation: nominal}}
      sensitive: [salary-class]
  anon:
    uses: local-suppression
    input: typed
    with: {{k: 5}}
  scores:
    uses: evaluate
    input: [anon]
    with:
      metrics: [{{k-anonymity: {{k: 5}}}}, average-risk, highest-risk, reidentification-risk, sample-uniqueness,
                individual-risk]
      thresholds: {{k-anonymity: {{min: 5}}}}
      enforce: true
"""


def test_local_suppression_claim_passes_the_engines_check_on_adult(cli, tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.format(data=ROOT / "workflows" / "data" / "arx" / "adult.csv"))
    res = cli("run", wf, "--db", tmp_path / "store.duckdb", "--out-dir", tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output[-3000:]
    result = json.loads(res.stdout)
    assert result["status"] == "succeeded"
    anon = next(s for s in result["steps"] if s["step"] == "anon")
    assert not any("dropped" in n for n in anon["notes"])  # the claim was checked and kept
    metrics = {k.split(".", 1)[1]: v for k, v in result["metrics"].items() if k.startswith("scores.")}
    assert metrics["k-anonymity"] >= 5 and metrics["k-anonymity.holds"] == 1.0
    assert metrics["k-anonymity.null_records"] > 0  # the suppressed cells were counted as wildcards
    assert metrics["highest-risk"] <= 0.2 + 1e-12
    assert metrics["sample-uniqueness"] == 0.0
