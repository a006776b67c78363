"""Hand-computed examples for every metric of issue 2 (SPEC section 3 and 8)."""

import math

import pytest

from anonflow.errors import InputError
from anonflow.testing import make_context, typed_table
from anonflow_std.privacy.kanonymity import KAnonymity
from anonflow_std.utility.sse import SseIl


def test_sse_il_on_a_hand_computed_example():
    # x = 1, 2, 3, 4 in two groups {1,2}, {3,4}: published 1.5, 1.5, 3.5, 3.5.
    # mean 2.5, population variance 1.25; SST = (2.25+.25+.25+2.25)/1.25 = 4; SSE = 4 * .25 / 1.25 = .8
    original = typed_table({"x": [1, 2, 3, 4]}, quasi={"x": "continuous"})
    masked = typed_table({"x": [1.5, 1.5, 3.5, 3.5]}, quasi={"x": "continuous"})
    out = SseIl().compute(original, masked, {"columns": None}, make_context())
    assert out["sse-il.sst"] == pytest.approx(4.0)
    assert out["sse-il.sse"] == pytest.approx(0.8)
    assert out["sse-il"] == pytest.approx(20.0)


def test_sse_il_weights_columns_by_their_own_spread():
    # the second column is the first times 1000: z-scores are equal, so IL is the same as one column
    original = typed_table({"x": [1, 2, 3, 4], "y": [1000, 2000, 3000, 4000]},
                           quasi={"x": "continuous", "y": "continuous"})
    masked = typed_table({"x": [1.5, 1.5, 3.5, 3.5], "y": [1500, 1500, 3500, 3500]},
                         quasi={"x": "continuous", "y": "continuous"})
    assert SseIl().compute(original, masked, {"columns": None}, make_context())["sse-il"] == pytest.approx(20.0)


def test_sse_il_is_zero_without_masking_and_100_for_the_global_mean():
    original = typed_table({"x": [1.0, 5.0, 9.0]}, quasi={"x": "continuous"})
    assert SseIl().compute(original, original, {"columns": None}, make_context())["sse-il"] == 0
    mean = typed_table({"x": [5.0, 5.0, 5.0]}, quasi={"x": "continuous"})
    assert SseIl().compute(original, mean, {"columns": None}, make_context())["sse-il"] == pytest.approx(100)


def test_sse_il_refuses_misaligned_tables():
    a = typed_table({"x": [1.0, 2.0]}, quasi={"x": "continuous"})
    b = typed_table({"x": [1.0, 2.0, 3.0]}, quasi={"x": "continuous"})
    with pytest.raises(InputError, match="hold different records"):
        SseIl().compute(a, b, {"columns": None}, make_context())


def published(rows, claims=None):
    q, s = zip(*rows)
    return typed_table({"q": list(q), "s": list(s)}, quasi={"q": "continuous", "s": "nominal"}, claims=claims)


def test_k_anonymity_counts_classes_of_the_published_values():
    t = published([(1, "a"), (1, "a"), (2, "b"), (2, "b"), (2, "b")])
    out = KAnonymity().compute(None, t, {"k": 2, "by": None}, make_context())
    assert out == {"k-anonymity": 2, "k-anonymity.classes": 2, "k-anonymity.k": 2,
                   "k-anonymity.violating_classes": 0, "k-anonymity.holds": 1}
    out = KAnonymity().compute(None, t, {"k": 3, "by": None}, make_context())
    assert out["k-anonymity.violating_classes"] == 1 and out["k-anonymity.holds"] == 0


def test_k_anonymity_ignores_class_ids_and_uses_the_claim():
    # two "classes" by id that publish identical values are one equivalence class to an attacker
    t = typed_table({"q": [1.0, 1.0, 1.0]}, quasi={"q": "continuous"}, claims={"k-anonymity": {"k": 3}},
                    extra={"_class": [0, 0, 1]})
    out = KAnonymity().compute(None, t, {"k": None, "by": None}, make_context())
    assert out["k-anonymity"] == 3 and out["k-anonymity.holds"] == 1


def test_k_anonymity_without_a_threshold_reports_the_smallest_class():
    out = KAnonymity().compute(None, published([(1, "a"), (2, "a")]), {"k": None, "by": None}, make_context())
    assert out == {"k-anonymity": 1, "k-anonymity.classes": 2}
    assert not math.isnan(out["k-anonymity"])


def test_k_anonymity_by_class_for_lossy_join_output():
    # exact QI values (every record distinct) but published in classes of 2 with a class id
    t = typed_table({"q": [1.0, 2.0, 3.0, 4.0]}, quasi={"q": "continuous"},
                    claims={"k-anonymity": {"k": 2, "by": "class"}}, extra={"_class": [0, 0, 1, 1]})
    out = KAnonymity().compute(None, t, {"k": None, "by": None}, make_context())
    assert out["k-anonymity"] == 2 and out["k-anonymity.holds"] == 1
    by_values = KAnonymity().compute(None, t, {"k": None, "by": "values"}, make_context())
    assert by_values["k-anonymity"] == 1 and by_values["k-anonymity.holds"] == 0


def test_k_anonymity_by_class_reports_the_qi_values_k_beside_it():
    # classes of 2 and 3 by id; the QI values 1, 1 | 2, 3, 3: the attacker's smallest group is {2}
    t = typed_table({"q": [1.0, 1.0, 2.0, 3.0, 3.0]}, quasi={"q": "continuous"},
                    claims={"k-anonymity": {"k": 2, "by": "class"}}, extra={"_class": [0, 0, 1, 1, 1]})
    out = KAnonymity().compute(None, t, {"k": None, "by": None}, make_context())
    assert out["k-anonymity"] == 2 and out["k-anonymity.by_qi_values"] == 1
    assert "k-anonymity.by_qi_values" not in KAnonymity().compute(None, t, {"k": None, "by": "values"},
                                                                   make_context())
