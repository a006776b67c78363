"""The privacy checks at their boundaries, computed by hand, in SQL and in ``partition_holds``.

Each example is built so that one plausible bug changes its verdict: a class of exactly k (or
l, or alpha r) records, a class failing only one of two conditions, a missing value that must
not count, a class absent from one table of a lossy-join pair. Every expected number is worked
out in the comment beside it. The last tests check, on real data, that the SQL check and
``partition_holds`` agree class by class with a count made here in plain numpy.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from anonflow.api import Partition
from anonflow.errors import InputError
from anonflow.params import validate_params
from anonflow.schema import Attribute, Typing
from anonflow.table import TypedTable
from anonflow.testing import make_context, typed_table
from anonflow_std.publishing.lossy_join import k_figures, split_tables
from anonflow_std.privacy.alphak import AlphaIKAnonymity, AlphaKAnonymity, alpha_report
from anonflow_std.common.counts import pair_consistency_sql, pair_counts_sql, table_counts_sql
from anonflow_std.privacy.distinct_diversity import LDiversity, PSensitiveKAnonymity
from anonflow_std.privacy.kanonymity import KAnonymity

from tests.plugins.privacy.test_missing_values import GRADING, compute, partition, table


def run(metric, t, **params):
    return metric.compute(None, t, validate_params(metric.params, params), make_context())


def holds(metric, t, **params):
    """``partition_holds`` as a list, after checking it is a boolean mask (the lattice indexes
    records with it: an integer array would select records by position instead)."""
    part = partition(t)
    got = np.asarray(metric.partition_holds(part, params))
    assert got.dtype == np.bool_ and got.shape == (part.n_classes,), (got.dtype, got.shape)
    return got.tolist()


# -- k-anonymity --------------------------------------------------------------------------


def two_qi(rows):
    a, b = zip(*rows)
    return typed_table({"a": list(a), "b": list(b)}, quasi={"a": "nominal", "b": "nominal"})


def test_k_anonymity_a_class_of_exactly_k_holds_and_k_is_the_smallest_class():
    # classes by (a, b): (x, 1) x3, (x, 2) x4, (y, 1) x5 -> k = 3, 3 classes
    t = two_qi([("x", 1)] * 3 + [("x", 2)] * 4 + [("y", 1)] * 5)
    out = run(KAnonymity(), t, k=3)
    assert out["k-anonymity"] == 3 and out["k-anonymity.classes"] == 3
    assert out["k-anonymity.violating_classes"] == 0 and out["k-anonymity.holds"] == 1
    out = run(KAnonymity(), t, k=4)  # only the class of 3 violates
    assert out["k-anonymity.violating_classes"] == 1 and out["k-anonymity.holds"] == 0
    sizes = Partition(np.array([0] * 3 + [1] * 4 + [2] * 5), np.array([3, 4, 5]), t)
    assert KAnonymity().partition_holds(sizes, {"k": 4}).tolist() == [False, True, True]
    assert KAnonymity().partition_holds(sizes, {"k": 3}).tolist() == [True, True, True]


def test_k_anonymity_by_values_groups_by_every_quasi_identifier():
    # a alone would give one class of 4; (a, b) gives (x, 1) x3 and (x, 2) x1 -> k = 1
    t = two_qi([("x", 1)] * 3 + [("x", 2)])
    out = run(KAnonymity(), t, k=2)
    assert out["k-anonymity"] == 1 and out["k-anonymity.classes"] == 2 and out["k-anonymity.holds"] == 0


def test_k_anonymity_by_class_reports_the_qi_values_k_beside_it():
    # class ids 0 (4 records) and 1 (4 records): k by class = 4; the QI values within them:
    # (x, 1) x3, (x, 2) x1, (y, 1) x4 -> k by values = 1 (the smallest group, not the largest, 4)
    t = typed_table({"a": ["x"] * 4 + ["y"] * 4, "b": [1, 1, 1, 2, 1, 1, 1, 1]},
                    quasi={"a": "nominal", "b": "nominal"}, extra={"_class": [0] * 4 + [1] * 4})
    out = run(KAnonymity(), t, k=4, by="class")
    assert out["k-anonymity"] == 4 and out["k-anonymity.holds"] == 1
    assert out["k-anonymity.by_qi_values"] == 1


# -- distinct l-diversity and p-sensitive k-anonymity -----------------------------------


# class 0: a, b, c (n 3, d 3)   class 1: a, a, b, ?, ? (n 5, d 2: '?' is no value)
# class 2: a, b (n 2, d 2)
DIV_CLASSES = [0, 0, 0, 1, 1, 1, 1, 1, 2, 2]
DIV_VALUES = ["a", "b", "c", "a", "a", "b", "?", "?", "a", "b"]


def test_l_diversity_counts_real_distinct_values_and_a_class_of_exactly_l_holds():
    t = table(DIV_CLASSES, DIV_VALUES)
    out = run(LDiversity(), t, l=2)
    assert out["l-diversity"] == 2 and out["l-diversity.classes"] == 3
    assert out["l-diversity.violating_classes"] == 0 and out["l-diversity.holds"] == 1
    assert out["l-diversity.missing_sensitive"] == 2
    out = run(LDiversity(), t, l=3)  # classes 1 and 2 have 2 real values ('?' would make class 1's 3)
    assert out["l-diversity.violating_classes"] == 2
    assert holds(LDiversity(), t, l=3) == [True, False, False]
    assert holds(LDiversity(), t, l=2) == [True, True, True]


def test_p_sensitive_k_anonymity_a_class_failing_only_k_or_only_p_violates():
    t = table(DIV_CLASSES, DIV_VALUES)
    # k = 3, p = 2: class 2 has 2 distinct values (p holds) but 2 records (< k): violates
    out = run(PSensitiveKAnonymity(), t, k=3, p=2)
    assert out["p-sensitive-k-anonymity.violating_classes"] == 1
    assert out["p-sensitive-k-anonymity.smallest_class"] == 2
    assert holds(PSensitiveKAnonymity(), t, k=3, p=2) == [True, True, False]
    # k = 2, p = 3: every class has >= 2 records; classes 1 and 2 have 2 real values (< p)
    out = run(PSensitiveKAnonymity(), t, k=2, p=3)
    assert out["p-sensitive-k-anonymity.violating_classes"] == 2
    assert out["p-sensitive-k-anonymity"] == 2  # the least real distinct count
    assert holds(PSensitiveKAnonymity(), t, k=2, p=3) == [True, False, False]
    out = run(PSensitiveKAnonymity(), t, k=2, p=2)  # exactly k and exactly p: holds
    assert out["p-sensitive-k-anonymity.holds"] == 1


# -- (alpha, k) and (alpha_i, k) ------------------------------------------------------------


def test_alpha_is_a_share_of_the_records_with_a_real_value():
    # class 0: flu, flu, cold, ?, ?  n = 5, r = 3: flu 2/3 > 0.5 (violates), although 2/5 <= 0.5
    # class 1: flu, cold, none, flu  n = 4, r = 4: flu 2/4 = 0.5 (exactly alpha: holds)
    t = table([0] * 5 + [1] * 4, ["flu", "flu", "cold", "?", "?", "flu", "cold", "none", "flu"])
    out = run(AlphaKAnonymity(), t, alpha=0.5, k=2)
    assert out["alpha-k-anonymity.violating_classes"] == 1
    assert out["alpha-k-anonymity.missing_sensitive"] == 2
    assert holds(AlphaKAnonymity(), t, alpha=0.5, k=2) == [False, True]


def test_alpha_never_bounds_the_missing_marker_itself():
    # class 0: flu, cold, ?, ?, ?  r = 2: flu 1/2, cold 1/2 <= 0.5 -> holds; '?' (3 records) is no value
    t = table([0] * 5, ["flu", "cold", "?", "?", "?"])
    out = run(AlphaKAnonymity(), t, alpha=0.5, k=2)
    assert out["alpha-k-anonymity.violating_classes"] == 0
    assert holds(AlphaKAnonymity(), t, alpha=0.5, k=2) == [True]


def test_alpha_a_class_with_no_real_value_or_fewer_than_k_records_violates():
    # class 0: flu, cold, flu, cold (holds at alpha 0.5, k 3); class 1: ?, ? (no real value);
    # class 2: flu, cold (2 records < k = 3, shares 1/2 fine)
    t = table([0, 0, 0, 0, 1, 1, 2, 2], ["flu", "cold", "flu", "cold", "?", "?", "flu", "cold"])
    out = run(AlphaKAnonymity(), t, alpha=0.5, k=3)
    assert out["alpha-k-anonymity.violating_classes"] == 2
    assert holds(AlphaKAnonymity(), t, alpha=0.5, k=3) == [True, False, False]
    out = run(AlphaKAnonymity(), t, alpha=0.5, k=2)  # only the class without a real value
    assert out["alpha-k-anonymity.violating_classes"] == 1


def test_alpha_i_per_value_and_per_level():
    # GRADING: flu at alpha 0.5 (level 1); cold and none at 0.6 (level 2)
    # class 0: flu, cold, none, none, cold  r = 5: flu 1/5, cold 2/5, none 2/5 -> per value holds;
    # per level: level 2 holds cold + none = 4/5 > 0.6 -> violates
    t = table([0] * 5, ["flu", "cold", "none", "none", "cold"], grading=GRADING)
    assert run(AlphaIKAnonymity(), t, k=2)["alpha-i-k-anonymity.violating_classes"] == 0
    assert run(AlphaIKAnonymity(), t, k=2, per="level")["alpha-i-k-anonymity.violating_classes"] == 1
    assert holds(AlphaIKAnonymity(), t, k=2) == [True]
    assert holds(AlphaIKAnonymity(), t, k=2, per="level") == [False]


def test_table_counts_leave_out_records_without_a_class():
    # records 2 and 3 are suppressed (null _class): they belong to no class
    data = pa.table({"s": ["a", "b", "a", "a"], "_class": pa.array([0, 0, None, None], pa.int64())})
    rows = make_context().sql(f"SELECT cls, value, c, n FROM ({table_counts_sql(data.column_names, [], 's')}) "
                              "ORDER BY cls, value", published=data).to_pylist()
    assert rows == [{"cls": 0, "value": "a", "c": 1, "n": 2}, {"cls": 0, "value": "b", "c": 1, "n": 2}]


# -- lossy-join pairs -------------------------------------------------------------------------


def pair(qi_classes, sa_rows):
    qi = pa.table({"class_id": pa.array(qi_classes, pa.int64())})
    cls, value, count = zip(*sa_rows)
    sa = pa.table({"class_id": pa.array(cls, pa.int64()), "value": list(value), "count": pa.array(count, pa.int64())})
    return qi, sa


def test_pair_consistency_counts_a_class_missing_from_either_table():
    sql = make_context().sql
    q = pair_consistency_sql()
    qi, sa = pair([0, 0, 1], [(0, "a", 1), (0, "b", 1), (1, "a", 1)])
    assert sql(q, qi=qi, sa=sa).to_pylist()[0]["bad"] == 0
    qi, sa = pair([0, 0, 1, 2], [(0, "a", 1), (0, "b", 1), (1, "a", 1)])  # class 2 has no SA row
    assert sql(q, qi=qi, sa=sa).to_pylist()[0]["bad"] == 1
    qi, sa = pair([0, 0], [(0, "a", 2), (3, "b", 1)])  # class 3 has no QI row
    assert sql(q, qi=qi, sa=sa).to_pylist()[0]["bad"] == 1
    qi, sa = pair([0, 0], [(0, "a", 3)])  # counts do not add up to the class's rows
    assert sql(q, qi=qi, sa=sa).to_pylist()[0]["bad"] == 1


def test_alpha_over_a_pair_refuses_sa_counts_of_a_class_not_in_the_qi_table():
    qi, sa = pair([0, 0], [(0, "a", 1), (0, "b", 1), (5, "a", 2)])
    with pytest.raises(InputError, match="not in the QI table"):
        alpha_report(make_context().sql, pair_counts_sql(), {"qi": qi, "sa": sa}, k=1, alpha=0.5)
    qi, sa = pair([0, 0, 1, 1], [(0, "a", 1), (0, "b", 1), (1, "a", 2)])  # class 1: a 2/2 > 0.5
    row = alpha_report(make_context().sql, pair_counts_sql(), {"qi": qi, "sa": sa}, k=1, alpha=0.5)
    assert row["violating"] == 1 and row["classes"] == 2


def test_split_tables_counts_records_whatever_their_sensitive_value():
    # class 0: s = a, null, null; class 1: s = b -> SA counts (0, a, 1), (0, null, 2), (1, b, 1)
    t = TypedTable(pa.table({"_row": pa.array([0, 1, 2, 3], pa.int64()), "q": ["x", "x", "x", "y"],
                             "s": pa.array(["a", None, None, "b"], pa.string()),
                             "_class": pa.array([0, 0, 0, 1], pa.int64())}),
                   Typing((Attribute("q", "quasi", "nominal"), Attribute("s", "sensitive", "nominal"))))
    qi, sa = split_tables(t, "s", make_context().sql)
    assert sorted(zip(sa.column("class_id").to_pylist(), sa.column("count").to_pylist())) == [(0, 1), (0, 2), (1, 1)]
    assert sum(sa.column("count").to_pylist()) == qi.num_rows == 4


def test_k_figures_of_a_qi_table():
    # classes 0 (3 rows) and 1 (2 rows); QI tuples: x x3 (across both classes), y x1, z x1
    qi = pa.table({"q": ["x", "x", "y", "x", "z"], "class_id": pa.array([0, 0, 0, 1, 1], pa.int64())})
    ks = k_figures(qi, ["q"], "class_id", make_context().sql)
    assert ks == {"class_k": 2.0, "qi_table_k": 1.0, "qi_table_unique_records": 2.0}
    # every tuple in a group of two: no unique record, qi_table_k 2 where class_k is 4
    qi = pa.table({"q": ["x", "x", "y", "y"], "class_id": pa.array([0, 0, 0, 0], pa.int64())})
    assert k_figures(qi, ["q"], "class_id", make_context().sql) == {
        "class_k": 4.0, "qi_table_k": 2.0, "qi_table_unique_records": 0.0}


# -- SQL and partition_holds agree with a plain count, on real data -------------------------------


@pytest.fixture(scope="module")
def adult_classes(adult_full):
    """500 Adult records in 60 random classes, occupation as the sensitive attribute (with the
    missing-value marker kept as a category), so every model has classes on both sides."""
    raw = adult_full.slice(0, 500)
    occ = [v.strip() if v is not None else "?" for v in raw.column("occupation").to_pylist()]
    rng = np.random.default_rng(7)
    classes = np.sort(rng.integers(0, 60, len(occ)))
    classes = np.unique(classes, return_inverse=True)[1]
    return classes, occ


def plain_counts(classes, values):
    per: dict[int, dict[str, int]] = {}
    for c, v in zip(classes.tolist(), values):
        per.setdefault(c, {})
        per[c][v] = per[c].get(v, 0) + 1
    return [per[c] for c in sorted(per)]


@pytest.mark.parametrize("model, params", [
    (LDiversity(), {"l": 3}), (PSensitiveKAnonymity(), {"k": 8, "p": 3}), (AlphaKAnonymity(), {"alpha": 0.5, "k": 6}),
])
def test_sql_and_partition_holds_agree_with_a_plain_count_on_adult(adult_classes, model, params):
    classes, occ = adult_classes
    t = table(classes.tolist(), occ)
    expected = []
    for counts in plain_counts(classes, occ):
        n = sum(counts.values())
        real = {v: c for v, c in counts.items() if v != "?"}
        r = sum(real.values())
        if isinstance(model, LDiversity):
            expected.append(len(real) >= params["l"])
        elif isinstance(model, PSensitiveKAnonymity):
            expected.append(n >= params["k"] and len(real) >= params["p"])
        else:
            expected.append(n >= params["k"] and r > 0 and max(real.values()) <= params["alpha"] * r)
    assert 0 < sum(expected) < len(expected), "the example must have classes on both sides"
    assert holds(model, t, **params) == expected
    out = compute(model, t, **params)
    assert out[f"{model.name}.violating_classes"] == len(expected) - sum(expected)


# -- what each check reports around its verdict ----------------------------------------------


def test_alpha_checks_refuse_a_claimed_alpha_outside_0_1():
    # params are validated before compute; a claim comes from an algorithm and is checked here
    t = table([0, 0], ["flu", "cold"])
    for alpha in (-0.5, 0.0, 1.5):
        bad = t.replace(claims={"alpha-k-anonymity": {"alpha": alpha}})
        with pytest.raises(InputError, match="'alpha' must be in"):
            run(AlphaKAnonymity(), bad)
    ok = t.replace(claims={"alpha-k-anonymity": {"alpha": 1.0}})  # 1 is allowed: no bound at all
    assert run(AlphaKAnonymity(), ok)["alpha-k-anonymity.holds"] == 1


def test_alpha_reports_k_1_by_default_and_whether_it_bounds_levels():
    t = table([0, 0, 0], ["flu", "cold", "none"], grading=GRADING)
    out = run(AlphaKAnonymity(), t, alpha=0.5)
    assert out["alpha-k-anonymity.k"] == 1 and out["alpha-k-anonymity.holds"] == 1  # no k claimed or given
    assert run(AlphaIKAnonymity(), t)["alpha-i-k-anonymity.per_level"] == 0
    assert run(AlphaIKAnonymity(), t, per="level")["alpha-i-k-anonymity.per_level"] == 1


def test_alpha_i_names_the_worst_value_or_level_in_its_note():
    # class 0: flu, flu, cold: flu 2/3 > 0.5 (per value); level 1 (flu) 2/3 > 0.5 (per level)
    t = table([0, 0, 0], ["flu", "flu", "cold"], grading=GRADING)
    for per, what in (("value", "s = 'flu'"), ("level", "level 1")):
        ctx = make_context()
        AlphaIKAnonymity().compute(None, t, validate_params(AlphaIKAnonymity.params, {"per": per}), ctx)
        assert any(f"records with {what} (alpha 0.5)" in n for n in ctx.notes), (per, ctx.notes)


def test_every_check_reports_zeros_for_a_table_with_no_class():
    # every record suppressed (null _class): no class, no smallest class
    t = table([0, 0], ["flu", "cold"])
    t = t.replace(data=t.data.set_column(t.data.column_names.index("_class"), "_class",
                                         pa.array([None, None], pa.int64())))
    out = run(AlphaKAnonymity(), t, alpha=0.5, k=2)
    assert out["alpha-k-anonymity.classes"] == 0 and out["alpha-k-anonymity.smallest_class"] == 0
    assert out["alpha-k-anonymity"] == 0 and out["alpha-k-anonymity.worst_ratio"] == 0
    out = run(AlphaIKAnonymity(), t.replace(typing=table([0], ["flu"], grading=GRADING).typing), k=2)
    assert out["alpha-i-k-anonymity"] == 0 and out["alpha-i-k-anonymity.worst_ratio"] == 0
    out = run(PSensitiveKAnonymity(), t, k=2, p=2)
    assert out["p-sensitive-k-anonymity.classes"] == 0 and out["p-sensitive-k-anonymity.smallest_class"] == 0
    out = run(LDiversity(), t, l=2)
    assert out["l-diversity"] == 0 and out["l-diversity.classes"] == 0


def test_worst_class_is_reported_only_when_counting_by_class_id():
    # class 0: a, a, b (d 2); class 1: a (d 1, n 1) -> worst class 1
    t = table([0, 0, 0, 1], ["a", "a", "b", "a"])
    by_class = run(PSensitiveKAnonymity(), t, k=2, p=2, by="class")
    assert by_class["p-sensitive-k-anonymity.worst_class"] == 1
    by_values = run(PSensitiveKAnonymity(), t, k=2, p=2, by="values")  # a class id is not what is published
    assert "p-sensitive-k-anonymity.worst_class" not in by_values
    assert run(LDiversity(), t, l=2, by="class")["l-diversity.worst_class"] == 1
    assert "l-diversity.worst_class" not in run(LDiversity(), t, l=2, by="values")


def test_cavg_counts_classes_by_class_id_or_by_published_values():
    # class ids 0, 0, 1, 1 but QI values c0, c0, c1, c1 ... relabelled so that by values the
    # four records form ONE group: q = 'x' everywhere -> by class 2 classes, by values 1
    from anonflow_std.utility.class_metrics import Cavg

    t = table([0, 0, 1, 1], ["a", "b", "a", "b"])
    t = t.replace(data=t.data.set_column(t.data.column_names.index("q"), "q", pa.array(["x"] * 4)))
    assert run(Cavg(), t, k=2, by="class")["cavg.classes"] == 2  # (4 / 2) / 2 = 1
    assert run(Cavg(), t, k=2, by="class")["cavg"] == 1
    assert run(Cavg(), t, k=2, by="values")["cavg.classes"] == 1  # (4 / 1) / 2 = 2
    assert run(Cavg(), t, k=2, by="values")["cavg"] == 2


def test_checks_take_their_parameters_from_the_claims():
    # k from k-anonymity, else p-sensitive's k; p from p-sensitive; l from l-diversity, else p
    t = table([0, 0, 0, 1, 1], ["a", "b", "c", "a", "b"])
    out = run(PSensitiveKAnonymity(), t.replace(claims={"p-sensitive-k-anonymity": {"k": 3, "p": 2}}))
    assert (out["p-sensitive-k-anonymity.k"], out["p-sensitive-k-anonymity.p"]) == (3, 2)
    assert out["p-sensitive-k-anonymity.violating_classes"] == 1  # class 1 has 2 records
    out = run(LDiversity(), t.replace(claims={"p-sensitive-k-anonymity": {"k": 3, "p": 3}}))
    assert out["l-diversity.l"] == 3 and out["l-diversity.violating_classes"] == 1
    out = run(LDiversity(), t.replace(claims={"l-diversity": {"l": 2}, "p-sensitive-k-anonymity": {"p": 3}}))
    assert out["l-diversity.l"] == 2 and out["l-diversity.holds"] == 1
    t2 = t.replace(claims={"k-anonymity": {"k": 2}, "p-sensitive-k-anonymity": {"k": 3, "p": 1}})
    from anonflow_std.utility.class_metrics import Cavg

    assert run(Cavg(), t2)["cavg.k"] == 2


def test_alpha_partition_holds_takes_alpha_up_to_1_and_k_1_by_default():
    # one class: flu, cold: each 1/2. alpha 1 bounds nothing; alpha 0.5 is exactly met
    t = table([0, 0], ["flu", "cold"])
    assert holds(AlphaKAnonymity(), t, alpha=1.0) == [True]
    assert holds(AlphaKAnonymity(), t, alpha=0.5) == [True]
    assert holds(AlphaKAnonymity(), t, alpha=0.49) == [False]
    for alpha in (1.5, 0.0, -0.5):
        with pytest.raises(InputError, match="'alpha' must be in"):
            AlphaKAnonymity().partition_holds(partition(t), {"alpha": alpha})
    # a class of one record with no k: k defaults to 1, and 1/1 <= alpha 1
    one = table([0], ["flu"])
    assert holds(AlphaKAnonymity(), one, alpha=1.0) == [True]
    assert holds(AlphaKAnonymity(), one, alpha=1.0, k=2) == [False]
    assert holds(AlphaIKAnonymity(), table([0, 0], ["flu", "cold"], grading=GRADING)) == [True]
    assert holds(AlphaIKAnonymity(), table([0, 0], ["flu", "cold"], grading=GRADING), k=3) == [False]


def test_alpha_i_names_the_value_its_grading_leaves_unassigned():
    # GRADING grades flu, cold and none; 'mild' (sorted after 'cold') has no level
    t = table([0, 0, 0], ["cold", "mild", "flu"], grading=GRADING)
    with pytest.raises(InputError, match="leaves the value 'mild' unassigned"):
        AlphaIKAnonymity().partition_holds(partition(t), {})


def test_by_class_needs_class_ids_and_by_values_needs_quasi_identifiers():
    no_ids = typed_table({"q": ["x", "x"], "s": ["a", "b"]}, quasi={"q": "nominal"}, sensitive={"s": "nominal"})
    with pytest.raises(InputError, match="l-diversity by class needs the _class column"):
        run(LDiversity(), no_ids, l=2, by="class")
    assert run(LDiversity(), no_ids, l=2, by="values")["l-diversity.holds"] == 1
    no_qi = typed_table({"s": ["a", "b"]}, sensitive={"s": "nominal"}, extra={"_class": [0, 0]})
    with pytest.raises(InputError, match="l-diversity by values needs quasi-identifiers"):
        run(LDiversity(), no_qi, l=2, by="values")
    assert run(LDiversity(), no_qi, l=2, by="class")["l-diversity.holds"] == 1


def test_per_level_bounds_with_an_odd_number_of_levels():
    # three levels: flu 0.5 (1), cold 0.6 (2), none 0.9 (3). One class: flu, cold, none, none, none
    # r = 5: level 3 holds 3/5 = 0.6 <= 0.9, level 1 1/5, level 2 1/5 -> holds; with none x4 of 6
    # records (flu, cold, none x4): level 3 4/6 = 0.67 <= 0.9 holds too; alpha_3 = 0.5 fails it
    three = {"levels": [{"alpha": 0.5, "values": ["flu"]}, {"alpha": 0.6, "values": ["cold"]},
                        {"alpha": 0.9, "values": ["none"]}]}
    t = table([0] * 5, ["flu", "cold", "none", "none", "none"], grading=three)
    assert holds(AlphaIKAnonymity(), t, per="level") == [True]
    tight = {"levels": [*three["levels"][:2], {"alpha": 0.5, "values": ["none"]}]}
    t = table([0] * 5, ["flu", "cold", "none", "none", "none"], grading=tight)
    assert holds(AlphaIKAnonymity(), t, per="level") == [False]  # level 3: 3/5 > 0.5
    assert run(AlphaIKAnonymity(), t, per="level")["alpha-i-k-anonymity.violating_classes"] == 1


def test_the_missing_marker_is_no_value_wherever_it_sorts():
    # '?' sorts after digits: values 0-flu, 1-cold, ? -> the marker is not the first code
    t = table([0, 0, 0, 1, 1], ["0-flu", "1-cold", "?", "0-flu", "?"])
    assert holds(LDiversity(), t, l=2) == [True, False]
    assert run(LDiversity(), t, l=2)["l-diversity.violating_classes"] == 1


def test_real_distinct_counts_pairs_for_any_number_of_values():
    # three values (m = 3, '?' first): class 2 holds a and b -> 2 real distinct values; a
    # (class, code) key that is not class * m + code would fold class 2's pairs into one
    t = table([0, 0, 1, 1, 2, 2], ["a", "?", "b", "?", "a", "b"])
    assert holds(LDiversity(), t, l=2) == [False, False, True]
    assert run(LDiversity(), t, l=2)["l-diversity.violating_classes"] == 2
