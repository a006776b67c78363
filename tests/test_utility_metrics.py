"""Utility models of seed 004 (Loss, Entropy Loss, MI Loss), SPEC section 5's relative loss
of a hierarchy-generalized table, and classification accuracy: hand-computed examples, the
weights on Adult next to the paper's Table 2, and their errors."""

import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from anonflow.api import InputError
from anonflow.testing import make_context, typed_table
from anonflow_std.hierarchies import Intervals, Taxonomy
from anonflow_std.utility import (ClassificationAccuracy, EntropyLoss, GeneralizationRl, Loss, MiLoss, _codes,
                                  entropy, mutual_information)

from .conftest import DATA


def toy():
    """age 20/30/40/50 (interval width 20), color r/g/b/r (taxonomy warm {r, o}, cold {g, b}),
    label a/a/b/b; published: age at level 1, color at mixed levels."""
    ctx = make_context()
    age = Intervals().build("age", pa.array([20, 30, 40, 50]), {"widths": [20], "anchor": 0}, ctx)
    color = Taxonomy().build("color", pa.array([]), {"tree": {"warm": ["r", "o"], "cold": ["g", "b"]}}, ctx)
    original = typed_table({"age": [20, 30, 40, 50], "color": ["r", "g", "b", "r"], "y": ["a", "a", "b", "b"]},
                           quasi={"age": "continuous", "color": "nominal"}, label={"y": "nominal"})
    original = original.replace(hierarchies={"age": age, "color": color})
    anonymized = original.replace(data=original.data.set_column(1, "age", pa.array(["[20-40)", "[20-40)",
                                                                                   "[40-60)", "[40-60)"]))
                                  .set_column(2, "color", pa.array(["warm", "cold", "*", "r"])))
    return original, anonymized


def test_loss_is_the_mean_normalized_width_weighted_equally():
    o, a = toy()
    v = Loss().compute(o, a, {}, make_context())
    # age: [20-40) covers 20, 30 -> 10 / 30; color: warm 1/3, cold 1/3, * 1, r 0 (all leaves: r, o, g, b)
    assert v["loss.loss.age"] == pytest.approx(1 / 3)
    assert v["loss.loss.color"] == pytest.approx((1 / 3 + 1 / 3 + 1 + 0) / 4)
    assert v["loss.weight.age"] == v["loss.weight.color"] == 0.5
    assert v["loss"] == pytest.approx(0.375)
    # the original table itself loses nothing
    assert Loss().compute(o, o, {}, make_context())["loss"] == 0.0


def test_entropy_and_mi_loss_weights_hand_computed():
    o, a = toy()
    e = EntropyLoss().compute(o, a, {}, make_context())
    # H(age) = 2 bits, H(color) = H(1/2, 1/4, 1/4) = 1.5 bits
    assert e["entropy-loss.weight.age"] == pytest.approx(4 / 7)
    assert e["entropy-loss"] == pytest.approx(4 / 7 / 3 + 3 / 7 * 5 / 12)
    m = MiLoss().compute(o, a, {"label": None}, make_context())
    # MI(y; age) = H(y) = 1 bit; MI(y; color) = 1 - 1/2 * H(1/2, 1/2) = 0.5 bit
    assert m["mi-loss.weight.age"] == pytest.approx(2 / 3)
    assert m["mi-loss.weight.color"] == pytest.approx(1 / 3)
    assert m["mi-loss"] == pytest.approx(2 / 9 + 5 / 36)


def test_generalization_rl_is_spec_section_5_relative_loss():
    o, a = toy()
    v = GeneralizationRl().compute(o, a, {}, make_context())
    # age: [20, 30] -> (30 - 20 + 1) / 1 = 11 per record, whole domain (50 - 20 + 1) = 31;
    # color: |{r, o}| = 2, |{g, b}| = 2, |*| = 4, r unchanged 0; whole domain 4
    assert v["generalization-rl"] == pytest.approx((4 * 11 + 8) / (4 * 31 + 4 * 4))


def test_plugin_estimators():
    x = np.array([0, 0, 1, 1, 2, 2])
    assert entropy(x) == pytest.approx(np.log2(3))
    assert mutual_information(x, np.array([0, 0, 1, 1, 0, 0])) == pytest.approx(
        entropy(np.array([0, 0, 1, 1, 0, 0])))
    assert mutual_information(x, np.zeros(6, dtype=int)) == 0.0


def test_a_published_value_off_the_records_hierarchy_path_is_named():
    o, a = toy()
    bad = a.replace(data=a.data.set_column(2, "color", pa.array(["cold", "cold", "*", "r"])))
    with pytest.raises(InputError, match="loss: the published value 'cold' of 'color' is not a level of the "
                                         "hierarchy above the original value 'r'"):
        Loss().compute(o, bad, {}, make_context())
    with pytest.raises(InputError, match="quasi-identifier 'age' has no generalization hierarchy"):
        Loss().compute(o.replace(hierarchies={}), a.replace(hierarchies={}), {}, make_context())


# -- seed 004 Table 2 ---------------------------------------------------------------------

QI11 = ["age", "education-num", "capital-gain", "hours-per-week", "race", "relationship", "workclass",
        "native-country", "marital-status", "occupation", "sex"]
PAPER = {  # seed 004 Table 2: Entropy Loss, MI Loss
    "age": (0.2294, 0.0355), "education-num": (0.1183, 0.0683), "capital-gain": (0.0350, 0.2976),
    "hours-per-week": (0.1405, 0.0375), "race": (0.0322, 0.0225), "relationship": (0.0869, 0.1643),
    "workclass": (0.0665, 0.0281), "native-country": (0.0381, 0.0197), "marital-status": (0.0740, 0.1828),
    "occupation": (0.1419, 0.0565), "sex": (0.0370, 0.0870),
}
SPEC_PLUGIN_MI = {  # SPEC section 6: the plug-in MI Loss weights on adult_full.csv
    "age": 0.112, "education-num": 0.108, "capital-gain": 0.141, "hours-per-week": 0.069, "race": 0.010,
    "relationship": 0.195, "workclass": 0.020, "native-country": 0.010, "marital-status": 0.185,
    "occupation": 0.107, "sex": 0.044,
}


def test_adult_weights_next_to_seed_004_table_2():
    raw = pacsv.read_csv(DATA / "adult" / "adult_full.csv")
    assert raw.num_rows == 45222
    t = typed_table({c: raw.column(c) for c in [*QI11, "income"]},
                    quasi={q: "nominal" for q in QI11}, label={"income": "nominal"})
    h = np.array([entropy(_codes(t.data.column(q))) for q in QI11])
    y = _codes(t.data.column("income"))
    mi = np.array([mutual_information(_codes(t.data.column(q)), y) for q in QI11])
    ew = dict(zip(QI11, h / h.sum()))
    mw = dict(zip(QI11, mi / mi.sum()))
    print("\nattribute        entropy(ours paper)   MI(ours paper)")
    for q in QI11:
        print(f"{q:16s} {ew[q]:.4f} {PAPER[q][0]:.4f}        {mw[q]:.4f} {PAPER[q][1]:.4f}")
    for q in QI11:
        assert abs(ew[q] - PAPER[q][0]) < 0.008, q                # SPEC: Entropy Loss reproduces the paper
        assert abs(mw[q] - SPEC_PLUGIN_MI[q]) <= 0.001, q         # SPEC's plug-in values (3 decimals)
    # the paper's MI weights are not reproduced (SPEC section 6): capital-gain is far off
    assert abs(mw["capital-gain"] - PAPER["capital-gain"][1]) > 0.1


# -- classification accuracy ------------------------------------------------------------------


_RAW = {}


def adult_sample(n=1500):
    if "adult" not in _RAW:
        _RAW["adult"] = pacsv.read_csv(DATA / "adult" / "adult_full.csv")
    raw = _RAW["adult"]
    rows = np.sort(np.random.default_rng(0).choice(raw.num_rows, n, replace=False))
    raw = raw.take(pa.array(rows))
    cols = ["age", "education-num", "hours-per-week", "sex", "relationship", "income"]
    t = typed_table({c: raw.column(c) for c in cols},
                    quasi={"age": "continuous", "education-num": "continuous", "hours-per-week": "continuous",
                           "sex": "nominal", "relationship": "nominal"}, label={"income": "nominal"})
    ctx = make_context()
    hier = {q: Intervals().build(q, raw.column(q).unique(), {"widths": [10, 20], "anchor": 0}, ctx)
            for q in ("age", "education-num", "hours-per-week")}
    return t.replace(hierarchies=hier)


@pytest.mark.slow
def test_classification_accuracy_of_published_labels():
    pytest.importorskip("sklearn")
    t = adult_sample()
    params = {"label": None, "features": None, "folds": 3, "seed": 0, "max_iter": 1000, "classifier": "logistic"}
    base = ClassificationAccuracy().compute(None, t, params, make_context())
    assert 0.75 < base["classification-accuracy"] < 0.9
    assert base["classification-accuracy.majority"] == pytest.approx(0.75, abs=0.02)
    # numbers published as level-0 labels (text) are read back as themselves: same accuracy
    data = t.data
    for q in ("age", "education-num", "hours-per-week"):
        data = data.set_column(data.column_names.index(q), q, t.hierarchies[q].generalize(data.column(q), 0))
    same = ClassificationAccuracy().compute(None, t.replace(data=data), params, make_context())
    assert same["classification-accuracy"] == base["classification-accuracy"]
    # generalized to 20-year bins (midpoints): still a number per record, lower accuracy
    coarse = t.data
    for q in ("age", "education-num", "hours-per-week"):
        coarse = coarse.set_column(coarse.column_names.index(q), q,
                                   t.hierarchies[q].generalize(coarse.column(q), 2))
    low = ClassificationAccuracy().compute(None, t.replace(data=coarse), params, make_context())
    assert low["classification-accuracy"] < base["classification-accuracy"]
    again = ClassificationAccuracy().compute(None, t.replace(data=coarse), params, make_context())
    assert again == low  # seeded folds, deterministic solver


@pytest.mark.parametrize("classifier", ["logistic", "linear", "tree"])
def test_classification_accuracy_classifiers_separate_a_separable_label(classifier):
    """x = 0..9 (each 30 times), label = x >= 5: least squares on the +-1 label puts the
    threshold at the mean, 4.5, so every classifier is right on every record; a label that
    is noise cannot be learned (accuracy near the majority rate)."""
    pytest.importorskip("sklearn")
    from anonflow.params import validate_params

    x = np.tile(np.arange(10), 30)
    t = typed_table({"x": x.tolist(), "y": np.where(x >= 5, "hi", "lo").tolist()},
                    quasi={"x": "continuous"}, label={"y": "nominal"})
    params = validate_params(ClassificationAccuracy.params, {"classifier": classifier})
    assert ClassificationAccuracy().compute(None, t, params, make_context())["classification-accuracy"] == 1.0
    noise = np.random.default_rng(3).permutation(np.where(x >= 5, "hi", "lo"))
    t2 = t.replace(data=t.data.set_column(2, "y", pa.array(noise)))
    acc = ClassificationAccuracy().compute(None, t2, params, make_context())["classification-accuracy"]
    assert acc < 0.65
    with pytest.raises(Exception, match="expected one of 'logistic', 'linear', 'tree'"):
        validate_params(ClassificationAccuracy.params, {"classifier": "svm"})


def test_classification_accuracy_without_scikit_learn_says_what_to_install(monkeypatch):
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")] + ["sklearn"]:
        monkeypatch.setitem(sys.modules, name, None)
    t = adult_sample(300)
    with pytest.raises(InputError, match=r"pip install 'anonflow\[ml\]'"):
        ClassificationAccuracy().compute(None, t, {"label": None, "features": None, "folds": 3, "seed": 0,
                                                   "max_iter": 100, "classifier": "logistic"}, make_context())


def test_classification_accuracy_needs_a_varying_label():
    t = adult_sample(300)
    const = t.replace(data=t.data.set_column(t.data.column_names.index("income"), "income",
                                             pa.array(["<=50K"] * 300)))
    with pytest.raises(InputError, match="label column 'income' is constant"):
        ClassificationAccuracy().compute(None, const, {"label": None, "features": None, "folds": 3, "seed": 0,
                                                       "max_iter": 100, "classifier": "logistic"}, make_context())
