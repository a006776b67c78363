"""Releases: byte-identical, tamper-evident, crash-safe, and each shipped workflow re-verified.

The ``release`` publisher writes a directory (published Parquet + CSV, ``report.html``,
``manifest.json``); ``anonflow verify`` re-hashes it, re-runs its privacy checks on the
published files alone and, with ``--rerun``, re-runs the recorded workflow and compares.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from anonflow.store import Store

from tests.plugins.publishing.made_release import copy_release, make_release
from tests.support.helpers import DATA, WORKFLOWS, census_workflow

RELEASE = """
    release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
"""
RELEASE_FILES = {"published.parquet", "published.csv", "report.html", "manifest.json"}


def run_json(cli, *args) -> dict:
    res = cli("run", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def verify(cli, release: Path, *args) -> tuple[int, dict]:
    res = cli("verify", release, *args, "--json")
    return res.exit_code, json.loads(res.output)


def failures(result: dict) -> list[str]:
    return [f"{i['what']}: {i['detail']}" for i in result["findings"] if not i["ok"]]


def released(cli, project: Path, *args: str) -> tuple[dict, Path]:
    wf = census_workflow(project, extra=RELEASE)
    out = run_json(cli, wf, "--db", project / "s.duckdb", *args)
    return out, project / "out" / "release"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """The project folder ``released`` leaves (no --out-dir), made once per module: a test that
    only verifies or edits the release takes ``copy_release(made, project)``, the same bytes in
    its own project folder; a test that runs the workflow again on the store makes its own."""
    return make_release(tmp_path_factory, RELEASE, out_dir=False)


# -- determinism -----------------------------------------------------------------------------


def test_same_workflow_data_and_seed_give_byte_identical_releases(cli, project):
    wf = census_workflow(project, extra=RELEASE)
    a = run_json(cli, wf, "--db", project / "a.duckdb", "--out-dir", project / "a")
    b = run_json(cli, wf, "--db", project / "b.duckdb", "--out-dir", project / "b", "--no-cache")
    ra, rb = project / "a" / "release", project / "b" / "release"
    assert {p.name for p in ra.iterdir()} == {p.name for p in rb.iterdir()} == RELEASE_FILES
    for name in RELEASE_FILES:
        assert (ra / name).read_bytes() == (rb / name).read_bytes(), name
    # nothing machine- or run-specific in any release file: no absolute path, run id or timestamp
    for name in RELEASE_FILES:
        data = (ra / name).read_bytes()
        for marker in (str(project), str(project / "a"), a["run_id"], b["run_id"]):
            assert marker.encode() not in data, (name, marker)
        if name.endswith((".json", ".html")):
            assert not re.search(rb"20\d\d-\d\d-\d\d[T ]\d\d:\d\d", data), name
    meta = pq.read_schema(ra / "published.parquet").metadata
    assert all(str(project).encode() not in v for v in meta.values())

    m = json.loads((ra / "manifest.json").read_text())
    assert m["schema_version"] == 1
    assert m["workflow"]["sha256"] == hashlib.sha256(wf.read_bytes()).hexdigest()
    assert m["workflow"]["text"] == wf.read_text() and m["workflow"]["file"] == "wf.yaml"
    assert m["seed"] == 7 and m["overrides"] == []
    assert {"anonflow", "python", "duckdb", "pyarrow", "numpy", "plugins", "matplotlib"} <= set(m["versions"])
    (src,) = m["sources"]
    assert src["path"] == "data/sdcmicro/CASCrefmicrodata.csv"
    assert src["sha256"] == hashlib.sha256((project / src["path"]).read_bytes()).hexdigest()
    assert src["rows"] == 1080 and src["schema"][0] == {"name": "AFNLWGT", "type": "BIGINT"}
    assert [s["step"] for s in m["steps"]] == ["census", "typed", "grouped", "scores", "published"]
    grouped = m["steps"][2]
    assert grouped["params"] == {"k": 5, "standardize": True} and grouped["fingerprint"]
    assert grouped["inputs"][0]["hash"] == m["steps"][1]["output_hash"]
    assert m["steps"][4]["files"][0]["path"] == "../census.parquet"
    files = {f["path"]: f for f in m["files"]}
    assert set(files) == RELEASE_FILES - {"manifest.json"}
    assert files["published.parquet"]["rows"] == 1080
    assert files["published.csv"]["sha256"] == hashlib.sha256((ra / "published.csv").read_bytes()).hexdigest()
    holds = next(x for x in m["metrics"] if x["name"] == "k-anonymity.holds")
    assert holds["value"] == 1.0 and holds["passed"] is True
    (check,) = m["checks"]
    assert check["check"] == "k-anonymity" and check["holds"] is True and check["evaluated"] == "scores"
    assert check["result"]["k-anonymity"] == 5.0
    assert m["release"]["claims"] == {"k-anonymity": {"k": 5}} and m["release"]["layout"] == "table"

    # anonflow report renders the same page from the store
    page = project / "page.html"
    res = cli("report", a["run_id"], "--db", project / "a.duckdb", "-o", page)
    assert res.exit_code == 0, res.output
    assert page.read_bytes() == (ra / "report.html").read_bytes()


def test_report_shows_a_parameter_sweep_and_the_manifest_records_it(cli, project):
    wf = census_workflow(project, extra=RELEASE)
    db = project / "s.duckdb"
    for k in (3, 10):
        run_json(cli, wf, "--db", db, "--set", f"grouped.k={k}", "--out-dir", project / f"k{k}")
    out = run_json(cli, wf, "--db", db)
    rel = project / "out" / "release"
    sweep = json.loads((rel / "manifest.json").read_text())["sweep"]
    assert sweep["parameters"] == ["grouped.k"]
    assert [p["params"]["grouped.k"] for p in sweep["points"]] == [3, 5, 10]
    assert sweep["metrics"] == {"scores.sse-il": "utility", "scores.k-anonymity": "privacy"}
    page = (rel / "report.html").read_text()
    assert "scores.sse-il (utility)" in page and "k=10" in page
    # the re-run cannot redo the earlier runs: it is handed the recorded points and reproduces the page
    code, result = verify(cli, rel, "--rerun")
    assert code == 0, failures(result)
    # a report made now from the store is still the release's page
    res = cli("report", out["run_id"], "--db", db)
    assert res.output == page


def test_a_lossy_join_release_publishes_both_tables_and_rechecks_them(cli, tmp_path):
    wf = _workflow_copy("gca-adult", tmp_path, rows=ROWS)
    out = run_json(cli, wf, "--db", tmp_path / "s.duckdb", "--set", "sample.n=800")
    rel = tmp_path / "out" / "release"
    names = {p.name for p in rel.iterdir()}
    assert names == {"published-qi.parquet", "published-qi.csv", "published-sa.parquet", "published-sa.csv",
                     "report.html", "manifest.json"}
    m = json.loads((rel / "manifest.json").read_text())
    assert m["release"]["layout"] == "lossy-join"
    checks = {c["check"]: c for c in m["checks"]}
    assert checks["lossy-join-consistency"]["result"] == {"inconsistent_classes": 0.0}
    assert checks["alpha-i-k-anonymity"]["holds"] and checks["k-anonymity"]["holds"]
    qi = pq.read_table(rel / "published-qi.parquet")
    assert "occupation" not in qi.column_names and "class_id" in qi.column_names
    assert json.loads(qi.schema.metadata[b"anonflow.lossy-join"])["partner"] == "published-sa.parquet"
    assert out["status"] == "succeeded"
    code, result = verify(cli, rel)
    assert code == 0, failures(result)


# -- tamper evidence -------------------------------------------------------------------------


def _flip(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i] = ord("7") if data[i] != ord("7") else ord("8")
    path.write_bytes(bytes(data))


def test_verify_passes_an_untouched_release(cli, project, made):
    rel = copy_release(made, project)
    code, result = verify(cli, rel)
    assert code == 0, failures(result)
    text = cli("verify", rel).output
    assert "verified" in text


@pytest.mark.parametrize("name", ["published.csv", "published.parquet", "report.html"])
def test_verify_names_a_published_file_with_one_changed_byte(cli, project, made, name):
    rel = copy_release(made, project)
    _flip(rel / name)
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith(f"file {name}: sha256") and "was changed" in f for f in bad), bad
    res = cli("verify", rel)
    assert res.exit_code == 1 and f"FAIL  file {name}" in res.output and "does NOT verify" in res.output


@pytest.mark.parametrize("field,edit", [
    ("seed", lambda m: m.__setitem__("seed", m["seed"] + 1)),
    ("metrics[5]", lambda m: m["metrics"][5].__setitem__("value", 1.5)),
    ("steps[2]", lambda m: m["steps"][2]["params"].__setitem__("k", 4)),
    ("versions.duckdb", lambda m: m["versions"].__setitem__("duckdb", "0.0.1")),
    ("release.claims", lambda m: m["release"]["claims"]["k-anonymity"].__setitem__("k", 3)),
])
def test_verify_names_an_edited_manifest_field(cli, project, made, field, edit):
    rel = copy_release(made, project)
    path = rel / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m, indent=2, sort_keys=True))
    code, result = verify(cli, rel)
    assert code == 1
    assert any(f.startswith(f"manifest field {field}: was altered") for f in failures(result)), failures(result)


def test_verify_checks_recorded_verdicts_and_check_results(cli, project, made):
    """A forger who also recomputes the digests is caught by the cross-checks (and by --rerun)."""
    from anonflow_std.publishing.manifest import integrity

    rel = copy_release(made, project)
    path = rel / "manifest.json"
    m = json.loads(path.read_text())
    sse = next(i for i, x in enumerate(m["metrics"]) if x["name"] == "k-anonymity.holds")
    m["metrics"][sse]["value"] = 0.0           # the check failed, yet it is still marked passed
    m["checks"][0]["result"]["k-anonymity"] = 6.0
    m["integrity"] = integrity(m)
    path.write_text(json.dumps(m, indent=2, sort_keys=True))
    code, result = verify(cli, rel)
    bad = failures(result)
    assert code == 1
    assert any(f.startswith(f"manifest field metrics[{sse}].passed") for f in bad), bad
    assert any(f.startswith("privacy check k-anonymity (manifest checks[0])") and "k-anonymity: recorded 6.0, now 5.0" in f
               for f in bad), bad


def test_verify_rerun_names_a_forged_step_hash(cli, project, made):
    from anonflow_std.publishing.manifest import integrity

    rel = copy_release(made, project)
    path = rel / "manifest.json"
    m = json.loads(path.read_text())
    m["steps"][2]["output_hash"] = "0" * 64
    m["integrity"] = integrity(m)
    path.write_text(json.dumps(m, indent=2, sort_keys=True))
    assert verify(cli, rel)[0] == 0      # consistent on its face ...
    code, result = verify(cli, rel, "--rerun")
    assert code == 1                    # ... but not what the workflow gives
    bad = failures(result)
    assert any(f.startswith("manifest field steps[2].output_hash: recorded 000000") for f in bad), bad
    assert any(f.startswith("file manifest.json: differs from the re-run's") for f in bad), bad


def test_verify_rerun_reports_a_changed_source_record(cli, project, made):
    rel = copy_release(made, project)
    src = project / "data" / "sdcmicro" / "CASCrefmicrodata.csv"
    lines = src.read_text().splitlines(keepends=True)
    first = lines[10].split(",")
    first[0] = str(int(float(first[0])) + 1)
    lines[10] = ",".join(first)
    src.write_text("".join(lines))
    code, result = verify(cli, rel, "--rerun")
    assert code == 1
    bad = failures(result)
    assert any(f.startswith("source census: data/sdcmicro/CASCrefmicrodata.csv has changed") for f in bad), bad
    assert any(f.startswith("re-run: not attempted") for f in bad), bad
    assert verify(cli, rel)[0] == 0      # the release itself is intact


def test_verify_reports_an_unlisted_or_missing_file(cli, project, made):
    rel = copy_release(made, project)
    (rel / "extra.txt").write_text("x")
    (rel / "published.csv").unlink()
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    assert "file extra.txt: is not listed in the manifest" in bad
    assert "file published.csv: is missing (manifest files[1])" in bad


def test_verify_of_something_that_is_not_a_release_is_an_input_error(cli, project):
    res = cli("verify", project)
    assert res.exit_code == 2 and "not an anonflow release" in res.output


# -- atomicity and crash safety ----------------------------------------------------------------


def test_a_failing_release_leaves_the_previous_one_untouched(cli, project, monkeypatch):
    from anonflow_std.publishing import release as release_mod

    _, rel = released(cli, project)
    before = {p.name: p.read_bytes() for p in rel.iterdir()}
    real = release_mod.Release.build

    def broken(self, out, *args, **kwargs):
        real(self, out, *args, **kwargs)
        raise RuntimeError("disk full")

    monkeypatch.setattr(release_mod.Release, "build", broken)
    wf = project / "wf.yaml"
    res = cli("run", wf, "--db", project / "s.duckdb", "--set", "grouped.k=6")
    assert res.exit_code == 1 and "disk full" in res.output
    assert {p.name: p.read_bytes() for p in rel.iterdir()} == before
    assert [p.name for p in rel.parent.iterdir() if p.name.startswith(".")] == []


def test_a_release_path_that_is_not_a_release_is_never_replaced(cli, project):
    (project / "out" / "release").mkdir(parents=True)
    (project / "out" / "release" / "mine.txt").write_text("keep me")
    wf = census_workflow(project, extra=RELEASE)
    res = cli("run", wf, "--db", project / "s.duckdb")
    # refused before the run starts (the engine's output guard: a file it did not publish) or by the
    # publisher ("exists and is not a release")
    assert res.exit_code == 2 and "remove it or choose another path" in res.output, res.output
    assert (project / "out" / "release" / "mine.txt").read_text() == "keep me"


KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import anonflow_std.publishing.release as rel

    real = rel.Release.build

    def slow(self, out, *args, **kwargs):
        manifest = real(self, out, *args, **kwargs)   # the whole release is written ...
        Path(sys.argv[3]).write_text(str(out))        # ... tell the test, then hang before the rename
        time.sleep(300)
        return manifest

    rel.Release.build = slow
    from anonflow.cli import main
    main(["run", sys.argv[1], "--db", sys.argv[2]])
""")


def test_killing_the_process_mid_release_leaves_no_release_and_a_readable_store(cli, project):
    wf = census_workflow(project, extra=RELEASE)
    db, flag = project / "s.duckdb", project / "mid-release"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(wf), str(db), str(flag)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the release never started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    out = project / "out"
    assert not (out / "release").exists()
    assert Path(flag.read_text()).is_dir()       # the finished-but-unrenamed temporary directory
    # the store is readable, and records the run as never finished
    with Store(db, read_only=True) as store:
        (run,) = store.runs()
        assert run["status"] in ("running", "interrupted")   # never finished
        assert [s["step"] for s in store.steps(run["run_id"])] == ["census", "typed", "grouped", "scores",
                                                                      "published"]
    # the next run succeeds, clears the dead process's leftovers and gives a release that verifies
    again = run_json(cli, wf, "--db", db)
    assert again["status"] == "succeeded"
    assert sorted(p.name for p in out.iterdir()) == ["census.parquet", "release"]
    code, result = verify(cli, out / "release")
    assert code == 0, failures(result)


# -- every shipped workflow ----------------------------------------------------------------------

#: how many records of each CSV source the workflow tests run on (the workflow text is unchanged)
ROWS = 2000
#: parameters that must follow the smaller data
SETS = {"gca-adult": ["--set", "sample.n=800"]}


def _release_input(text: str) -> tuple[str, str]:
    """The step the workflow publishes first (else its last algorithm step), and the release
    layout that fits its publisher."""
    from anonflow.steps import BUILTINS

    steps = yaml.safe_load(text)["steps"]
    for spec in steps.values():
        if spec.get("uses") == "publish":
            inp = spec["input"] if isinstance(spec["input"], str) else spec["input"][0]
            layout = "lossy-join" if (spec.get("with") or {}).get("publisher") == "lossy-join" else "table"
            return inp, layout
    algorithms = [name for name, spec in steps.items() if spec.get("uses") not in BUILTINS]
    assert algorithms, "the workflow publishes nothing and runs no algorithm"
    return algorithms[-1], "table"


def _workflow_copy(name: str, folder: Path, rows: int | None) -> Path:
    """``workflows/<name>.yaml`` in ``folder`` with its data: each CSV source cut to its first
    ``rows`` records (None: all), every other small data file copied, large ones that are no
    source linked. A release step is appended
    unless the workflow has one."""
    text = (WORKFLOWS / f"{name}.yaml").read_text()
    sources = {}
    for spec in (yaml.safe_load(text).get("sources") or {}).values():
        file = spec if isinstance(spec, str) else spec.get("path")
        if file and file.endswith(".csv"):
            sources[Path(file).as_posix()] = spec
    for path in DATA.rglob("*"):
        rel = path.relative_to(WORKFLOWS)
        target = folder / rel
        if path.is_dir():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.as_posix() in sources and rows is not None:
            with path.open("rb") as fh:
                head = [fh.readline() for _ in range(rows + 1)]
            target.write_bytes(b"".join(head))
        elif path.stat().st_size < 1 << 20 or rel.as_posix() in sources:
            # sources, hierarchy and grading files are copied: a release records them relative to
            # the workflow's folder, and 'verify --rerun' reads only regular files inside it (never
            # a symbolic link)
            shutil.copyfile(path, target)
        else:
            target.symlink_to(path)
    if "publisher: release" not in text:
        inp, layout = _release_input(text)
        assert text.rstrip("\n").splitlines()[-1].startswith("  "), "steps must be the file's last key"
        text = text.rstrip("\n") + (f"\n  release:\n    uses: publish\n    input: {inp}\n"
                                    f"    with: {{publisher: release, path: release, layout: {layout}}}\n")
    wf = folder / f"{name}.yaml"
    wf.write_text(text)
    return wf


#: workflows whose run (twice: the release, then the re-run) takes more than a few seconds
SLOW = {"mi-loss-adult", "maasae-adult", "l-clustering-adult", "microaggregation-census", "microaggregation-eia",
        "microaggregation-tarragona"}
CASES = [pytest.param(p.stem, ROWS, id=f"{p.stem}-{ROWS}-records",
                      marks=[pytest.mark.slow] if p.stem in SLOW else [])
         for p in sorted(WORKFLOWS.glob("*.yaml"))]
CASES += [pytest.param(name, None, id=f"{name}-full", marks=pytest.mark.slow)
          for name in ("gca-adult", "arx-adult-k5") if (WORKFLOWS / f"{name}.yaml").exists()]


@pytest.mark.parametrize("name,rows", CASES)
def test_a_release_of_each_shipped_workflow_verifies_with_rerun(cli, tmp_path, name, rows):
    wf = _workflow_copy(name, tmp_path, rows)
    args = SETS.get(name, []) if rows is not None else []
    out = run_json(cli, wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "o", *args)
    assert out["status"] == "succeeded"
    rel = next(p.parent for p in (tmp_path / "o").rglob("manifest.json"))
    code, result = verify(cli, rel, "--rerun", "--sources", tmp_path)
    assert code == 0, failures(result)
    assert any(i["what"] == "re-run" and i["ok"] for i in result["findings"])


def test_census_mdav_workflow_keeps_its_outputs_and_releases():
    text = (WORKFLOWS / "census-mdav.yaml").read_text()
    steps = yaml.safe_load(text)["steps"]
    assert steps["published"]["with"] == {"publisher": "parquet", "path": "census-mdav.parquet"}
    assert steps["published-csv"]["with"] == {"publisher": "csv", "path": "census-mdav.csv"}
    assert steps["release"]["with"]["publisher"] == "release"


# -- the report in a browser ---------------------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


def test_report_page_is_self_contained(cli, project, made):
    rel = copy_release(made, project)
    page = (rel / "report.html").read_text()
    assert "<script" not in page and "<link" not in page and " src=" not in page
    assert not re.search(r'href="(?!#)', page)
    assert page.count("<svg") == 3          # class sizes, information loss, lineage
    for section in ("privacy", "classes", "loss", "metrics", "sweep", "lineage"):
        assert f'<section id="{section}">' in page


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed (apt-get install chromium); "
                                                 ".ci/run installs it")
def test_report_renders_in_headless_chromium_without_console_errors(cli, project, made, tmp_path):
    rel = copy_release(made, project)
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", "--dump-dom",
           (rel / "report.html").resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    for section in ("privacy", "classes", "loss", "metrics", "sweep", "lineage"):
        assert f'<section id="{section}">' in dom, section
    assert dom.count("<svg") == 3 and "Class-size distribution" in dom and "k-anonymity" in dom
    console = [line for line in proc.stderr.splitlines() if "Uncaught" in line or "ERROR:CONSOLE" in line
               or "Content Security Policy" in line]
    assert console == []
