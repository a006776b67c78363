"""Risk in the release (issue 17): report.html's "Disclosure risk" section -- the risk metrics
before and after, the records at risk, a histogram of record-level prosecutor risk -- and the
manifest's record of the risk figures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from anonflow.testing import make_context, typed_table
from anonflow_std.publishing.report import RISK_BINS, risk_histogram

# Ten records; classes over (age, zip): (30,1) x3, (40,2) x2 and five records alone.
# Record-level risk before: 3 records at 1/3, 2 at 1/2, 5 at 1.
CSV = """age,zip,income
30,1,10
30,1,11
30,1,12
40,2,13
40,2,14
50,3,15
60,4,16
70,5,17
80,6,18
90,7,19
"""

WORKFLOW = """
name: risk-report
seed: 3
sources:
  people: {path: people.csv}
steps:
  typed:
    uses: typing
    input: people
    with:
      quasi: {age: continuous, zip: continuous}
  grouped:
    uses: mdav
    input: typed
    with: {k: 5}
  risk:
    uses: evaluate
    input: [typed, grouped]
    with:
      risk_before: true
      metrics:
        reidentification-risk: {threshold: 0.2}
        sample-uniqueness: {}
  release:
    uses: publish
    input: grouped
    with: {publisher: release, path: release}
"""


def _run(cli, folder: Path, db: str = "s.duckdb", *args: str) -> tuple[dict, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "people.csv").write_text(CSV)
    wf = folder / "wf.yaml"
    wf.write_text(textwrap.dedent(WORKFLOW).lstrip())
    res = cli("run", wf, "--db", folder / db, *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.output), folder / "out" / "release"


def _histogram_rows(page: str) -> dict[str, list[int]]:
    section = page[page.index('<section id="risk">'):]
    section = section[:section.index("</section>")]
    table = section[section.index('<h3 id="risk-histogram">'):]
    out = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", tr)
        if cells:
            out[re.sub(r"<[^>]+>", "", cells[0]).split(" ")[0]] = [int(c) for c in cells[1:]]
    return out


def test_report_shows_risk_before_and_after_with_a_hand_checked_histogram(cli, tmp_path):
    out, rel = _run(cli, tmp_path / "a")
    m = out["metrics"]
    # the metrics themselves, by hand: MDAV with k = 5 on 10 records makes two classes of 5
    assert m["risk.reidentification-risk.before"] == 1.0 and m["risk.reidentification-risk"] == 0.2
    assert m["risk.reidentification-risk.before.prosecutor.records_at_risk"] == 1.0
    assert m["risk.reidentification-risk.prosecutor.records_at_risk"] == 0.0  # 1/5 is not > 0.2
    assert m["risk.sample-uniqueness.before"] == 0.5 and m["risk.sample-uniqueness"] == 0.0

    page = (rel / "report.html").read_text()
    assert '<section id="risk"><h2>Disclosure risk</h2>' in page and '<a href="#risk">Risk</a>' in page
    assert page.index('<section id="risk">') < page.index('<section id="classes">')
    risk = page[page.index('<section id="risk">'):]
    risk = risk[:risk.index("</section>")]
    # before and after side by side: headline and a detail
    assert re.search(r"<code>reidentification-risk</code></td><td class=\"num\">1</td><td class=\"num\">0.2</td>",
                     risk)
    assert re.search(r"<code>sample-uniqueness</code></td><td class=\"num\">0.5</td><td class=\"num\">0</td>", risk)
    assert "<td><code>risk</code> on <code>grouped</code></td>" in risk  # the table the values were measured on
    # records at risk, as shares and as numbers of records
    assert "Records at risk" in risk
    assert "1 (10 of 10 records)" in risk and "0 (0 of 10 records)" in risk
    assert "sample-unique records" in risk
    # the histogram: fixed bins, records per bin, original (typed) vs published (grouped)
    assert [b[0] for b in RISK_BINS] == ["(0, 1/20]", "(1/20, 1/10]", "(1/10, 1/5]", "(1/5, 1/3]", "(1/3, 1/2]",
                                         "(1/2, 1]"]
    rows = _histogram_rows(page)
    assert rows["original"] == [0, 0, 0, 3, 2, 5, 10]
    assert rows["published"] == [0, 0, 10, 0, 0, 0, 10]
    assert risk.count("<svg") == 1 and "Record-level re-identification risk" in risk


def test_manifest_records_the_risk_figures_as_metric_values(cli, tmp_path):
    out, rel = _run(cli, tmp_path / "a")
    manifest = json.loads((rel / "manifest.json").read_text())
    assert manifest["schema_version"] == 1 and "risk" not in manifest  # the schema is unchanged
    recorded = {f"{e['step']}.{e['name']}": e["value"] for e in manifest["metrics"]}
    risk = {k: v for k, v in out["metrics"].items() if k.startswith(("risk.reidentification-risk",
                                                                     "risk.sample-uniqueness"))}
    assert risk and all(recorded[k] == v for k, v in risk.items())
    assert recorded["risk.reidentification-risk.before.prosecutor.records_at_risk"] == 1.0
    res = cli("verify", rel, "--json")
    assert res.exit_code == 0, res.output


def test_risk_report_is_deterministic(cli, tmp_path):
    _, a = _run(cli, tmp_path / "a")
    _, b = _run(cli, tmp_path / "b", "other.duckdb", "--no-cache")
    for name in ("report.html", "manifest.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_no_risk_section_without_a_risk_metric(cli, tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "people.csv").write_text(CSV)
    text = textwrap.dedent(WORKFLOW).lstrip().replace(
        "      risk_before: true\n      metrics:\n        reidentification-risk: {threshold: 0.2}\n"
        "        sample-uniqueness: {}\n", "      metrics: [k-anonymity]\n")
    (folder / "wf.yaml").write_text(text)
    res = cli("run", folder / "wf.yaml", "--db", folder / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    page = (folder / "out" / "release" / "report.html").read_text()
    assert '<section id="risk">' not in page and 'href="#risk"' not in page


def test_histogram_counts_suppressed_cells_as_wildcards():
    # docs/algorithms.md, "Suppressed cells as wildcards": compatible counts 5, 5, 5, 3, 6, 6
    t = typed_table({"sex": ["M", "M", "M", "F", None, None], "age": [30, 30, None, 30, 30, None],
                     "zip": ["A", "A", "A", "B", None, None]}, quasi={q: "nominal" for q in ("sex", "age", "zip")})
    h = risk_histogram(t, ["sex", "age", "zip"], make_context().sql)
    assert h["counts"] == [0, 0, 5, 1, 0, 0] and h["records"] == 6 and h["with_null"] == 3 and h["note"] is None
    # without nulls the bins follow class sizes exactly (a class of 3 is risk 1/3, in (1/5, 1/3])
    t = typed_table({"a": [1] * 20 + [2] * 10 + [3] * 5 + [4] * 3 + [5] * 2 + [6]}, quasi={"a": "nominal"})
    assert risk_histogram(t, ["a"], make_context().sql)["counts"] == [20, 10, 5, 3, 2, 1]


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="Chromium is not installed")
def test_risk_section_renders_in_headless_chromium_without_console_errors(cli, tmp_path):
    _, rel = _run(cli, tmp_path / "a")
    cmd = ["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", "--dump-dom",
           (rel / "report.html").resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '<section id="risk">' in proc.stdout and "Record-level re-identification risk" in proc.stdout
    console = [line for line in proc.stderr.splitlines() if "Uncaught" in line or "ERROR:CONSOLE" in line
               or "Content Security Policy" in line]
    assert console == []
