import numpy as np
import pyarrow as pa
import pytest

from anonflow.errors import InputError, WorkflowError
from anonflow.grading import Grading, check_grading_against, load_grading, parse_grading, sensitivity_distance

from tests.support.helpers import DATA

ADULT_GRADING = DATA / "gradings" / "adult-occupation.yaml"


def adult_grading() -> Grading:
    return Grading.from_json(load_grading(str(ADULT_GRADING), DATA, where="test"))


def counts(levels, lam=5):
    c = np.zeros((1, lam + 1))
    for lv in levels:
        c[0, lv] += 1
    return c


def test_sensitivity_distance_matches_the_papers_examples():
    g = adult_grading()
    # {1,2,3,3}: pairs (1,2) .85*1, 2x(1,3) .90*2, 2x(2,3) .90*1, (3,3) 0 -> 6.25 / 6
    assert sensitivity_distance(counts([1, 2, 3, 3]), g)[0] == pytest.approx(1.042, abs=5e-4)
    # {3,4,5,5}: (3,4) .95*1, 2x(3,5) 1*2, 2x(4,5) 1*1 -> 6.95 / 6
    assert sensitivity_distance(counts([3, 4, 5, 5]), g)[0] == pytest.approx(1.158, abs=5e-4)
    assert sensitivity_distance(counts([3, 4, 5, 5]), g, normalized=True)[0] == pytest.approx(6.95 / 6 / 4)


def test_sensitivity_distance_of_many_classes_at_once():
    g = adult_grading()
    many = np.vstack([counts([1, 2, 3, 3]), counts([5]), counts([2, 2])])
    assert sensitivity_distance(many, g) == pytest.approx([6.25 / 6, 0.0, 0.0])


def test_the_shipped_adult_grading_covers_adults_occupations(adult_full):
    g = adult_grading()
    occupation = adult_full.column("occupation")
    assert check_grading_against(g, occupation, "occupation", "test") == []
    assert [lv.alpha for lv in g.levels] == [0.2, 0.3, 0.35, 0.4, 0.5]
    levels = g.levels_of(occupation)
    assert levels.min() == 1 and levels.max() == 5


def test_unassigned_value_is_an_error_and_absent_value_a_note():
    g = parse_grading({"levels": [{"alpha": 0.5, "values": ["a", "zz"]}]}, where="w")
    with pytest.raises(InputError, match="leaves the value 'b' unassigned"):
        check_grading_against(g, pa.chunked_array([["a", "b"]]), "s", "w")
    assert check_grading_against(g, pa.chunked_array([["a"]]), "s", "w") == [
        "grading of 's' names 'zz', which does not occur in the data"]


@pytest.mark.parametrize("data, fragment", [
    ({"levels": [{"alpha": 0, "values": ["a"]}]}, "alpha must be in (0, 1]"),
    ({"levels": [{"alpha": 1.5, "values": ["a"]}]}, "alpha must be in (0, 1]"),
    ({"levels": [{"alpha": 0.5, "values": ["a"]}, {"alpha": 0.5, "values": ["a"]}]}, "is in level 1 and level 2"),
    ({"levels": []}, "non-empty list"),
    ({"levels": [{"alpha": 0.5, "values": ["a"]}], "pair_weights": {7: 1}}, "pair_weights[7]"),
])
def test_bad_gradings(data, fragment):
    with pytest.raises(WorkflowError) as info:
        parse_grading(data, where="w")
    assert fragment in str(info.value)


def test_a_grading_file_is_recorded_relative_to_the_workflow_so_a_moved_checkout_hashes_alike(tmp_path):
    text = (DATA / "gradings" / "adult-occupation.yaml").read_text()
    resolved = []
    for where in ("a", "b/c"):
        folder = tmp_path / where
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "g.yaml").write_text(text)
        resolved.append(load_grading("data/g.yaml", folder, where="wf.yaml"))
    assert resolved[0] == resolved[1]
    assert resolved[0]["source"] == "data/g.yaml" and len(resolved[0]["sha256"]) == 64
