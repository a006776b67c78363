"""Perturbations on a partitioned table: the seeded methods read whole-table statistics
(frequencies, covariances, ranks), so they run once on the whole table, in record order, and
publish the same bytes as on the table unpartitioned, on any executor; a recoding runs per
fragment on the executor and gives the same bytes too."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.helpers import DATA

STEPS = {
    "pramed": {"uses": "pram", "with": {"columns": ["occupation", "workclass"], "strata": ["sex"]}},
    "noised": {"uses": "noise", "with": {"method": "correlated", "noise": 20}},
    "swapped": {"uses": "rank-swap", "with": {"p": 5}},
    "coded": {"uses": "top-bottom-coding", "with": {"columns": {"capital-gain": {"top": 20000}}}},
}


def workflow(partitioned: bool) -> dict:
    steps = {
        "sample": {"uses": "sample", "input": "adult", "with": {"n": 1500}},
        "typed": {"uses": "typing", "input": "sample", "with": {
            "quasi": {"age": "continuous", "hours-per-week": "continuous", "capital-gain": "continuous",
                      "sex": "nominal"},
            "insensitive": {"occupation": "nominal", "workclass": "nominal"}, "others": "drop"}},
    }
    base = "typed"
    if partitioned:
        steps["parts"] = {"uses": "partition", "input": "typed", "with": {"max_records": 200}}
        base = "parts"
    for name, step in STEPS.items():
        steps[name] = {**step, "input": base}
        steps[f"{name}-out"] = {"uses": "publish", "input": name,
                                "with": {"publisher": "csv", "path": f"{name}.csv"}}
    return {"name": "perturb-parts", "seed": 11, "sources": {"adult": {"path": str(DATA / "adult" / "adult_full.csv")}},
            "steps": steps}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.support.helpers import cli_invoker

    cli, root = cli_invoker(), tmp_path_factory.mktemp("perturb-parts")
    out = {}
    for tag, partitioned, args in (("plain", False, ()), ("parts", True, ()),
                                   ("procs", True, ("--executor", "processes:2"))):
        wf = root / f"{tag}.yaml"
        wf.write_text(yaml.safe_dump(workflow(partitioned), sort_keys=False))
        res = cli("run", wf, "--db", root / f"{tag}.duckdb", "--out-dir", root / tag, "--json", *args)
        assert res.exit_code == 0, res.output
        out[tag] = {name: (root / tag / f"{name}.csv").read_bytes() for name in STEPS}, json.loads(res.output)
    return out


@pytest.mark.parametrize("tag", ["parts", "procs"])
@pytest.mark.parametrize("step", list(STEPS))
def test_a_partitioned_run_publishes_the_unpartitioned_bytes(runs, tag, step):
    assert runs[tag][0][step] == runs["plain"][0][step]


def test_the_recoding_ran_per_fragment_on_the_executor_and_the_others_once(runs):
    steps = {s["step"]: s for s in runs["procs"][1]["steps"]}
    assert any("on processes:2" in n for n in steps["coded"]["notes"]), steps["coded"]["notes"]
    for name in ("pramed", "noised", "swapped"):
        assert not any("processes:2" in n for n in steps[name]["notes"]), steps[name]["notes"]
        assert steps[name]["perturbs"]
