"""The lattice under the population models: k-map and delta-presence with a population table.

The search codes the population's quasi-identifiers through the sample's hierarchies once and
gives every node's partition the population count of each class (``Partition.population``).
Checked here: the counts on a hand-computed example and, on ARX's Adult (the population) with a
10% sample, against pandas counting the population generalized to the chosen node; the chosen
nodes are ARX's (ARX 3.9.2 built from source, same subset, limits and loss); the
published table satisfies the model it claims (the engine re-checks it with the SQL check);
k-map is searched with predictive tagging, delta-presence node by node; and bad populations
fail in one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from anonflow.api import InputError, TypedTable, Typing
from anonflow.hierarchy import Hierarchy
from anonflow.schema import Attribute
from anonflow.testing import run_workflow
from anonflow_std.generalization.lattice_search import Space

from tests.support.helpers import DATA

QIS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]


def _hier(column: str, rows: list[list[str]]) -> Hierarchy:
    return Hierarchy(column, pa.table({f"level{i}": [r[i] for r in rows] for i in range(len(rows[0]))}))


def _table(data: dict[str, list], hierarchies: dict[str, Hierarchy]) -> TypedTable:
    attrs = tuple(Attribute(c, "quasi", "nominal") for c in data)
    return TypedTable(pa.table(data), Typing(attrs), {}, hierarchies)


def test_population_counts_per_class_by_hand():
    # zip: 4 codes, level 1 = first two digits, level 2 = *; sex: M/F, level 1 = *
    zips = _hier("zip", [["1301", "13*", "*"], ["1302", "13*", "*"], ["1401", "14*", "*"], ["1402", "14*", "*"]])
    sex = _hier("sex", [["M", "*"], ["F", "*"]])
    hs = {"zip": zips, "sex": sex}
    sample = _table({"zip": ["1301", "1301", "1302", "1401"], "sex": ["M", "M", "F", "F"]}, hs)
    population = _table({"zip": ["1301", "1301", "1301", "1302", "1302", "1401", "1402", "1402", "1402"],
                         "sex": ["M", "M", "F", "F", "M", "F", "F", "F", "M"]}, hs)
    space = Space(sample, ["zip", "sex"])
    space.set_population(population, "population")

    def counts(levels):
        part = space.partition(levels)
        labels = [tuple(lv.labels[l][int(r[j])].as_py() for lv, l, r in zip(space.levels, levels, part.reps))
                  for j in range(len(part.sizes))]
        return {k: (int(n), int(N)) for k, n, N in zip(labels, part.sizes, space.population_sizes(part))}

    # bottom: (1301,M) 2 sample / 2 population, (1302,F) 1 / 1, (1401,F) 1 / 1
    assert counts((0, 0)) == {("1301", "M"): (2, 2), ("1302", "F"): (1, 1), ("1401", "F"): (1, 1)}
    # zip at level 1: (13*,M) 2 / 3 (1302 M joins), (13*,F) 1 / 2, (14*,F) 1 / 3
    assert counts((1, 0)) == {("13*", "M"): (2, 3), ("13*", "F"): (1, 2), ("14*", "F"): (1, 3)}
    # zip at level 1, sex *: 13* 3 / 5, 14* 1 / 4 -- population-only combinations join in
    assert counts((1, 1)) == {("13*", "*"): (3, 5), ("14*", "*"): (1, 4)}
    # the top node: one class, the whole population
    assert counts((2, 1)) == {("*", "*"): (4, 9)}


def test_a_population_must_hold_the_sample_and_lie_in_the_hierarchies():
    zips = _hier("zip", [["1301", "13*"], ["1302", "13*"]])
    hs = {"zip": zips}
    sample = _table({"zip": ["1301", "1301", "1302"]}, hs)
    space = Space(sample, ["zip"])
    with pytest.raises(InputError, match=r"holds 1 record\(s\) with zip='1301', fewer than the table's 2"):
        space.set_population(_table({"zip": ["1301", "1302", "1302"]}, hs), "census")
    with pytest.raises(InputError, match="population table 'census'.*no row for the value '9999'.*covers"):
        space.set_population(_table({"zip": ["1301", "1301", "1302", "9999"]}, hs), "census")
    with pytest.raises(InputError, match="no column 'zip'"):
        space.set_population(TypedTable(pa.table({"z": ["1301"]}), Typing(()), {}, {}), "census")


def _workflow(model: str, model_params: str, suppression: float = 0.0, fraction: float = 0.1) -> str:
    hier = "\n".join(f"      {q}: {{arx: {DATA}/arx/adult_hierarchy_{q}.csv}}" for q in QIS)
    return f"""
name: lattice-population
seed: 7
sources:
  adult: {{path: {DATA}/arx/adult.csv, delimiter: ";"}}
steps:
  typed:
    uses: typing
    input: adult
    with:
      quasi: {{sex: nominal, age: continuous, race: nominal, marital-status: nominal, education: nominal,
              native-country: nominal, workclass: nominal, occupation: nominal}}
      sensitive: [salary-class]
  hier:
    uses: hierarchy
    input: typed
    with:
{hier}
  drawn:
    uses: sample
    input: hier
    with: {{fraction: {fraction}}}
  anon:
    uses: lattice
    input: drawn
    with:
      model: {model}
      model_params: {model_params}
      suppression: {suppression}
  scores:
    uses: evaluate
    input: [drawn, anon]
    with:
      metrics: [{{{model}: {model_params}}}, {{reidentification-risk: {{population: hier}}}}]
  published:
    uses: publish
    input: anon
    with: {{publisher: csv, path: anon.csv}}
"""


def _population_counts(tmp: Path, published: pd.DataFrame) -> pd.Series:
    """Each published class's population count, by pandas: ARX's Adult generalized through the
    hierarchy files to the published labels' levels."""
    pop = pd.read_csv(DATA / "arx" / "adult.csv", sep=";", dtype=str)
    keys = []
    for q in QIS:
        h = pd.read_csv(DATA / "arx" / f"adult_hierarchy_{q}.csv", sep=";", header=None, dtype=str)
        labels = set(published[q].dropna())
        level = next(j for j in range(h.shape[1]) if labels <= set(h[j]))
        pop[q] = pop[q].map(dict(zip(h[0], h[level])))
        keys.append(q)
    return pop.groupby(keys).size()


@pytest.fixture(scope="module")
def kmap(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kmap")
    wf = _workflow("k-map", "{k: 20, population: hier}", suppression=0.02)
    return tmp, run_workflow(wf, tmp)


def _anon_table(tmp: Path, result) -> pd.DataFrame:
    """The published records (the CSV publisher leaves suppressed records out)."""
    return pd.read_csv(tmp / "out" / "anon.csv", dtype=str)


def test_kmap_with_a_population_every_published_class_matches_k_population_records(kmap):
    tmp, result = kmap
    assert result.status == "succeeded"
    assert result.metrics["scores.k-map.holds"] == 1.0
    assert result.metrics["scores.k-map"] >= 20
    kept = _anon_table(tmp, result)
    drawn = next(s for s in result.steps if s["step"] == "drawn")["rows"]
    assert len(kept) >= 0.98 * drawn - 1e-9
    counts = _population_counts(tmp, kept)
    classes = kept.groupby(QIS).size()
    pop = counts.reindex(classes.index)
    assert pop.notna().all() and (pop >= 20).all() and (pop >= classes).all()
    assert int(pop.min()) == result.metrics["scores.k-map"]
    # the journalist's population classes are matched the same way: its highest risk is 1 / min N
    assert result.metrics["scores.reidentification-risk.journalist.population"] == 1.0
    assert result.metrics["scores.reidentification-risk.journalist.highest"] == pytest.approx(1 / int(pop.min()))
    assert result.metrics["scores.reidentification-risk.marketer"] == pytest.approx(float((classes / pop).sum())
                                                                                    / len(kept))
    # k-map with a population is monotone: the search tags, it does not check every node
    notes = " ".join(n for s in result.steps if s["step"] == "anon" for n in s.get("notes", []))
    assert "not monotone" not in notes
    # ARX 3.9.2 (KMap(20, subset of these 3,016 rows), suppression limit 0.02, loss metric with
    # the arithmetic mean) finds this node too, with 58 records suppressed and 128 classes
    assert ("chosen node [sex=0, age=3, race=1, marital-status=1, education=2, native-country=2, workclass=1, "
            "occupation=1] with loss = 0.455786") in notes
    assert "128 classes, 58 record(s) suppressed" in notes


def test_kmap_against_the_sample_alone_is_weaker_than_k_anonymity(kmap, tmp_path):
    """A 10% sample: k-map with k = 20 over the population needs far less generalization than
    20-anonymity of the sample, which is the same check with the sample as the population."""
    tmp, result = kmap
    kanon = run_workflow(_workflow("k-anonymity", "{k: 20}", suppression=0.02), tmp_path)
    assert result.metrics["scores.k-map.classes"] > 2 * kanon.metrics["scores.k-anonymity.classes"]


def test_delta_presence_lattice_holds_and_is_checked_node_by_node(tmp_path):
    wf = _workflow("delta-presence", "{delta_min: 0.0, delta_max: 0.2, population: hier}", suppression=0.05)
    result = run_workflow(wf, tmp_path)
    assert result.status == "succeeded"
    assert result.metrics["scores.delta-presence.holds"] == 1.0
    assert result.metrics["scores.delta-presence"] <= 0.2 + 1e-9
    notes = " ".join(n for s in result.steps if s["step"] == "anon" for n in s.get("notes", []))
    assert "'delta-presence' is not monotone" in notes
    # ARX 3.9.2 (DPresence(0, 0.2, subset), suppression limit 0.05) finds the same node
    assert ("chosen node [sex=0, age=4, race=0, marital-status=1, education=2, native-country=1, workclass=0, "
            "occupation=1] with loss = 0.323432") in notes
    assert "240 classes, 123 record(s) suppressed" in notes
    kept = _anon_table(tmp_path, result)
    classes = kept.groupby(QIS).size()
    pop = _population_counts(tmp_path, kept).reindex(classes.index)
    assert ((classes / pop) <= 0.2 + 1e-9).all()
    assert float((classes / pop).max()) == pytest.approx(result.metrics["scores.delta-presence"])


def test_the_population_step_is_a_dependency_and_errors_name_it(tmp_path):
    from anonflow.runner.plan import build_plan
    from anonflow.registry import get_registry
    from anonflow.workflow.spec import load_workflow

    wf = tmp_path / "wf.yaml"
    wf.write_text(_workflow("k-map", "{k: 5, population: hier}"))
    plan = build_plan(load_workflow(wf, [], None), get_registry())
    assert plan.nodes["anon"].refs == ("hier",)
    assert ("hier", "anon") in plan.graph.edges
    # the lattice refuses a k-map without population or estimator in one line
    with pytest.raises(InputError, match="k-map needs a population table"):
        run_workflow(_workflow("k-map", "{k: 5}"), tmp_path / "b")
    # a population that is not the sample's superset: the sample drawn from another sample
    bad = _workflow("k-map", "{k: 5, population: small}", fraction=0.5).replace(
        "  anon:\n", "  small:\n    uses: sample\n    input: hier\n    with: {fraction: 0.2}\n  anon:\n")
    with pytest.raises(InputError, match="population table 'small' holds .* fewer than the table's"):
        run_workflow(bad, tmp_path / "c")
