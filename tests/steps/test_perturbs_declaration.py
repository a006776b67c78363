"""What a perturbative algorithm declares it changed (``Algorithm.perturbs``), and where that
declaration goes: checked by the engine (columns of the input, a known kind, JSON data),
recorded in the step's summary, printed by ``anonflow runs``, carried in a release's step
records, listed for the released table's whole lineage in the report and by ``anonflow verify``.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pytest

from anonflow.api import CLASS, Algorithm, Param

from tests.support.helpers import census_workflow
from tests.support.mockplugins import Provider, use


class Jitter(Algorithm):
    """Adds seeded noise to one column; every record its own class; declares ``declared``."""

    name = "test.jitter"
    version = "1"
    params = (Param("column", "str", default="AGI"), Param("sd", "float", default=0.1, min=0.0))
    per_fragment = False

    def __init__(self, declared=None):
        self.declared = declared

    def perturbs(self, params, table=None):
        if self.declared is not None:
            return self.declared
        return {params["column"]: {"kind": "noise", "method": "test-additive", "relative_sd": params["sd"]}}

    def run(self, table, params, ctx):
        data = table.data
        col = params["column"]
        x = data.column(col).to_numpy(zero_copy_only=False).astype(np.float64)
        noised = x + ctx.rng.normal(0.0, params["sd"] * x.std(), x.size)
        data = data.set_column(data.column_names.index(col), col, pa.array(noised))
        return table.replace(data=data.append_column(CLASS, pa.array(np.arange(table.num_rows), pa.int64())))


CHAIN = """
    noised:
      uses: test.jitter
      input: typed
      with: {column: AGI, sd: 0.25}
    aside:
      uses: test.jitter
      input: typed
      with: {column: FICA}
    regrouped:
      uses: mdav
      input: noised
      with: {k: 5}
    release:
      uses: publish
      input: regrouped
      with: {publisher: release, path: release}
    """


def _run(cli, project, algo, extra, *args):
    use(Provider(algorithms=[algo]))
    wf = census_workflow(project, extra=extra)
    return cli("run", wf, "--db", project / "s.duckdb", *args)


def test_the_declaration_is_recorded_and_runs_prints_it(cli, project):
    res = _run(cli, project, Jitter(), """
        noised: {uses: test.jitter, input: typed, with: {column: AGI, sd: 0.25}}
        """, "--json")
    assert res.exit_code == 0, res.output
    steps = {s["step"]: s for s in json.loads(res.output)["steps"]}
    assert steps["noised"]["perturbs"] == {"AGI": {"kind": "noise", "method": "test-additive", "relative_sd": 0.25}}
    assert "perturbs" not in steps["grouped"]
    run_id = json.loads(res.output)["run_id"]
    shown = cli("runs", run_id, "--db", project / "s.duckdb")
    assert shown.exit_code == 0, shown.output
    assert 'perturbs AGI: {"kind": "noise", "method": "test-additive", "relative_sd": 0.25}' in shown.output
    # an algorithm that changes nothing declares nothing: no such line under mdav
    assert shown.output.count("perturbs ") == 1


@pytest.mark.parametrize(("declared", "said"), [
    ({"NOPE": {"kind": "noise"}}, "perturbs() names 'NOPE', which is not a column of its input"),
    ({"AGI": {"kind": "blur"}}, "perturbs() must give column 'AGI' a mapping with 'kind' one of randomize, noise, "
                                "swap, recode; got {'kind': 'blur'}"),
    ({"AGI": "noise"}, "perturbs() must give column 'AGI' a mapping with 'kind'"),
    ({"AGI": {"kind": "noise", "sd": float("nan")}}, "perturbs() for column 'AGI' is not JSON data"),
    ({"AGI": {"kind": "noise", "sd": object()}}, "perturbs() for column 'AGI' is not JSON data"),
    (["AGI"], "perturbs() returned list, expected a mapping of column -> declaration"),
    ({"_row": {"kind": "noise"}}, "perturbs() names '_row', which is not a column of its input"),
])
def test_a_malformed_declaration_fails_the_step_in_one_line(cli, project, declared, said):
    res = _run(cli, project, Jitter(declared), """
        noised: {uses: test.jitter, input: typed}
        """)
    assert res.exit_code != 0
    assert "step 'noised'" in res.output and said in res.output, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_a_release_states_every_perturbation_of_its_lineage_and_only_those(cli, project):
    res = _run(cli, project, Jitter(), CHAIN, "--json")
    assert res.exit_code == 0, res.output
    release = project / "out" / "release"
    manifest = json.loads((release / "manifest.json").read_text())
    steps = {s["step"]: s for s in manifest["steps"]}
    assert steps["noised"]["perturbs"] == {"AGI": {"kind": "noise", "method": "test-additive", "relative_sd": 0.25}}
    assert steps["aside"]["perturbs"] == {"FICA": {"kind": "noise", "method": "test-additive", "relative_sd": 0.1}}
    assert "perturbs" not in steps["regrouped"] and "perturbs" not in steps["grouped"]

    html = (release / "report.html").read_text()
    assert '<p id="perturbations">' in html
    assert "<code>noised</code> (test.jitter 1): AGI: noise (method test-additive, relative_sd 0.25)" in html
    assert "<code>aside</code>" not in html.split('<p id="perturbations">')[1].split("</ul>")[0]

    checked = cli("verify", release, "--json")
    assert checked.exit_code == 0, checked.output
    findings = [i for i in json.loads(checked.output)["findings"] if i["what"].startswith("perturbation")]
    assert findings == [{"ok": True, "what": "perturbation by step noised", "show": True,
                         "detail": "test.jitter 1 changed AGI: noise (method test-additive, relative_sd 0.25) (its "
                                   "declared guarantee; not re-checked on the files)"}]

    # apply cannot redo a perturbation on new data (it is not a preparation step): one line
    refused = cli("apply", release, project / "data" / "sdcmicro" / "CASCrefmicrodata.csv", "-o", project / "batch")
    assert refused.exit_code == 2, refused.output
    assert "made by step 'noised' (test.jitter), which is not a preparation step" in refused.output
    assert len(refused.output.strip().splitlines()) == 1 and not (project / "batch").exists()

    # the seeded perturbation is reproduced byte for byte by a re-run
    again = cli("verify", release, "--rerun", "--db", project / "rerun.duckdb", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["rerun"]["verdict"] == "identical"


def test_the_python_api_reports_the_declaration(project):
    import anonflow

    use(Provider(algorithms=[Jitter()]))
    wf = anonflow.load(census_workflow(project, extra="""
        noised: {uses: test.jitter, input: typed, with: {column: FICA, sd: 0.5}}
        """))
    with wf.run() as result:
        steps = {s["step"]: s for s in result.steps}
    assert steps["noised"]["perturbs"] == {"FICA": {"kind": "noise", "method": "test-additive", "relative_sd": 0.5}}


def test_a_release_without_perturbation_says_nothing_of_it(cli, project):
    use(Provider())
    wf = census_workflow(project, extra="""
        release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
        """)
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 0, res.output
    release = project / "out" / "release"
    assert "perturbation" not in (release / "report.html").read_text()
    assert all("perturbs" not in s for s in json.loads((release / "manifest.json").read_text())["steps"])
    checked = cli("verify", release, "--json")
    assert not [i for i in json.loads(checked.output)["findings"] if i["what"].startswith("perturbation")]


def test_a_forged_declaration_cannot_drive_the_terminal_through_verify(cli, project):
    from anonflow_std.publishing.manifest import integrity

    res = _run(cli, project, Jitter(), CHAIN, "--json")
    assert res.exit_code == 0, res.output
    path = project / "out" / "release" / "manifest.json"
    m = json.loads(path.read_text())
    step = next(s for s in m["steps"] if s["step"] == "noised")
    step["perturbs"]["AGI"]["method"] = "\x1b[2J\x1b]0;pwned\x07"  # clear the screen, retitle the window
    m["integrity"] = integrity(m)  # a forger recomputes the digests
    path.write_text(json.dumps(m))
    shown = cli("verify", project / "out" / "release")
    assert "\x1b" not in shown.output and "\x07" not in shown.output
    assert "method \\x1b[2J\\x1b]0;pwned\\x07" in shown.output, shown.output



def test_the_report_s_loss_table_covers_each_perturbed_column_beside_the_keys(cli, project):
    use(Provider(algorithms=[Jitter()]))
    wf = project / "loss.yaml"
    wf.write_text("""
name: census-loss
seed: 7
sources: {census: {path: data/sdcmicro/CASCrefmicrodata.csv}}
steps:
  typed: {uses: typing, input: census, with: {quasi: [AFNLWGT, AGI], insensitive: [FICA, TAXINC]}}
  noised: {uses: test.jitter, input: typed, with: {column: FICA, sd: 0.5}}
  grouped: {uses: mdav, input: noised, with: {k: 5}}
  release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
""")
    res = cli("run", wf, "--db", project / "s.duckdb")
    assert res.exit_code == 0, res.output
    html = (project / "out" / "release" / "report.html").read_text()
    loss = html.split('<section id="loss">')[1].split("</section>")[0]
    rows = [r.split("</td>")[0].split("<code>")[1].split("</code>")[0] for r in loss.split("<tr>")[2:]]
    # the keys, then the column the noise changed (insensitive); TAXINC, untouched, is not listed
    assert rows == ["AFNLWGT", "AGI", "FICA"]
    fica = loss.split("<code>FICA</code></td>")[1].split("</tr>")[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", fica)
    assert cells[0] == "insensitive" and cells[1] == "&ndash;"  # no ambiguity for a value changed at random
    assert float(cells[2]) == 1.0 and 0 < float(cells[3]) < 1 and float(cells[4]) > 0  # all changed; SSE share; IL
