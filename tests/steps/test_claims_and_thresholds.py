"""What a step's output claims, and how an evaluate step's thresholds judge a value.

A table claims the models of the algorithm that made it, never those of its input: a
single-input algorithm gets its input without classes or claims, and a two-input algorithm
(which reads a partition, e.g. ``refine``) may not pass its input's claims on. Thresholds are
inclusive: ``min: x`` holds for a value equal to x, ``max: x`` likewise.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from anonflow.api import CLASS, Algorithm, Metric, Param

from tests.support.helpers import census_workflow
from tests.support.mockplugins import Provider, census_using, use


class CopiesClaims(Algorithm):
    """A two-input algorithm that publishes the original records under the partition's class
    ids and passes the partition's claims on, as a careless third party might: k = 5 held for
    the group means, not for the original values."""
    name = "test.copies-claims"
    version = "1"
    inputs = 2

    def run(self, table, params, ctx):
        original, given = ctx.inputs
        assert CLASS in given.columns, "a two-input algorithm reads the partition: it must get _class"
        return original.replace(data=original.data.append_column(CLASS, given.data.column(CLASS)),
                                claims=given.claims)


class ClaimsAtRunTime(Algorithm):
    """Puts all records in one class and claims, from run(), k = ``claim`` and a model no metric checks."""
    name = "test.claims-at-run-time"
    version = "1"
    params = (Param("claim", "int", default=2, min=1),)

    def run(self, table, params, ctx):
        data = table.data
        for q in table.typing.quasi:
            data = data.set_column(data.column_names.index(q), q, pa.array([0.0] * table.num_rows))
        data = data.append_column(CLASS, pa.array([0] * table.num_rows, pa.int64()))
        return table.replace(data=data, claims={"k-anonymity": {"k": params["claim"]}, "test-model": {"x": 1}})


class Echo(Metric):
    """Returns the value it is given: thresholds are judged on a known number."""
    name = "test.echo"
    version = "1"
    category = "utility"
    requires_original = False
    params = (Param("value", "float", default=0.0),)

    def compute(self, original, anonymized, params, ctx):
        return {"test.echo": params["value"]}


def test_a_claim_copied_from_an_input_is_checked_on_the_output(cli, project):
    use(Provider(algorithms=[CopiesClaims()]))
    wf = census_workflow(project, extra="""
        again:
          uses: test.copies-claims
          input: [typed, grouped]
        """)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 1, res.output
    assert "step 'again': algorithm 'test.copies-claims' claims k-anonymity {\"k\":5} but its output does not " \
           "satisfy it (k-anonymity = 1" in res.output
    assert "Traceback" not in res.output and not (project / "out").exists()


def test_claims_made_at_run_time_are_checked_and_uncheckable_ones_dropped(cli, project):
    wf = census_using(project, ClaimsAtRunTime(), "{claim: 1080}")
    res = cli("run", wf, "--db", project / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["metrics"]["scores.k-anonymity.k"] == 1080  # checked, and it holds: one class of 1080
    notes = " ".join(next(s for s in out["steps"] if s["step"] == "grouped")["notes"])
    assert "claim 'test-model' dropped: no installed privacy metric of that name can check it" in notes
    import duckdb

    con = duckdb.connect(str(project / "s.duckdb"), read_only=True)
    stored = con.execute("SELECT claims FROM af_tables WHERE created_step = 'grouped'").fetchall()
    con.close()
    assert [json.loads(c) for (c,) in stored] == [{"k-anonymity": {"k": 1080}}]  # the unchecked claim is not kept
    res = cli("run", wf, "--db", project / "s.duckdb", "--set", "grouped.claim=1081")
    assert res.exit_code == 1
    assert "claims k-anonymity {\"k\":1081} but its output does not satisfy it" in res.output


@pytest.mark.parametrize("bound, value, fails", [
    ({"min": 2.5}, 2.5, False), ({"min": 2.5}, 2.4, True), ({"min": 2.5}, 2.6, False),
    ({"max": 2.5}, 2.5, False), ({"max": 2.5}, 2.6, True), ({"max": 2.5}, 2.4, False),
    ({"min": 1, "max": 2}, 1.5, False), ({"min": 1, "max": 2}, 0.5, True), ({"min": 1, "max": 2}, 2.5, True),
])
def test_thresholds_are_inclusive(cli, project, bound, value, fails):
    use(Provider(metrics=[Echo()]))
    wf = census_workflow(project)
    text = wf.read_text().replace(
        "with: {metrics: [sse-il, k-anonymity]}",
        "with: {metrics: [{test.echo: {value: %r}}], thresholds: {test.echo: %s}}" % (value, json.dumps(bound)))
    wf.write_text(text)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == (1 if fails else 0), res.output
    if fails:
        side = "below the threshold min" if value < bound.get("min", -1e9) else "above the threshold max"
        assert f"test.echo = {value:g} is {side}" in res.output


def test_an_evaluation_of_unsuppressed_output_counts_no_suppressed_record(cli, project):
    """[original, anonymized] with every record published: nothing is suppressed, and the
    metrics compare all records."""
    wf = census_workflow(project)
    res = cli("run", wf, "--db", project / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    m = json.loads(res.output)["metrics"]
    assert m["scores.k-anonymity.classes"] == 216  # 1080 records, MDAV k = 5: groups of exactly 5
    assert m["scores.k-anonymity"] == 5


class Probe(Algorithm):
    """A single-input algorithm that records what it was given."""
    name = "test.probe"
    version = "1"
    seen: list = []

    def run(self, table, params, ctx):
        Probe.seen.append((list(table.columns), dict(table.claims)))
        return table.replace(data=table.data.append_column(CLASS, pa.array([0] * table.num_rows, pa.int64())))


class DropsRowIds(Algorithm):
    name = "test.drops-row-ids"
    version = "1"

    def run(self, table, params, ctx):
        data = table.data.drop_columns(["_row"]).append_column(CLASS, pa.array([0] * table.num_rows, pa.int64()))
        return table.replace(data=data)


def test_a_single_input_algorithm_gets_records_without_another_algorithms_classes_or_claims(cli, project):
    Probe.seen.clear()
    use(Provider(algorithms=[Probe()]))
    wf = census_workflow(project, extra="""
        again: {uses: test.probe, input: grouped}
        """)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 0, res.output
    columns, claims = Probe.seen[-1]
    assert CLASS not in columns and claims == {}


def test_an_algorithm_that_loses_the_row_ids_is_one_line(cli, project):
    wf = census_using(project, DropsRowIds(), "{}")
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 1
    assert "returned 1080 records for 1080 input records (or changed their _row ids)" in res.output
    assert "Traceback" not in res.output


class TwoInputProbe(Algorithm):
    """A two-input algorithm that records what it was given and republishes its second input."""
    name = "test.two-input-probe"
    version = "1"
    inputs = 2
    seen: list = []

    def run(self, table, params, ctx):
        TwoInputProbe.seen.append([(list(t.columns), dict(t.claims)) for t in ctx.inputs])
        return ctx.inputs[1]


def test_a_two_input_algorithm_gets_its_inputs_as_they_are(cli, project):
    """It reads a partition: an algorithm's output keeps its classes and claims, first or second."""
    TwoInputProbe.seen.clear()
    use(Provider(algorithms=[TwoInputProbe()]))
    wf = census_workflow(project, extra="""
        again: {uses: test.two-input-probe, input: [grouped, grouped]}
        """)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 0, res.output
    for columns, claims in TwoInputProbe.seen[-1]:
        assert CLASS in columns and claims == {"k-anonymity": {"k": 5}}


class NoClaims(Algorithm):
    """Classes of 2 records and no claim: only an evaluate step can hold it to k = 5."""
    name = "test.no-claims"
    version = "1"

    def run(self, table, params, ctx):
        import numpy as np

        return table.replace(data=table.data.append_column(CLASS, pa.array(np.arange(table.num_rows) // 2)))


def test_an_evaluate_step_enforces_a_privacy_check_that_does_not_hold(cli, project):
    use(Provider(algorithms=[NoClaims()]))
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("uses: mdav", "uses: test.no-claims").replace("{k: 5}", "{}")
                  .replace("with: {metrics: [sse-il, k-anonymity]}", "with: {metrics: [{k-anonymity: {k: 5}}]}"))
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 1, res.output
    assert "privacy check 'k-anonymity' does not hold" in res.output
    assert not (project / "out").exists()
    # enforce: false reports the same values without failing the run
    wf.write_text(wf.read_text().replace("{metrics: [{k-anonymity: {k: 5}}]}",
                                         "{metrics: [{k-anonymity: {k: 5}}], enforce: false}"))
    assert cli("run", wf, "--db", project / "s.duckdb").exit_code == 0


class Named(Metric):
    """Returns whatever it is told: names, verdicts, and what its check saw."""
    name = "test.named"
    version = "1"
    category = "utility"
    requires_original = False
    params = (Param("key", "str", default="test.named"), Param("holds", "float", default=1.0))
    checked: list = []

    def check(self, params, **tables):
        Named.checked.append(sorted(tables))

    def compute(self, original, anonymized, params, ctx):
        return {params["key"]: 1.0, "test.named.holds": params["holds"]}


@pytest.mark.parametrize("key", ["aaa", "zzz", "test.namedx"])
def test_a_metric_value_must_carry_the_metrics_name(cli, project, key):
    use(Provider(metrics=[Named()]))
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("with: {metrics: [sse-il, k-anonymity]}",
                                         "with: {metrics: [{test.named: {key: %s}}]}" % key))
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 1
    assert f"metric 'test.named' returned the value '{key}'; names must start with 'test.named'" in res.output


def test_only_privacy_checks_are_enforced_and_checks_see_both_tables(cli, project):
    Named.checked.clear()
    use(Provider(metrics=[Named()]))
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("with: {metrics: [sse-il, k-anonymity]}",
                                         "with: {metrics: [{test.named: {holds: 0.0}}]}"))
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 0, res.output  # a utility metric's .holds = 0 fails nothing
    assert Named.checked[-1] == ["anonymized", "original"]  # [original, anonymized] input: both checked
