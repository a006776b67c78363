"""Parameters of kind ``step``: a plugin reads another step's table (a population table) through
``ctx.table``; the graph orders it first, the fingerprint counts its content, lineage follows it."""

from __future__ import annotations

import json

from anonflow import registry as plugins
import pytest

from anonflow.api import Metric, Param, hookimpl
from anonflow.params import ParamError, validate_params

from tests.support.helpers import write


class PopulationSize(Metric):
    name = "test.population-size"
    version = "0.0.1"
    category = "risk"
    requires_original = False
    params = (Param("population", "step"), Param("peek", "str", default=None))

    def compute(self, original, anonymized, params, ctx):
        population = ctx.table(params["population"])
        if params["peek"]:
            ctx.table(params["peek"])  # not referenced by a 'step' parameter: refused
        return {self.name: population.num_rows, f"{self.name}.ratio": anonymized.num_rows / population.num_rows}


class Provider:
    @hookimpl
    def anonflow_register_metrics(self, register):
        register(PopulationSize())


def _use() -> None:
    pm, dists = plugins.plugin_manager()
    pm.register(Provider(), name="refs")
    plugins.set_registry(plugins.Registry(pm, dists))


def _workflow(project, population: str = "poptyped", extra: str = "") -> object:
    return write(project / "wf.yaml", f"""
        name: refs
        sources:
          census: {{path: data/sdcmicro/CASCrefmicrodata.csv}}
          everyone: {{path: data/sdcmicro/population.csv}}
        steps:
          scores:
            uses: evaluate
            input: typed
            with: {{metrics: [{{test.population-size: {{population: {population}{extra}}}}}]}}
          typed: {{uses: typing, input: census, with: {{quasi: [AGI]}}}}
          poptyped: {{uses: typing, input: everyone, with: {{quasi: [AGI]}}}}
        """)


def _population(project, rows: int) -> None:
    lines = (project / "data" / "sdcmicro" / "CASCrefmicrodata.csv").read_text().splitlines()
    body = lines[1:] * 3
    (project / "data" / "sdcmicro" / "population.csv").write_text("\n".join([lines[0], *body[:rows]]) + "\n")


def test_a_metric_reads_a_referenced_table_which_runs_first_and_counts_in_the_fingerprint(cli, project):
    _use()
    _population(project, 3000)
    wf = _workflow(project)
    db = project / "s.duckdb"
    res = cli("run", wf, "--db", db, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["metrics"]["scores.test.population-size"] == 3000
    assert out["metrics"]["scores.test.population-size.ratio"] == 1080 / 3000
    # declared after the evaluate step, the population's typing still ran before it
    order = [s["step"] for s in out["steps"]]
    assert order.index("poptyped") < order.index("scores")
    assert json.loads(cli("run", wf, "--db", db, "--json").stdout)["steps"][-1]["status"] == "cached"
    _population(project, 2500)  # another population: the evaluate step runs again
    out = json.loads(cli("run", wf, "--db", db, "--json").stdout)
    assert out["steps"][-1]["status"] == "succeeded" and out["metrics"]["scores.test.population-size"] == 2500
    lineage = cli("lineage", "scores", "--db", db).output
    assert "poptyped [typing" in lineage and "population.csv" in lineage


def test_a_reference_to_nothing_or_to_an_unreferenced_table_is_refused(cli, project):
    _use()
    _population(project, 100)
    res = cli("plan", _workflow(project, population="popptyped"))
    assert res.exit_code == 2
    assert "step 'scores': a parameter names the table 'popptyped', which is neither a source nor a step " \
           "(did you mean 'poptyped'?)" in res.output
    res = cli("run", _workflow(project, extra=", peek: census"), "--db", project / "s.duckdb")
    assert res.exit_code == 2
    assert "table 'census' is not referenced by this step's parameters (of kind 'step'); it references " \
           "'poptyped'" in res.output


def test_step_kind_parameters_must_name_something():
    declared = [Param("population", "step")]
    assert validate_params(declared, {"population": "pop"}) == {"population": "pop"}
    for bad in ("", "  ", 3, None):
        with pytest.raises(ParamError, match="expected the name of a source or step"):
            validate_params(declared, {"population": bad})
