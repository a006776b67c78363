"""Missing sensitive values are no values (docs/algorithms.md, "Missing values").

Under ``missing: category`` a missing sensitive value becomes the category ``?``; it never
counts as a distinct value, as diversity, or as a value with a frequency: distinct and
p-sensitive counts take real values only, entropy is over real values, and (alpha,k) /
(alpha_i,k) measure a real value's frequency over the class's records with a real value.
Every check says how many records had a missing value, in ``compute`` and ``partition_holds``
alike, and the algorithms that build classes for these models still pass their own checks.
"""

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from anonflow.api import Partition
from anonflow.grading import Grading
from anonflow.schema import MISSING_CATEGORY, Attribute, Typing
from anonflow.table import TypedTable
from anonflow.testing import make_context
from anonflow_std.common.columns import missing_marker, missing_sensitive, real_counts, real_distinct
from anonflow_std.privacy.alphak import AlphaIKAnonymity, AlphaKAnonymity
from anonflow_std.privacy.distinct_diversity import LDiversity, PSensitiveKAnonymity
from anonflow_std.risk.sensitivity import SensitivityDistance
from anonflow_std.utility.class_metrics import AvgEnt

from tests.support.helpers import write

GRADING = {"levels": [{"alpha": 0.5, "values": ["flu"]}, {"alpha": 0.6, "values": ["cold", "none"]}]}


def table(classes, values, missing="category", grading=None):
    """A published table: ``_class`` per record and the sensitive value ``s``."""
    n = len(values)
    typing = Typing((Attribute("q", "quasi", "nominal"),
                     Attribute("s", "sensitive", "nominal",
                               options={"grading": Grading.from_json(grading).to_json()} if grading else {})),
                    missing)
    data = pa.table({"_row": pa.array(range(n), pa.int64()), "q": pa.array([f"c{c}" for c in classes]),
                     "s": pa.array(values, pa.string()), "_class": pa.array(classes, pa.int64())})
    return TypedTable(data, typing)


def compute(metric, t, **params):
    from anonflow.params import validate_params

    return metric.compute(None, t, validate_params(metric.params, params), make_context())


def partition(t):
    classes = np.asarray(t.data.column("_class").to_pylist())
    return Partition(classes, np.bincount(classes), t)


# class 0: flu, cold, ?   class 1: flu, flu, cold, ?, ?   class 2: ?, ?
CLASSES = [0, 0, 0, 1, 1, 1, 1, 1, 2, 2]
VALUES = ["flu", "cold", "?", "flu", "flu", "cold", "?", "?", "?", "?"]


def test_the_marker_comes_from_the_typing_not_from_the_data():
    assert missing_marker(table(CLASSES, VALUES)) == MISSING_CATEGORY == "?"
    assert missing_sensitive(table(CLASSES, VALUES), "s").tolist() == [v == "?" for v in VALUES]
    # typed with missing: error or drop, a '?' is a real value (the typing step let it through
    # only because the workflow declared it under not_missing)
    real = table(CLASSES, VALUES, missing="drop")
    assert missing_marker(real) is None and not missing_sensitive(real, "s").any()
    assert real_distinct(partition(real), "s").tolist() == [3, 3, 1]


def test_partition_helpers_count_real_values_only():
    p = partition(table(CLASSES, VALUES))
    assert real_distinct(p, "s").tolist() == [2, 2, 0]
    counts, real, values = real_counts(p, "s")
    assert values == ["cold", "flu"]
    assert counts.tolist() == [[1, 1], [1, 2], [0, 0]] and real.tolist() == [2, 3, 0]


def test_distinct_l_diversity_counts_no_missing_value():
    # the bug: "l = 3 holds" over classes with two real values and a '?'
    t = table(CLASSES[:8], VALUES[:8])
    out = compute(LDiversity(), t, l=3)
    assert out["l-diversity"] == 2 and out["l-diversity.holds"] == 0.0
    assert out["l-diversity.missing_sensitive"] == 3
    assert compute(LDiversity(), t, l=2)["l-diversity.holds"] == 1.0
    assert LDiversity().partition_holds(partition(t), {"l": 3}).tolist() == [False, False]
    assert LDiversity().partition_holds(partition(t), {"l": 2}).tolist() == [True, True]
    # a class holding only missing values has no distinct value at all: not even l = 1 holds
    full = table(CLASSES, VALUES)
    out = compute(LDiversity(), full, l=1)
    assert out["l-diversity"] == 0 and out["l-diversity.holds"] == 0.0
    assert LDiversity().partition_holds(partition(full), {"l": 1}).tolist() == [True, True, False]


def test_p_sensitive_counts_real_values_and_all_records():
    t = table(CLASSES[:8], VALUES[:8])
    out = compute(PSensitiveKAnonymity(), t, k=3, p=3)
    assert out["p-sensitive-k-anonymity"] == 2 and out["p-sensitive-k-anonymity.holds"] == 0.0
    assert out["p-sensitive-k-anonymity.missing_sensitive"] == 3
    # k counts every record: class 0 has 3 records (one of them missing), so k = 3 holds there
    out = compute(PSensitiveKAnonymity(), t, k=3, p=2)
    assert out["p-sensitive-k-anonymity.holds"] == 1.0 and out["p-sensitive-k-anonymity.smallest_class"] == 3
    assert PSensitiveKAnonymity().partition_holds(partition(t), {"k": 3, "p": 2}).tolist() == [True, True]
    assert PSensitiveKAnonymity().partition_holds(partition(t), {"k": 4, "p": 2}).tolist() == [False, True]


def test_entropy_is_over_real_values():
    out = compute(AvgEnt(), table(CLASSES, VALUES), by="class")
    # class 0: {flu 1, cold 1} -> 1 bit; class 1: {flu 2, cold 1} -> H(2/3, 1/3); class 2: none -> 0
    h1 = -(2 / 3) * math.log2(2 / 3) - (1 / 3) * math.log2(1 / 3)
    assert out["avg-ent"] == pytest.approx((1.0 + h1 + 0.0) / 3)
    assert out["avg-ent.max"] == 1.0 and out["avg-ent.min"] == 0.0
    assert out["avg-ent.missing_sensitive"] == 5


def test_alpha_k_frequency_is_over_records_with_a_real_value():
    t = table(CLASSES[:8], VALUES[:8])
    # class 0: flu 1/2 (not 1/3); class 1: flu 2/3 (not 2/5)
    out = compute(AlphaKAnonymity(), t, alpha=0.5, k=2)
    assert out["alpha-k-anonymity"] == pytest.approx(2 / 3)
    assert out["alpha-k-anonymity.worst_class"] == 1 and out["alpha-k-anonymity.violating_classes"] == 1
    assert out["alpha-k-anonymity.holds"] == 0.0 and out["alpha-k-anonymity.missing_sensitive"] == 3
    assert AlphaKAnonymity().partition_holds(partition(t), {"alpha": 0.5, "k": 2}).tolist() == [True, False]
    out = compute(AlphaKAnonymity(), t, alpha=0.7, k=3)
    assert out["alpha-k-anonymity.holds"] == 1.0
    assert AlphaKAnonymity().partition_holds(partition(t), {"alpha": 0.7, "k": 3}).tolist() == [True, True]
    # 0.4 held when '?' counted as a value (1/3 and 2/5); it must not now
    assert compute(AlphaKAnonymity(), t, alpha=0.4, k=2)["alpha-k-anonymity.holds"] == 0.0
    # a class without a real value violates the model, whatever alpha
    full = table(CLASSES, VALUES)
    out = compute(AlphaKAnonymity(), full, alpha=1.0, k=2)
    assert out["alpha-k-anonymity.holds"] == 0.0 and out["alpha-k-anonymity.classes_without_value"] == 1
    assert out["alpha-k-anonymity.violating_classes"] == 1
    assert AlphaKAnonymity().partition_holds(partition(full), {"alpha": 1.0, "k": 2}).tolist() == [True, True, False]


def test_alpha_i_k_never_grades_the_missing_value():
    t = table(CLASSES[:8], VALUES[:8], grading=GRADING)
    # '?' is in no level of the grading: it must not be an "unassigned value" error
    out = compute(AlphaIKAnonymity(), t, k=2)
    # class 1: flu 2/3 over alpha_1 = 0.5 -> relative 4/3; class 0: flu 1/2 -> 1
    assert out["alpha-i-k-anonymity"] == pytest.approx(4 / 3)
    assert out["alpha-i-k-anonymity.worst_ratio"] == pytest.approx(2 / 3)
    assert out["alpha-i-k-anonymity.violating_classes"] == 1
    assert out["alpha-i-k-anonymity.missing_sensitive"] == 3
    assert AlphaIKAnonymity().partition_holds(partition(t), {"k": 2}).tolist() == [True, False]
    # per level: class 0 level 2 (cold) 1/2 <= 0.6; class 1 level 1 2/3 > 0.5
    out = compute(AlphaIKAnonymity(), t, k=2, per="level")
    assert out["alpha-i-k-anonymity.violating_classes"] == 1
    assert AlphaIKAnonymity().partition_holds(partition(t), {"k": 2, "per": "level"}).tolist() == [True, False]
    ds = compute(SensitivityDistance(), t, levels=2)  # '?' has no level: left out, no error
    assert ds["sensitivity-distance.classes"] == 2


def test_without_missing_values_nothing_changes():
    t = table([0, 0, 0, 1, 1, 1], ["flu", "cold", "none", "flu", "flu", "cold"], missing="drop")
    out = compute(AlphaKAnonymity(), t, alpha=0.5, k=3)
    assert out["alpha-k-anonymity"] == pytest.approx(2 / 3) and "alpha-k-anonymity.missing_sensitive" not in out
    assert compute(LDiversity(), t, l=3)["l-diversity"] == 2
    assert "l-diversity.missing_sensitive" not in compute(LDiversity(), t, l=3)


# -- through the command line ----------------------------------------------------------


def _csv(path, rows):
    path.write_text("zip,age,sex,disease\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))


def test_cli_l_diversity_no_longer_holds_over_two_real_values_and_a_missing_one(cli, tmp_path):
    # every zip has two real diseases and one empty (missing) cell: "l = 3 holds" was the bug
    _csv(tmp_path / "d.csv", [(z, 30, "F", v) for z in ("A", "B") for v in ("flu", "cold", "")])
    wf = write(tmp_path / "wf.yaml", """
        name: missing-l
        seed: 1
        sources:
          d: {path: d.csv}
        steps:
          typed:
            uses: typing
            input: d
            with: {quasi: [zip], sensitive: [disease], missing: category}
          scores:
            uses: evaluate
            input: typed
            with: {metrics: [{l-diversity: {l: 3}}, {alpha-k-anonymity: {alpha: 0.4, k: 3}}]}
        """)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "o")
    assert res.exit_code == 1, res.output
    assert "privacy check 'l-diversity' does not hold (l-diversity = 2," in res.output
    assert "l-diversity.missing_sensitive = 2" in res.output
    assert "privacy check 'alpha-k-anonymity' does not hold (alpha-k-anonymity = 0.5," in res.output
    assert "alpha-k-anonymity.missing_sensitive = 2" in res.output
    assert "Traceback" not in res.output


def _records(n=90, missing_every=7):
    rng = np.random.default_rng(5)
    diseases = ["flu", "cold", "asthma", "ulcer", "gastritis"]
    rows = []
    for i in range(n):
        d = "" if i % missing_every == 3 else diseases[int(rng.integers(len(diseases)))]
        rows.append((f"Z{i % 6}", 20 + int(rng.integers(50)), "FM"[i % 2], d))
    return rows


ALGORITHMS = {
    "l-clustering": ("{l: 3}", "[l-diversity]"),
    "maasae": ("{k: 4, p: 3}", "[p-sensitive-k-anonymity, k-anonymity]"),
    "alpha-k-gca": ("{k: 3, alpha: 0.5, choice: nearest}", "[alpha-k-anonymity, k-anonymity]"),
}


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_cli_algorithms_build_classes_that_pass_their_own_checks(cli, tmp_path, algorithm):
    params, metrics = ALGORITHMS[algorithm]
    _csv(tmp_path / "d.csv", _records())
    wf = write(tmp_path / "wf.yaml", f"""
        name: missing-{algorithm}
        seed: 2
        sources:
          d: {{path: d.csv}}
        steps:
          typed:
            uses: typing
            input: d
            with: {{quasi: {{age: continuous, sex: nominal}}, sensitive: [disease], missing: category}}
          anon:
            uses: {algorithm}
            input: typed
            with: {params}
          scores:
            uses: evaluate
            input: anon
            with: {{metrics: {metrics}}}
        """)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "o", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    m = out["metrics"]
    assert all(v == 1.0 for k, v in m.items() if k.endswith(".holds")), m
    missing = sum(1 for r in _records() if r[3] == "")
    key = next(k for k in m if k.endswith(".missing_sensitive"))
    assert m[key] == missing  # every record published, its missing value reported
    notes = next(s for s in out["steps"] if s["step"] == "anon")["notes"]
    assert any(f"{missing} record(s) with a missing disease value joined" in n for n in notes), notes


def test_cli_lattice_generalizes_further_when_missing_values_do_not_count(cli, tmp_path):
    # ages 20..29 twice: per age one real value and one missing -> l = 2 needs wider intervals
    rows = [("Z", a, "F", v) for a in range(20, 30) for v in (("flu" if a % 2 else "cold"), "")]
    _csv(tmp_path / "d.csv", rows)
    wf = write(tmp_path / "wf.yaml", """
        name: missing-lattice
        seed: 3
        sources:
          d: {path: d.csv}
        steps:
          typed:
            uses: typing
            input: d
            with: {quasi: {age: continuous}, sensitive: [disease], missing: category}
          hier:
            uses: hierarchy
            input: typed
            with: {age: {interval: {widths: [2, 10], anchor: 0}}}
          anon:
            uses: lattice
            input: hier
            with: {model: l-diversity, model_params: {l: 2}}
          scores:
            uses: evaluate
            input: anon
            with: {metrics: [{l-diversity: {l: 2}}]}
        """)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "o", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["metrics"]["scores.l-diversity.holds"] == 1.0
    assert out["metrics"]["scores.l-diversity.missing_sensitive"] == 10
    notes = next(s for s in out["steps"] if s["step"] == "anon")["notes"]
    # level 0 (each age: one real value + '?') would pass if '?' counted; level 1 ([20-22), ...)
    # holds two real values
    assert any("chosen node [age=1]" in n for n in notes), notes


def test_cli_alpha_i_k_gca_grades_no_missing_value(cli, tmp_path):
    _csv(tmp_path / "d.csv", _records())
    (tmp_path / "g.yaml").write_text("levels:\n  - {alpha: 0.5, values: [flu, asthma]}\n"
                                     "  - {alpha: 0.6, values: [cold, ulcer, gastritis]}\n")
    wf = write(tmp_path / "wf.yaml", """
        name: missing-aik
        seed: 2
        sources:
          d: {path: d.csv}
        steps:
          typed:
            uses: typing
            input: d
            with: {quasi: {age: continuous, sex: nominal}, sensitive: {disease: {grading: g.yaml}},
                   missing: category}
          anon:
            uses: alpha-i-k-gca
            input: typed
            with: {k: 3}
          scores:
            uses: evaluate
            input: anon
            with: {metrics: [alpha-i-k-anonymity, sensitivity-distance]}
        """)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "o", "--json")
    assert res.exit_code == 0, res.output  # '?' is neither an ungraded value nor a bucket of its own
    m = json.loads(res.output)["metrics"]
    missing = sum(1 for r in _records() if r[3] == "")
    assert m["scores.alpha-i-k-anonymity.holds"] == 1.0 and m["scores.alpha-i-k-anonymity.smallest_class"] >= 3
    assert m["scores.alpha-i-k-anonymity.missing_sensitive"] == missing
    assert m["scores.alpha-i-k-anonymity.classes_without_value"] == 0


def test_join_nearest_places_each_record_as_the_record_by_record_rule_does():
    """One distance row per distinct QI tuple gives exactly the per-record answer (nearest
    classed record, ties to the lowest position), duplicates and ties included."""
    from anonflow_std.common.distance import record_distances
    from anonflow_std.common.encode import encode
    from anonflow.testing import typed_table

    from anonflow_std.common.columns import join_nearest

    rng = np.random.default_rng(5)
    n = 400
    t = typed_table({"x": rng.integers(0, 6, n).astype(float).tolist(), "c": rng.choice(list("abc"), n).tolist()},
                    quasi={"x": "continuous", "c": "nominal"})
    enc = encode(t, ["x", "c"])
    labels = rng.integers(0, 20, n)
    pending = np.sort(rng.choice(n, 120, replace=False))
    labels[pending] = -1
    expected = labels.copy()
    classed = np.flatnonzero(labels >= 0)
    for i in pending:
        expected[i] = labels[classed][int(np.argmin(record_distances(enc, int(i), rows=classed)))]
    assert join_nearest(enc, labels, pending) == 120
    assert np.array_equal(labels, expected)
