"""The Python API (anonflow.load / Workflow / anonymize, docs/api.md): loading, planning and
running through the CLI's engine, in-memory sources and their content hash, workflows built
from a dict, errors, and the examples of docs/api.md, run as they are written."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

import anonflow
from anonflow.sources.inmemory import arrow_sha256, to_arrow
from anonflow.store import Store

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
API_MD = ROOT / "docs" / "api.md"


def people(n: int = 12) -> pa.Table:
    ages = [23, 25, 27, 31, 33, 35, 41, 43, 45, 52, 54, 56][:n]
    return pa.table({"age": ages, "income": [21, 24, 22, 35, 38, 33, 51, 47, 49, 62, 66, 58][:n],
                     "disease": ["flu", "cold", "flu", "asthma", "flu", "cold", "cold", "asthma", "flu", "flu",
                                 "cold", "asthma"][:n]})


def built(source, k: int = 3, name: str = "people") -> anonflow.Workflow:
    return (anonflow.Workflow(name, seed=7, sources={"people": source})
            .add_step("typed", "typing", "people", quasi=["age", "income"], sensitive=["disease"])
            .add_step("grouped", "mdav", "typed", k=k)
            .add_step("scores", "evaluate", ["typed", "grouped"], metrics=["k-anonymity", "sse-il"]))


# -- the docs ---------------------------------------------------------------------------------

def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def test_api_md_examples_run(tmp_path, monkeypatch):
    """Every ```python block of docs/api.md, in order, in one namespace, in an empty folder
    holding a link to workflows/ (as the page says)."""
    blocks = python_blocks(API_MD)
    assert len(blocks) >= 8
    (tmp_path / "workflows").symlink_to(WORKFLOWS, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__api_md__"}
    for i, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"docs/api.md (python block {i})", "exec"), namespace)
        except Exception as exc:  # noqa: BLE001 - name the block
            raise AssertionError(f"docs/api.md python block {i} failed: {type(exc).__name__}: {exc}\n{block}") from exc
    assert (tmp_path / "out" / "k10").is_dir()  # the examples publish under the folder they run in


def test_api_md_lists_what_anonflow_exports():
    text = API_MD.read_text(encoding="utf-8")
    for name in ("load", "Workflow", "anonymize", "Result", "Anonymized", "AnonflowError", "InputError",
                 "WorkflowError", "RunError", "PluginError", "StoreError"):
        assert name in anonflow.__all__
        assert name in text, name
        assert getattr(anonflow, name) is not None


def test_import_anonflow_stays_light():
    """``import anonflow`` does not import the engine (the API is imported on first use)."""
    import subprocess
    import sys

    code = ("import sys, anonflow; heavy = [m for m in ('duckdb', 'pyarrow', 'anonflow.runner', "
            "'anonflow.workflow_api', 'typing') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")])})
    assert out.stdout.strip() == "[]"


# -- loading, planning, running a file ----------------------------------------------------------

def test_load_plan_is_the_cli_plan_json(tmp_path):
    from click.testing import CliRunner

    from anonflow.cli import main

    path = WORKFLOWS / "census-mdav.yaml"
    cli = CliRunner().invoke(main, ["plan", str(path), "--json", "--set", "grouped.k=7"])
    assert cli.exit_code == 0, cli.output
    plan = anonflow.load(path).plan(set={"grouped.k": 7})
    assert json.loads(json.dumps(plan, default=str)) == json.loads(cli.output)
    assert anonflow.load(path).plan(set=["grouped.k=7"], preview=False)["steps"][2]["params"]["k"] == 7


def test_run_a_file_into_a_store_file(tmp_path):
    wf = anonflow.load(WORKFLOWS / "census-mdav.yaml")
    assert wf.name == "census-mdav" and wf.path == WORKFLOWS / "census-mdav.yaml"
    db = tmp_path / "store.duckdb"
    result = wf.run(set={"grouped.k": 6}, db=db, out_dir=tmp_path / "out")
    assert result.status == "succeeded" and result.db == str(db)
    assert result.metrics["scores.k-anonymity"] >= 6
    assert {Path(o["path"]).name for o in result.outputs} >= {"census-mdav.parquet", "census-mdav.csv"}
    assert [s["step"] for s in result.steps][:3] == ["census", "typed", "grouped"]
    grouped = result.table("grouped")
    assert grouped.num_rows == 1080 and "_class" in grouped.column_names and "_row" in grouped.column_names
    assert result.to_pandas("typed").shape[0] == 1080
    assert result.table("census").num_rows == 1080  # a source's table too
    with Store(db, read_only=True) as store:  # the run is in the file, as the CLI's would be
        run = store.run(result.run_id)
        assert run["overrides"] == [["grouped", "k", 6]]
    with pytest.raises(anonflow.InputError, match="has no step 'groupd'.*did you mean 'grouped'"):
        result.table("groupd")
    with pytest.raises(anonflow.InputError, match="produces no table"):
        result.table("scores")


def test_default_store_is_in_memory_and_lives_with_the_result(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    wf = built(people())
    result = wf.run()
    assert result.db == ":memory:"
    assert not any(tmp_path.iterdir())  # no anonflow.duckdb, nothing published
    assert result.table("grouped").num_rows == 12
    result.close()
    with pytest.raises(anonflow.StoreError, match="closed"):
        result.table("grouped")
    with wf.run() as again:  # a context manager too
        assert again.metrics == result.metrics


# -- in-memory sources ----------------------------------------------------------------------------

def test_in_memory_sources_pandas_and_arrow_give_the_same_run():
    pd = pytest.importorskip("pandas")
    table = people()
    frame = pd.DataFrame(table.to_pydict())
    a, b = built(table).run(), built(frame).run()
    assert a.metrics == b.metrics
    assert a.table("grouped").equals(b.table("grouped"))
    assert built(table).source_hashes() == built(frame).source_hashes()


def test_polars_source():
    pl = pytest.importorskip("polars")
    frame = pl.from_arrow(people())
    result = built(frame).run()
    assert result.metrics["scores.k-anonymity"] >= 3
    assert result.to_polars("grouped").height == 12


def test_content_hash_is_the_ipc_stream_and_ignores_chunks_and_metadata():
    table = people()
    digest = arrow_sha256(table)
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=5))
    assert chunked.column(0).num_chunks > 1
    assert arrow_sha256(chunked) == digest
    assert arrow_sha256(table.replace_schema_metadata({"pandas": "anything"})) == digest
    changed = table.set_column(1, "income", pa.array([21, 24, 22, 35, 38, 33, 51, 47, 49, 62, 66, 59]))
    assert arrow_sha256(changed) != digest
    # exactly: sha256 of the IPC stream written by pyarrow.ipc.new_stream
    import hashlib

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.combine_chunks().to_batches(max_chunksize=65536):
            writer.write_batch(batch)
    assert hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest() == digest


def test_in_memory_source_is_recorded_by_name_and_hash_and_hits_the_cache(tmp_path):
    db = tmp_path / "store.duckdb"
    wf = built(people())
    digest = wf.source_hashes()["people"]
    first = wf.run(db=db)
    second = built(people()).run(db=db)  # the same data, converted again: the same hash
    assert [s["status"] for s in first.steps] == ["succeeded"] * 4
    assert [s["status"] for s in second.steps] == ["cached"] * 4
    assert second.metrics == first.metrics
    other = built(people(11)).run(db=db)
    assert other.steps[0]["status"] == "succeeded"
    with Store(db, read_only=True) as store:
        run = store.run(first.run_id)
        assert run["workflow_path"] == "<people>"
        assert "format: arrow" in run["workflow_text"] and f"sha256: {digest}" in run["workflow_text"]
        source = store.steps(first.run_id)[0]
        assert source["uses"] == "arrow"
        assert source["params"] == {"path": None, "table": None, "in_memory": "people"}
        assert source["inputs"] == [{"name": "memory:people", "sha256": digest}]
        parents = [p for (p,) in store.con.execute("SELECT parent FROM af_lineage WHERE run_id = ? AND step = ?",
                                                   [first.run_id, "people"]).fetchall()]
        assert parents == ["memory:people"]
        everything = json.dumps(store._dicts("SELECT * FROM af_step_runs WHERE run_id = ?", [first.run_id]),
                                default=str)
        assert str(tmp_path) not in everything and os.getcwd() not in everything


def test_in_memory_source_errors():
    with pytest.raises(anonflow.InputError, match="column name '_row' is reserved"):
        built(pa.table({"_row": [1, 2], "age": [1, 2]})).run()
    with pytest.raises(anonflow.InputError, match="'people' has no records"):
        built(people().slice(0, 0)).run()
    with pytest.raises(anonflow.InputError, match="expected a path, a mapping, or a pandas"):
        anonflow.Workflow("x").add_source("people", 42)
    with pytest.raises(anonflow.InputError, match="names column 'a' twice"):
        anonflow.Workflow("x").add_source("people", pa.table([[1], [2]], names=["a", "A"]))


def test_a_workflow_file_cannot_hold_an_in_memory_source(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("sources:\n  people: {format: arrow, sha256: abc}\nsteps:\n  typed: {uses: typing, input: people}\n")
    with pytest.raises(anonflow.WorkflowError, match="in-memory table .* is given in Python, not in a workflow file"):
        anonflow.load(path)


# -- building from a dict, reuse ----------------------------------------------------------------

def test_from_dict_equals_the_same_workflow_built_by_calls_and_from_a_file(tmp_path):
    csv = tmp_path / "people.csv"
    csv.write_text("age,income,disease\n" + "\n".join(
        f"{a},{i},{d}" for a, i, d in zip(*people().to_pydict().values())) + "\n")
    data = {"name": "people", "seed": 7, "sources": {"people": {"path": "people.csv"}},
            "steps": {"typed": {"uses": "typing", "input": "people",
                                "with": {"quasi": ["age", "income"], "sensitive": ["disease"]}},
                      "grouped": {"uses": "mdav", "input": "typed", "with": {"k": 3}},
                      "scores": {"uses": "evaluate", "input": ["typed", "grouped"],
                                 "with": {"metrics": ["k-anonymity", "sse-il"]}}}}
    from_dict = anonflow.Workflow.from_dict(data, base_dir=tmp_path).run()
    by_calls = built(str(csv)).run()
    import yaml

    (tmp_path / "people.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    from_file = anonflow.load(tmp_path / "people.yaml").run(out_dir=tmp_path / "out")
    assert from_dict.metrics == by_calls.metrics == from_file.metrics
    assert from_dict.table("grouped").equals(from_file.table("grouped"))
    # the dict comes back out, and a copy of a loaded file can be changed
    copy = anonflow.Workflow.from_dict(anonflow.load(tmp_path / "people.yaml").to_dict(), base_dir=tmp_path)
    copy.add_step("grouped", "mdav", "typed", k=4)
    assert copy.run().metrics["scores.k-anonymity"] >= 4


def test_a_workflow_object_is_reused():
    wf = built(people())
    runs = [wf.run(set={"grouped.k": k}) for k in (2, 3, 4)]
    assert [r.metrics["scores.k-anonymity"] >= k for r, k in zip(runs, (2, 3, 4))] == [True] * 3
    assert len({r.run_id for r in runs}) == 3
    assert wf.run(set={"grouped.k": 3}).metrics == runs[1].metrics  # nothing of the overrides stuck
    assert wf.run(seed=99).metrics["scores.k-anonymity"] >= 3


# -- errors: the engine's classes, the CLI's messages --------------------------------------------

def _cli_error(args: list[str]) -> tuple[int, str]:
    from click.testing import CliRunner

    from anonflow.cli import main

    res = CliRunner().invoke(main, args)
    return res.exit_code, res.output.strip().removeprefix("Error: ")


@pytest.mark.parametrize("override, cls", [("grouped.k=1", anonflow.WorkflowError),
                                           ("nosuch.k=3", anonflow.WorkflowError),
                                           ("scores.thresholds={sse-il: {max: 0.001}}", anonflow.RunError)])
def test_errors_are_the_engines_with_the_cli_messages(tmp_path, override, cls):
    path = str(WORKFLOWS / "census-mdav.yaml")
    code, message = _cli_error(["run", path, "--db", str(tmp_path / "c.duckdb"), "--out-dir", str(tmp_path / "c"),
                                "--set", override])
    with pytest.raises(cls) as info:
        anonflow.load(path).run(set=[override], db=tmp_path / "a.duckdb", out_dir=tmp_path / "a")
    exc = info.value
    assert code == exc.exit_code
    assert "\n" not in str(exc)
    expected = str(exc) + (f" (run {exc.run_id} recorded as failed)" if getattr(exc, "run_id", None) else "")
    assert re.sub(r"run \d{8}-\d{6}-[0-9a-f]+", "run ID", message) == \
        re.sub(r"run \d{8}-\d{6}-[0-9a-f]+", "run ID", expected)


def test_error_classes():
    assert issubclass(anonflow.WorkflowError, anonflow.InputError)
    assert issubclass(anonflow.InputError, anonflow.AnonflowError)
    with pytest.raises(anonflow.WorkflowError, match="workflow file not found"):
        anonflow.load("no/such/file.yaml")
    with pytest.raises(anonflow.WorkflowError, match=r"<people>: step 'grouped': unknown step or algorithm 'mdavv' "
                                                     r"\(did you mean 'mdav'\?\)"):
        built(people()).add_step("grouped", "mdavv", "typed").run()
    with pytest.raises(anonflow.WorkflowError, match="set 'k': expected 'STEP.PARAM'"):
        built(people()).run(set={"k": 3})
    with pytest.raises(anonflow.WorkflowError, match="loaded from a file is not changed"):
        anonflow.load(WORKFLOWS / "census-mdav.yaml").add_step("x", "typing", "census")
    with pytest.raises(anonflow.WorkflowError, match="seed must be an integer"):
        built(people()).run(seed=-1)
    with pytest.raises(anonflow.InputError, match="column 'nope'"):
        anonflow.anonymize(people(), quasi=["nope"], k=3)


# -- anonymize ------------------------------------------------------------------------------------

def test_anonymize_one_call():
    table = people()
    out = anonflow.anonymize(table, "mdav", quasi=["age", "income"], sensitive=["disease"], k=3)
    assert out.table.num_rows == 12 and "_row" not in out.table.column_names
    assert out.table.column_names == ["age", "income", "disease", "_class"]
    classes = out.table.column("_class").to_pylist()
    assert classes == sorted(classes)  # ordered by class, as published
    assert out.metrics["scores.k-anonymity"] >= 3 and out.metrics["scores.k-anonymity.holds"] == 1.0
    assert out.suppressed is None
    assert out.result.table("typed").num_rows == 12
    assert out.run_id == out.result.run_id
    # the same engine: the same workflow built by hand gives the same records
    by_hand = built(table).run()
    assert sorted(map(tuple, by_hand.to_pandas("grouped")[["age", "income"]].values.tolist())) == \
        sorted(map(tuple, out.to_pandas()[["age", "income"]].values.tolist()))


def test_anonymize_claims_and_metrics():
    from anonflow.workflow_api import _default_metrics

    assert _default_metrics("mdav", {"k": 4}) == [{"k-anonymity": {"k": 4}}]
    assert _default_metrics("mdav", {"k": "x"}) == ["k-anonymity"]
    out = anonflow.anonymize(people(), quasi=["age", "income"], k=3, metrics=["sse-il"])
    assert {key.split(".")[1] for key in out.metrics} == {"sse-il"}


# -- a loaded file with an in-memory table in place of a source ---------------------------------

CENSUS = WORKFLOWS / "census-mdav.yaml"
CENSUS_CSV = WORKFLOWS / "data" / "sdcmicro" / "CASCrefmicrodata.csv"
#: the files census-mdav.yaml publishes whose bytes are the data alone; the release's
#: manifest.json and report.html also describe the source (a file's path and sha256, or an
#: in-memory table's name and content hash), so they differ by design
DATA_FILES = ("census-mdav.parquet", "census-mdav.csv", "census-mdav-release/published.csv",
              "census-mdav-release/published.parquet")


@pytest.fixture(scope="module")
def census_runs(tmp_path_factory):
    """census-mdav.yaml run by the CLI on its CSV file, and through the API with the same CSV
    read by pandas in place of the file source (``run(sources={"census": df})``)."""
    pd = pytest.importorskip("pandas")
    from click.testing import CliRunner

    from anonflow.cli import main

    tmp = tmp_path_factory.mktemp("census")
    cli = CliRunner().invoke(main, ["run", str(CENSUS), "--db", str(tmp / "cli.duckdb"), "--out-dir",
                                    str(tmp / "cli"), "--json"])
    assert cli.exit_code == 0, cli.output
    frame = pd.read_csv(CENSUS_CSV)
    api = anonflow.load(CENSUS).run(sources={"census": frame}, db=tmp / "api.duckdb", out_dir=tmp / "api")
    return tmp, json.loads(cli.output), api, frame


def test_a_loaded_file_takes_an_in_memory_source_and_publishes_the_cli_bytes(census_runs):
    """What is compared, and why it may be: pandas reads the 13 columns of the CSV as int64,
    which Arrow and DuckDB call BIGINT -- the types DuckDB's CSV reader gives the file source
    (checked first: the source tables are equal, types and values, record by record). From
    there the runs are the same, so every published data file has the CLI's bytes and every
    step's output the CLI's hash; the manifest and report differ only where they describe the
    source (the file's path and sha256 vs the in-memory table's name and content hash, and the
    workflow text recorded with it)."""
    tmp, cli, api, frame = census_runs
    assert set(map(str, frame.dtypes)) == {"int64"}
    with Store(tmp / "cli.duckdb", read_only=True) as store:
        rec = store.step_in_run(cli["run_id"], "census")
        cli_source = store.data(rec["output_table"])
    assert api.table("census").equals(cli_source)  # same types, same values, same _row
    for name in DATA_FILES:
        assert (tmp / "api" / name).read_bytes() == (tmp / "cli" / name).read_bytes(), name
    assert api.metrics == cli["metrics"]
    digest = arrow_sha256(to_arrow(frame))
    # the run records the in-memory table, never the file
    with Store(tmp / "api.duckdb", read_only=True) as store:
        run = store.run(api.run_id)
        assert run["workflow_path"] == str(CENSUS)
        assert f"sha256: {digest}" in run["workflow_text"] and "CASCrefmicrodata" not in run["workflow_text"]
        source = store.steps(api.run_id)[0]
        assert source["uses"] == "arrow" and source["inputs"] == [{"name": "memory:census", "sha256": digest}]
    manifests = [json.loads((tmp / side / "census-mdav-release" / "manifest.json").read_text()) for side in
                 ("api", "cli")]
    assert manifests[0]["workflow"]["file"] == "census-mdav.yaml"
    assert manifests[0]["sources"][0]["format"] == "arrow" and manifests[0]["sources"][0]["path"] is None
    assert manifests[0]["sources"][0]["sha256"] == digest
    assert manifests[1]["sources"][0]["path"] == "data/sdcmicro/CASCrefmicrodata.csv"
    assert [s["output_hash"] for s in manifests[0]["steps"]] == [s["output_hash"] for s in manifests[1]["steps"]]
    assert manifests[0]["checks"] == manifests[1]["checks"]


def test_verify_rerun_of_a_release_from_an_in_memory_source_is_refused_in_one_line(census_runs):
    from click.testing import CliRunner

    from anonflow.cli import main

    tmp, _cli, _api, _frame = census_runs
    release = str(tmp / "api" / "census-mdav-release")
    plain = CliRunner().invoke(main, ["verify", release])
    assert plain.exit_code == 0, plain.output  # hashes, files and privacy checks: all hold
    for extra in ([], ["--sources", str(CENSUS_CSV.parent)]):
        res = CliRunner().invoke(main, ["verify", release, "--rerun", *extra])
        assert res.exit_code == 1, res.output
        failed = [line for line in res.output.splitlines() if line.startswith("FAIL")]
        assert failed == ["FAIL  re-run: not attempted: source 'census' was an in-memory table given in Python "
                          "(recorded by its content hash only), which neither the release nor --sources DIR can "
                          "supply; 'anonflow verify' without --rerun checks the release's files, hashes and privacy "
                          "claims, and re-running the workflow in Python on the same table reproduces it"]
    res = CliRunner().invoke(main, ["verify", release, "--rerun", "--json"])
    found = json.loads(res.output)
    assert found["ok"] is False and found["rerun"] == {"verdict": "not-attempted"}


def test_sources_given_to_load_and_to_run(tmp_path):
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "people.yaml").write_text(
        "name: people\nseed: 7\nsources:\n  people: {path: missing.csv}   # no such file: the table stands in\n"
        "steps:\n  typed: {uses: typing, input: people, with: {quasi: [age, income], sensitive: [disease]}}\n"
        "  grouped: {uses: mdav, input: typed, with: {k: 3}}\n"
        "  scores: {uses: evaluate, input: [typed, grouped], with: {metrics: [k-anonymity, sse-il]}}\n")
    path = folder / "people.yaml"
    with pytest.raises(anonflow.InputError, match="file not found"):
        anonflow.load(path).run()
    loaded = anonflow.load(path, sources={"people": people()})
    assert loaded.source_hashes() == {"people": arrow_sha256(people())}
    assert loaded.plan(preview=False)["steps"][0]["source"].startswith("in-memory table people")
    by_load = loaded.run()
    by_run = anonflow.load(path).run(sources={"people": people()})
    in_code = built(people()).run()
    assert by_load.metrics == by_run.metrics == in_code.metrics
    assert by_load.table("grouped").equals(in_code.table("grouped"))
    # sources= at run time wins over load's, for that run only
    assert loaded.run(sources={"people": people(11)}).table("people").num_rows == 11
    assert loaded.run().table("people").num_rows == 12
    # a workflow built in code takes them too
    assert built(people()).run(sources={"people": people(9)}).table("grouped").num_rows == 9
    with pytest.raises(anonflow.WorkflowError, match=r"sources=: the workflow has no source 'peple' \(did you mean "
                                                     r"'people'\?\); its sources: people"):
        anonflow.load(path).run(sources={"peple": people()})
    with pytest.raises(anonflow.InputError, match="sources= takes in-memory tables .* got str"):
        anonflow.load(path, sources={"people": "people.csv"})
    with pytest.raises(anonflow.InputError, match="column name '_row' is reserved"):
        anonflow.load(path).run(sources={"people": pa.table({"_row": [1, 2], "age": [1, 2]})})
    assert not (folder / "out").exists()


def test_polars_in_place_of_a_file_source():
    pl = pytest.importorskip("polars")
    frame = pl.from_arrow(people())
    a = built(str(ROOT / "nonexistent.csv")).run(sources={"people": frame})
    b = built(people()).run()
    assert a.to_polars("grouped").equals(b.to_polars("grouped"))


# -- run options: executor, resources, progress ---------------------------------------------------

def partitioned(base_dir: Path) -> anonflow.Workflow:
    import random

    rng = random.Random(3)
    n = 600
    table = pa.table({"age": [rng.randint(18, 90) for _ in range(n)],
                      "income": [rng.randint(10, 200) for _ in range(n)],
                      "d": [rng.choice("abc") for _ in range(n)]})
    return (anonflow.Workflow("parts", seed=5, sources={"people": table}, base_dir=base_dir)
            .add_step("typed", "typing", "people", quasi={"age": "continuous", "income": "continuous"},
                      sensitive=["d"])
            .add_step("parts", "partition", "typed", max_records=100)
            .add_step("grouped", "mdav", "parts", k=4)
            .add_step("pub", "publish", "grouped", publisher="csv", path="parts.csv"))


def test_executor_and_resources_pass_through_and_change_no_byte(tmp_path):
    wf = partitioned(tmp_path)
    serial = wf.run(out_dir=tmp_path / "serial")
    parallel = wf.run(executor="processes:2", memory="1GB", threads=2, temp_dir=tmp_path / "spill",
                      work_dir=tmp_path / "work", out_dir=tmp_path / "parallel")
    assert "on local:" in serial.steps[3]["notes"][-1]
    assert "on processes:2:" in parallel.steps[3]["notes"][-1] and "in 2 process(es)" in parallel.steps[3]["notes"][-1]
    assert (tmp_path / "serial" / "parts.csv").read_bytes() == (tmp_path / "parallel" / "parts.csv").read_bytes()
    assert serial.metrics == parallel.metrics
    assert not any((tmp_path / "work").iterdir())  # the fragments' folder is left empty
    with pytest.raises(anonflow.InputError, match="unknown executor 'threads'"):
        wf.run(executor="threads:2")
    with pytest.raises(anonflow.WorkflowError, match="resources.memory must be a size"):
        wf.run(memory="lots")


def test_progress_lines_on_stderr(capsys):
    built(people()).run(progress=True)
    err = capsys.readouterr().err
    assert "[1/4] people (arrow) ..." in err and "[4/4] scores (evaluate) ..." in err
    built(people()).run()
    assert capsys.readouterr().err == ""
