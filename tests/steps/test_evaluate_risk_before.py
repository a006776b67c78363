"""The evaluate step's ``risk_before``: every risk metric measured on the original too."""

from __future__ import annotations

import json

import pyarrow.compute as pc

from anonflow import registry as plugins
from anonflow.api import Metric, hookimpl

from tests.support.helpers import census_workflow


class DistinctKeys(Metric):
    """Records that share their QI values with no other record (a toy risk measure)."""

    name = "test.unique-keys"
    version = "0.0.1"
    category = "risk"
    requires_original = False

    def compute(self, original, anonymized, params, ctx):
        quasi = anonymized.typing.quasi
        counts = anonymized.data.select(quasi).group_by(quasi).aggregate([([], "count_all")])
        unique = int(pc.sum(pc.equal(counts.column("count_all"), 1)).as_py() or 0)
        ctx.note(f"{unique} unique of {anonymized.num_rows}")
        return {self.name: unique, f"{self.name}.records": anonymized.num_rows}


class Provider:
    @hookimpl
    def anonflow_register_metrics(self, register):
        register(DistinctKeys())


def test_risk_before_measures_the_original_as_if_published(cli, project):
    pm, dists = plugins.plugin_manager()
    pm.register(Provider(), name="risk-before")
    plugins.set_registry(plugins.Registry(pm, dists))
    wf = census_workflow(project, extra="""
        risk:
          uses: evaluate
          input: [typed, grouped]
          with:
            metrics: [test.unique-keys, k-anonymity]
            risk_before: true
            thresholds: {test.unique-keys.before: {min: 1}, test.unique-keys: {max: 0}}
        """)
    res = cli("run", wf, "--db", project / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)["metrics"]
    assert m["risk.test.unique-keys.before"] == 1080 and m["risk.test.unique-keys.before.records"] == 1080
    assert m["risk.test.unique-keys"] == 0  # MDAV, k = 5: no record is alone
    assert not any(k.startswith("risk.k-anonymity.before") for k in m)  # privacy checks are not risk metrics
    # each note says which table it is about: the measure's on the release, then the original's
    notes = next(s for s in json.loads(res.stdout)["steps"] if s["step"] == "risk")["notes"]
    assert notes == ["0 unique of 1080", "before (the original as if published): 1080 unique of 1080"]


def test_risk_before_needs_the_original(cli, project):
    wf = census_workflow(project, extra="""
        risk:
          uses: evaluate
          input: grouped
          with: {metrics: [k-anonymity], risk_before: true}
        """)
    res = cli("plan", wf)
    assert res.exit_code == 2
    assert "risk_before measures the original too: give two inputs, [original, anonymized]" in res.output
