"""``dp-aggregates``: marginals over declared domains, bounded sums and means, noised by OpenDP.

The exact figures (the seams ``exact_marginal`` and ``exact_sum``, never published) are checked
against pandas; OpenDP's measurements against the stated sensitivities (the scale follows
them) and the noise's spread against the stated scale; a workflow run through the CLI releases
the aggregates beside a release that ``verify --rerun`` passes without comparing the noise.
"""

from __future__ import annotations

import builtins
import json
import math
import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("opendp.prelude")

from anonflow.api import InputError, ParamError, validate_params  # noqa: E402
from anonflow.testing import make_context, typed_table  # noqa: E402

from anonflow_std.dp import aggregates as agg  # noqa: E402
from anonflow_std.dp.aggregates import DpAggregates  # noqa: E402
from anonflow_std.publishing.release import Release  # noqa: E402
from tests.support.helpers import DATA  # noqa: E402

PUB = DpAggregates()


def params(**given):
    return validate_params(PUB.params, {"path": "agg", **given})


def small():
    """Six records: sex, race (nominal, no declared categories) and age."""
    return typed_table({"sex": ["M", "F", "M", "M", "F", "M"], "race": ["W", "B", "W", "A", "W", "W"],
                        "age": [30, 41, 200, -5, 50, 60]}, quasi={"sex": "nominal", "race": "nominal"})


def published(tmp_path, table, **given):
    """Publish into tmp_path; returns ({file name: DataFrame}, the accounting, the context)."""
    ctx = make_context(output_dir=tmp_path)
    outs = PUB.publish(table, params(**given), ctx)
    frames = {Path(o.path).name: pd.read_csv(o.path, keep_default_na=False) for o in outs if o.path.endswith(".csv")}
    return frames, json.loads((tmp_path / "agg" / "accounting.json").read_text()), ctx


# -- OpenDP's measurements get the stated sensitivities ---------------------------------------------

def test_the_scale_opendp_derives_follows_the_sensitivity_and_the_share():
    dp = agg.opendp()
    # discrete Laplace: map(d_in) = d_in / scale, so scale = sensitivity / epsilon: 1 / 0.5 = 2, 2 / 0.5 = 4
    m1, s1 = agg.measurement(dp, "laplace", 1, 0.5, vector=True)
    m2, s2 = agg.measurement(dp, "laplace", 2, 0.5, vector=True)
    assert s1 == pytest.approx(2.0) and s2 == pytest.approx(4.0)
    assert m1.map(1) <= 0.5 and m2.map(2) <= 0.5 and m1.map(2) == pytest.approx(1.0)
    # discrete Gaussian under zCDP: rho = d_in^2 / (2 scale^2), so scale = d_in / sqrt(2 rho): 3 / sqrt(0.5)
    g, sg = agg.measurement(dp, "gaussian", 3, 0.25, vector=False)
    assert sg == pytest.approx(3 / math.sqrt(0.5)) and g.map(3) <= 0.25


def test_publish_calls_opendp_with_the_stated_sensitivities(tmp_path, monkeypatch):
    calls = []
    real = agg.measurement

    def spy(dp, mechanism, sensitivity, share, vector):
        calls.append((sensitivity, share, vector))
        return real(dp, mechanism, sensitivity, share, vector)

    monkeypatch.setattr(agg, "measurement", spy)
    given = dict(marginals=[["sex"]], sums=["age"], means=["age"], bounds={"age": [-10, 100]},
                 domain={"sex": ["F", "M"]}, epsilon=1.2)
    _, acc, _ = published(tmp_path, small(), **given)
    # equal split: 1.2 / 3 = 0.4 per query; a mean's 0.4 is half its sum's, half its count's
    assert calls == [(1, pytest.approx(0.4), True), (100, pytest.approx(0.4), False),
                     (100, pytest.approx(0.2), False), (1, pytest.approx(0.2), False)]
    assert [q["scale"] for q in acc["queries"]] == pytest.approx([1 / 0.4, 100 / 0.4, 100 / 0.2])
    # the sensitivity perturbed: wider bounds, max(|lo|, |hi|) = 200, twice the scale
    calls.clear()
    _, acc2, _ = published(tmp_path / "b", small(), **{**given, "bounds": {"age": [0, 200]}})
    assert calls[1] == (200, pytest.approx(0.4), False)
    assert acc2["queries"][1]["scale"] == pytest.approx(2 * acc["queries"][1]["scale"])
    # a float column's grid: the sensitivity counts grid units (100 / 0.5 = 200)
    calls.clear()
    published(tmp_path / "c", small(), **{**given, "resolution": {"age": 0.5}})
    assert calls[1][0] == 200


def test_privacy_loss_states_the_whole_budget_in_the_mechanisms_measure():
    assert PUB.privacy_loss(params(marginals=["sex"], sums=["age"], bounds={"age": [0, 1]}, epsilon=0.7)) == {
        "measure": "pure", "epsilon": 0.7, "mechanism": "discrete Laplace", "queries": 2}
    assert PUB.privacy_loss(params(marginals=["sex"], mechanism="gaussian", rho=0.3))["rho"] == 0.3
    assert PUB.privacy_loss(params(marginals=["sex"], mechanism="gaussian", rho=0.3))["measure"] == "zcdp"


# -- every cell of the domain, the exact counts ---------------------------------------------------

def test_every_cell_of_the_declared_domain_is_released_zero_cells_included(tmp_path):
    frames, acc, ctx = published(tmp_path, small(), marginals=[["sex", "race"]], epsilon=1.0,
                                 domain={"sex": ["F", "M", "X"], "race": ["A", "B", "W", "Z"]})
    m = frames["marginal_sex_x_race.csv"]
    assert list(m.columns) == ["sex", "race", "count"]
    # 3 x 4 cells in domain order, the last column fastest; X and Z never occur in the data
    assert list(zip(m["sex"], m["race"])) == [(s, r) for s in "FMX" for r in "ABWZ"]
    assert acc["queries"][0]["cells"] == 12
    rec = ctx.fitted["dp_release"]["marginal_sex_x_race.csv"]
    assert rec["rows"] == 12 and rec["noised"] == ["count"] and rec["columns"] == ["sex", "race", "count"]


def test_exact_counts_equal_pandas_crosstab_on_adult(adult_full):
    df = adult_full.select(["sex", "race", "education"]).to_pandas()
    table = typed_table({c: df[c].tolist() for c in df.columns}, quasi={c: "nominal" for c in df.columns})
    domains = [["Female", "Male", "Other"], sorted(set(df["race"])) + ["Unknown"]]
    counts = agg.exact_marginal(table, ("sex", "race"), domains, make_context())
    expected = pd.crosstab(df["sex"], df["race"]).reindex(index=domains[0], columns=domains[1], fill_value=0)
    assert counts.tolist() == expected.to_numpy().ravel().tolist()
    assert counts.sum() == len(df) and counts.reshape(3, -1)[2].sum() == 0


def test_a_hierarchy_file_declares_a_domain_and_a_value_outside_it_fails(tmp_path):
    from anonflow.api import Hierarchy

    t = small()
    t.hierarchies["race"] = Hierarchy.from_levels("race", [["A", "B", "W", "Q"], ["*"] * 4], builder="arx")
    assert agg.domain_of(t, "race", params(marginals=["race"], epsilon=1)) == ["A", "B", "Q", "W"]
    t.hierarchies["race"] = Hierarchy.from_levels("race", [["A", "B", "W"], ["*"] * 3], builder="mask")
    with pytest.raises(InputError, match="no data-independent domain"):
        agg.domain_of(t, "race", params(marginals=["race"], epsilon=1))
    with pytest.raises(InputError, match=r"1 record\(s\) hold a value of 'race' outside its declared domain"):
        published(tmp_path, small(), marginals=["race"], epsilon=1, domain={"race": ["B", "W"], "sex": ["F", "M"]})


# -- the noise --------------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism, budget, scale", [("laplace", {"epsilon": 0.5}, 2.0),
                                                        ("gaussian", {"rho": 0.02}, 5.0)])
def test_the_noise_spread_matches_the_stated_scale(tmp_path, mechanism, budget, scale):
    n = 20_000
    table = typed_table({"c": ["0", "1", "1"]}, quasi={"c": "nominal"})
    frames, acc, _ = published(tmp_path, table, marginals=["c"], mechanism=mechanism,
                               domain={"c": list(map(str, range(n)))}, **budget)
    assert acc["queries"][0]["scale"] == pytest.approx(scale)
    exact = np.zeros(n)
    exact[:2] = [1, 2]
    noise = frames["marginal_c.csv"]["count"].to_numpy() - exact
    if mechanism == "laplace":  # discrete Laplace, P(x) ~ exp(-|x| / s): var = 2 e^(-1/s) / (1 - e^(-1/s))^2
        q = math.exp(-1 / scale)
        sd, kurtosis = math.sqrt(2 * q / (1 - q) ** 2), 6.0
    else:  # discrete Gaussian with sigma 5: its variance is sigma^2 to within 1e-100
        sd, kurtosis = scale, 3.0
    se_sd = sd * math.sqrt((kurtosis - 1) / (4 * n))  # the sample sd's standard error
    assert abs(noise.std() - sd) < 4 * se_sd
    assert abs(noise.mean()) < 4 * sd / math.sqrt(n)


def test_bounds_clamp_each_value_before_the_sum(tmp_path):
    ctx = make_context()
    # 30 + 41 + 100 (200 clamped) + 0 (-5 clamped) + 50 + 60 = 281, 6 values, sensitivity max(|0|, |100|)
    assert agg.exact_sum(small(), "age", (0.0, 100.0), 1.0, ctx) == (281, 6, 100)
    # grid 0.5 in [-10, 45]: 30 -> 60, 41 -> 82, -5 -> -10 units, and 200, 50, 60 clamped to 45 -> 90 each:
    # 60 + 82 - 10 + 3 * 90 = 402 units, sensitivity max(|-10|, |45|) / 0.5 = 90
    assert agg.exact_sum(small(), "age", (-10.0, 45.0), 0.5, ctx) == (402, 6, 90)
    frames, _, _ = published(tmp_path, small(), means=["age"], bounds={"age": [0, 100]}, epsilon=1)
    row = frames["numeric.csv"].iloc[0]
    assert (row["column"], row["statistic"], row["lower"], row["upper"]) == ("age", "mean", 0, 100)
    assert 0 <= row["value"] <= 100  # a mean is brought back into its bounds (post-processing)


# -- bad parameters, one line ----------------------------------------------------------------------

@pytest.mark.parametrize("given, message", [
    ({"marginals": ["sex"], "epsilon": 0}, "expected a number > 0"),
    ({"marginals": ["sex"], "epsilon": -1}, "expected a number > 0"),
    ({"marginals": ["nope"], "epsilon": 1}, "unknown column 'nope'"),
    ({"sums": ["age"], "epsilon": 1}, "column 'age' is summed or averaged but has no bounds"),
    ({"means": ["age"], "bounds": {"age": [5, 1]}, "epsilon": 1}, "bounds of 'age' must be"),
    ({"marginals": ["sex"], "epsilon": 1}, "column 'sex' has no data-independent domain"),
    ({"marginals": ["sex"], "mechanism": "gaussian", "epsilon": 1}, "mechanism gaussian needs 'rho'"),
    ({"epsilon": 1}, "nothing to release"),
    ({"sums": ["sex"], "bounds": {"sex": [0, 1]}, "epsilon": 1}, "not numbers"),
])
def test_bad_parameters_fail_in_one_line(given, message):
    with pytest.raises((InputError, ParamError)) as err:
        PUB.check(params(**given), small())
    assert message in str(err.value) and "\n" not in str(err.value)


def test_without_opendp_the_step_names_the_extra(monkeypatch, tmp_path):
    real = builtins.__import__

    def no_opendp(name, *args, **kwargs):
        if name.startswith("opendp"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_opendp)
    with pytest.raises(InputError, match=r"pip install 'anonflow\[dp\]'"):
        published(tmp_path, small(), marginals=["sex"], domain={"sex": ["F", "M"]}, epsilon=1)


# -- the release records the loss; a workflow run and verify --rerun ----------------------------------

def test_a_release_records_a_steps_privacy_loss_from_its_summary():
    step = {"step": "x", "kind": "algorithm", "uses": "acme.dp", "plugin_version": "1", "params": {}, "seed": 1,
            "fingerprint": "f", "inputs": [], "output_hash": "h", "rows": 3, "position": 2,
            "summary": {"privacy_loss": {"measure": "pure", "epsilon": 1.0}}}
    rec = Release._step(step, SimpleNamespace(registry=None, outputs=[]), Path("."), Path("."), {})
    assert rec["privacy_loss"] == {"measure": "pure", "epsilon": 1.0} and "reproducible" not in rec
    del step["summary"]
    assert "privacy_loss" not in Release._step(step, SimpleNamespace(registry=None, outputs=[]), Path("."),
                                               Path("."), {})


WORKFLOW = """\
name: dp-test
seed: 3
sources:
  adult: {path: adult.csv, delimiter: ";"}
steps:
  typed:
    uses: typing
    input: adult
    with:
      quasi: {sex: nominal, age: continuous, race: nominal}
      sensitive: [salary-class]
  hier:
    uses: hierarchy
    input: typed
    with:
      sex: {arx: adult_hierarchy_sex.csv}
      race: {arx: adult_hierarchy_race.csv}
  noisy:
    uses: publish
    input: hier
    with:
      publisher: dp-aggregates
      path: aggregates
      marginals: [[sex], [sex, race]]
      sums: [age]
      means: [age]
      bounds: {age: [17, 90]}
      epsilon: 1.0
  release:
    uses: publish
    input: hier
    with: {publisher: release, path: release}
"""


def test_a_workflow_releases_the_aggregates_and_verify_rerun_compares_all_but_the_noise(cli, tmp_path):
    lines = (DATA / "arx" / "adult.csv").read_text().splitlines()[:1001]
    (tmp_path / "adult.csv").write_text("\n".join(lines) + "\n")
    for c in ("sex", "race"):
        shutil.copy(DATA / "arx" / f"adult_hierarchy_{c}.csv", tmp_path)
    (tmp_path / "wf.yaml").write_text(textwrap.dedent(WORKFLOW))
    res = cli("run", tmp_path / "wf.yaml", "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    out = tmp_path / "out"
    sexrace = pd.read_csv(out / "aggregates" / "marginal_sex_x_race.csv")
    assert len(sexrace) == 2 * 5  # ARX's hierarchies: 2 sexes x 5 races, every cell
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    noisy = next(s for s in manifest["steps"] if s["step"] == "noisy")
    assert noisy["reproducible"] is False
    assert noisy["fitted"]["dp_release"]["marginal_sex_x_race.csv"]["rows"] == 10
    if "privacy_loss" in noisy:  # recorded by the engine's ledger (the step summary's privacy_loss)
        assert noisy["privacy_loss"]["epsilon"] == 1.0
    page = (out / "release" / "report.html").read_text()
    assert "Differential privacy." in page and "ε = 1 (pure ε-DP)" in page and "sensitivity 73" not in page
    assert "sum of age, bounds [17.0,90.0] (values clamped), grid 1, sensitivity 90" in page

    res = cli("verify", out / "release", "--rerun", "--json")
    result = json.loads(res.output)
    assert res.exit_code == 0 and result["ok"], [i for i in result["findings"] if not i["ok"]]
    assert result["rerun"]["verdict"] == "identical-except-noise"
    said = next(i["detail"] for i in result["findings"] if i["what"] == "step noisy")
    assert "were not compared" in said and "OpenDP's cryptographically safe sampler" in said
    assert "../aggregates/marginal_sex_x_race.csv" in said and "1 other file(s) byte for byte" in said
    plain = cli("verify", out / "release", "--rerun")
    assert plain.exit_code == 0 and "byte for byte except the values of the differentially private noise" in plain.output

    # the loss the engine records in the step summary is stated by verify (a manifest written so here)
    from anonflow_std.publishing.manifest import integrity, manifest_bytes

    noisy["privacy_loss"] = {"measure": "pure", "epsilon": 1.0, "mechanism": "discrete Laplace", "queries": 4}
    manifest.pop("integrity")
    manifest["integrity"] = integrity(manifest)
    (out / "release" / "manifest.json").write_bytes(manifest_bytes(manifest))
    res = cli("verify", out / "release", "--json")
    result = json.loads(res.output)
    assert res.exit_code == 0, [i for i in result["findings"] if not i["ok"]]
    said = next(i["detail"] for i in result["findings"] if i["what"] == "privacy loss of step noisy")
    assert said.startswith("dp-aggregates") and "spent ε = 1 (pure ε-DP); mechanism discrete Laplace" in said
    assert "not reproducible" in said
