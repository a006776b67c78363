"""``verify --rerun`` of a release whose sources the workflow names by absolute path (or
outside its folder), and of a release re-run by another anonflow or plugin version (issue 16).

A. The manifest records a source named by absolute path as written; ``verify --rerun`` finds
   it at that path (hashed in place, used only when its sha256 is the recorded one, its digest
   never printed otherwise), or by its file name in ``--sources DIR`` (then the recorded path
   is never opened). A hostile manifest cannot make verify read or use any other file.
B. When the re-run's versions or code digests differ from the manifest's, verify reports the
   version and code differences apart from the data, compares the published files as tables,
   passes a re-run that publishes the same tables (verdict ``same-tables-different-code``) and
   fails one that publishes other records, naming the file and how many records differ.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.plugins.publishing.made_release import copy_release, make_release
from tests.support.helpers import census_workflow
from tests.plugins.publishing.test_release import RELEASE, failures, run_json, verify
from tests.plugins.publishing.test_release_trust import _spy_runs, forge, sha

CENSUS = "data/sdcmicro/CASCrefmicrodata.csv"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A project folder in which ``census_workflow`` with ``RELEASE`` was run (--out-dir out),
    made once per module; a test whose release records its source relative to the workflow's
    folder takes ``copy_release(made, project)``, the same release in its own project folder
    (a release naming its source by absolute path is made in place: it records that path)."""
    return make_release(tmp_path_factory, RELEASE)


def shown(result: dict, what: str) -> list[str]:
    return [i["detail"] for i in result["findings"] if i["what"] == what]


def absolute_release(cli, project: Path, data: Path) -> tuple[Path, Path]:
    """A release of a workflow in ``project/wf`` whose source is ``data/census.csv``, named
    by its absolute path; returns (release, the source file)."""
    data.mkdir(parents=True, exist_ok=True)
    src = data / "census.csv"
    shutil.copy(project / CENSUS, src)
    folder = project / "wf"
    folder.mkdir()
    wf = census_workflow(folder, extra=RELEASE)
    wf.write_text(wf.read_text().replace(CENSUS, str(src)))
    run_json(cli, wf, "--db", project / "s.duckdb", "--out-dir", folder / "out")
    return folder / "out" / "release", src


# -- A. sources named by absolute path -----------------------------------------------------------


def test_a_source_named_by_absolute_path_is_recorded_as_written_and_reruns(cli, project, tmp_path, scratch_root):
    rel, src = absolute_release(cli, project, tmp_path / "elsewhere")
    m = json.loads((rel / "manifest.json").read_text())
    assert m["sources"][0]["path"] == str(src)                       # as written, not '../../elsewhere/...'
    assert m["steps"][0]["params"]["path"] == str(src)
    assert m["steps"][0]["inputs"][0]["path"] == str(src)
    code, result = verify(cli, rel, "--rerun")                       # out of the box, no --sources
    assert code == 0, failures(result)
    assert result["rerun"]["verdict"] == "identical"
    assert any(d.startswith(f"source census is read at its recorded absolute path {src}")
               for d in shown(result, "sources")), result["findings"]
    # the release moved anywhere else still finds its source at the recorded path
    moved = tmp_path / "moved" / "release"
    shutil.copytree(rel, moved)
    code, result = verify(cli, moved, "--rerun")
    assert code == 0, failures(result)
    assert list(scratch_root.iterdir()) == []


def test_sources_dir_finds_an_absolute_source_by_its_file_name_and_checks_its_sha256(cli, project, tmp_path,
                                                                                    scratch_root):
    rel, src = absolute_release(cli, project, tmp_path / "elsewhere")
    copy = tmp_path / "given"
    copy.mkdir()
    shutil.copy(src, copy / "census.csv")
    src.unlink()                                                     # the recorded path no longer exists
    code, result = verify(cli, rel, "--rerun")
    assert code == 1
    assert any(f.startswith(f"source census: {src} is missing") for f in failures(result)), failures(result)
    code, result = verify(cli, rel, "--rerun", "--sources", copy)
    assert code == 0, failures(result)
    assert shown(result, "source census") == [f"census.csv (under {copy.resolve()}, for {src}) matches its recorded "
                                              "sha256"]
    # a file of that name with other bytes is refused, with a clear line
    lines = (copy / "census.csv").read_text().splitlines(keepends=True)
    (copy / "census.csv").write_text("".join(lines[:-1]))
    code, result = verify(cli, rel, "--rerun", "--sources", copy)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith(f"source census: census.csv (under {copy.resolve()}, for {src}) has changed: sha256 ")
               and "but the manifest records" in f and "(sources[0].sha256)" in f for f in bad), bad
    assert any(f.startswith("re-run: not attempted: a source or a file the workflow reads differs") for f in bad), bad
    assert list(scratch_root.iterdir()) == []


def test_an_absolute_source_that_changed_is_refused_without_printing_its_digest(cli, project, tmp_path,
                                                                               scratch_root, monkeypatch):
    rel, src = absolute_release(cli, project, tmp_path / "elsewhere")
    src.write_bytes(src.read_bytes() + b"\n")
    runs = _spy_runs(monkeypatch)
    res = cli("verify", rel, "--rerun")
    assert res.exit_code == 1
    assert (f"FAIL  source census: {src} is not the recorded file: its sha256 differs from the one the manifest "
            "records (sources[0].sha256); not used") in res.output, res.output
    assert sha(src.read_bytes())[:16] not in res.output              # no digest of a file a manifest names
    assert runs == [] and list(scratch_root.iterdir()) == []


@pytest.mark.parametrize("case", ["secret", "proc", "sources-dir"])
def test_a_hostile_absolute_source_path_reads_nothing_it_may_not(cli, project, made, tmp_path, scratch_root,
                                                                monkeypatch, case):
    """A forged manifest naming someone's file by absolute path: without --sources the file is
    at most hashed (never copied, used or its digest shown, unless it is the recorded one); under
    /proc, /sys or /dev never opened; with --sources DIR the recorded path is never opened."""
    from anonflow_std.publishing import release_files as files_mod

    rel = copy_release(made, project)
    secret = tmp_path / "private" / "census.csv"
    secret.parent.mkdir()
    secret.write_bytes(b"the custodian's own secret\n")
    path = {"secret": str(secret), "proc": "/proc/self/environ", "sources-dir": str(secret)}[case]

    def edit(m):
        m["workflow"]["text"] = m["workflow"]["text"].replace(CENSUS, path)
        m["sources"][0]["path"] = path
        m["steps"][0]["params"]["path"] = path
        m["steps"][0]["inputs"][0]["path"] = path                     # the sha256 stays the census data's

    forge(rel, edit)
    opened: list[str] = []
    real = files_mod.open_under
    monkeypatch.setattr(files_mod, "open_under", lambda base, name: opened.append(f"{base}/{name}") or
                        real(base, name))
    runs = _spy_runs(monkeypatch)
    given = tmp_path / "given"
    given.mkdir()
    res = cli("verify", rel, "--rerun", *(["--sources", given] if case == "sources-dir" else []))
    assert res.exit_code == 1
    if case == "secret":
        assert opened == [str(secret)]                                 # hashed in place, only that
        assert f"FAIL  source census: {secret} is not the recorded file" in res.output, res.output
        assert sha(secret.read_bytes())[:16] not in res.output
    elif case == "proc":
        assert opened == []
        assert "re-run: not attempted: source census is '/proc/self/environ', in a system folder" in res.output
    else:
        assert opened == []
        assert (f"re-run: not attempted: source census is '{secret}', a path leaving the workflow's folder, and "
                f"--sources {given.resolve()} holds no census.csv") in res.output, res.output
    assert runs == [] and list(scratch_root.iterdir()) == []


def test_a_source_above_the_workflow_folder_reruns_with_sources_dir_by_its_file_name(cli, project, tmp_path,
                                                                                     scratch_root):
    folder = project / "wf"
    folder.mkdir()
    wf = census_workflow(folder, extra=RELEASE)
    wf.write_text(wf.read_text().replace(CENSUS, f"../{CENSUS}"))
    run_json(cli, wf, "--db", project / "s.duckdb", "--out-dir", folder / "out")
    rel = folder / "out" / "release"
    assert json.loads((rel / "manifest.json").read_text())["sources"][0]["path"] == f"../{CENSUS}"
    code, result = verify(cli, rel, "--rerun")                       # relative to a folder verify would guess
    assert code == 1
    assert any(f.startswith(f"re-run: not attempted: source census is '../{CENSUS}', a path leaving the workflow's "
                            "folder") and "--sources DIR" in f for f in failures(result)), failures(result)
    code, result = verify(cli, rel, "--rerun", "--sources", project / "data" / "sdcmicro")
    assert code == 0, failures(result)


def test_sources_dir_also_finds_a_relative_source_by_its_file_name(cli, project, made, tmp_path, scratch_root):
    copy_release(made, project)
    flat = tmp_path / "flat"
    flat.mkdir()
    shutil.copy(project / CENSUS, flat / "CASCrefmicrodata.csv")
    code, result = verify(cli, project / "out" / "release", "--rerun", "--sources", flat)
    assert code == 0, failures(result)


def test_recorded_files_accepts_only_sources_outside_the_workflow_folder():
    from anonflow_std.publishing.release_files import outside_source, recorded_files

    h = "a" * 64
    files, problems = recorded_files({"sources": [{"name": "s", "path": "/data/adult.csv", "sha256": h},
                                                  {"name": "t", "path": "../up/t.csv", "sha256": h}], "steps": []})
    assert problems == []
    assert files == {"/data/adult.csv": {"sha256": h, "what": "source s", "text": False, "outside": True,
                                         "name": "adult.csv"},
                     "../up/t.csv": {"sha256": h, "what": "source t", "text": False, "outside": True, "name": "t.csv"}}
    spec = {"age": {"files": {"path": h}, "params": {"path": "/abs/h.csv"}}}   # hierarchy files stay inside
    _, problems = recorded_files({"sources": [], "steps": [{"kind": "hierarchy", "step": "hier", "params": spec}]})
    assert problems and "an absolute path" in problems[0]
    assert [outside_source(p) for p in ("/", "..", "C:/x.csv", "a/b.csv", "/x/\0.csv", "/x/y.csv")] == \
        [None, None, None, None, None, "y.csv"]


# -- B. a re-run by another anonflow or plugin version -------------------------------------------




def older_code(m: dict) -> None:
    """The manifest as another anonflow would have written it: other versions and code, and
    so other step fingerprints."""
    m["versions"]["duckdb"] = "0.0.1"
    m["versions"]["plugins"]["algorithm:mdav"] = "anonflow 0.0.1"
    m["versions"]["code"]["plugins"]["algorithm:mdav"] = "b" * 64
    m["steps"][2]["fingerprint"] = "c" * 64
    m["steps"][2]["plugin_version"] = "0.0.1"
    m["release"]["fingerprint"] = "d" * 64


def test_same_tables_with_other_versions_and_code_pass_with_a_distinct_verdict(cli, project, made, scratch_root):
    rel = copy_release(made, project)
    forge(rel, older_code)
    res = cli("verify", rel, "--rerun")
    assert res.exit_code == 0, res.output
    assert "ok    re-run versions: the re-run runs other versions than the release records: duckdb 0.0.1 -> " \
           in res.output, res.output
    assert "plugin algorithm:mdav: anonflow 0.0.1 -> anonflow " in res.output
    assert "ok    re-run code: the re-run's code differs from the release's: the code of 1 plugin(s) of anonflow " \
           "(algorithm:mdav)" in res.output
    assert "ok    re-run fingerprints: 2 step fingerprint(s) differ (they count the code)" in res.output
    assert "ok    re-run: same published tables, different code" in res.output
    assert "the re-run with other versions or code publishes the same tables" in res.output
    assert "manifest field" not in res.output                        # no field reported as a data difference
    code, result = verify(cli, rel, "--rerun")
    assert code == 0 and result["rerun"]["verdict"] == "same-tables-different-code"
    assert result["rerun"]["code"] == ["the code of 1 plugin(s) of anonflow (algorithm:mdav)"]


def test_an_old_manifest_without_code_digests_is_compared_as_other_code(cli, project, made, scratch_root):
    rel = copy_release(made, project)
    forge(rel, lambda m: m["versions"].pop("code"))
    code, result = verify(cli, rel, "--rerun")
    assert code == 0, failures(result)
    assert result["rerun"]["verdict"] == "same-tables-different-code"
    assert shown(result, "re-run code")[0].endswith("the manifest records no code digests (written by an anonflow "
                                                    "that did not record them), so the re-run's code cannot be "
                                                    "compared with the release's")


def test_with_the_same_versions_and_code_a_fingerprint_difference_still_fails(cli, project, made, scratch_root):
    rel = copy_release(made, project)
    forge(rel, lambda m: m["steps"][2].__setitem__("fingerprint", "c" * 64))
    code, result = verify(cli, rel, "--rerun")
    assert code == 1 and result["rerun"]["verdict"] == "different"
    assert any(f.startswith("manifest field steps[2].fingerprint: recorded cccc") for f in failures(result)), \
        failures(result)


def test_other_code_does_not_excuse_a_data_difference(cli, project, made, scratch_root):
    """A forger who edits the versions cannot pass a forged metric value: with other code only
    the versions and fingerprints are expected to differ."""
    rel = copy_release(made, project)

    def edit(m):
        older_code(m)
        i = next(i for i, x in enumerate(m["metrics"]) if x["name"] == "sse-il")
        m["metrics"][i]["value"] = m["metrics"][i]["value"] / 2

    forge(rel, edit)
    code, result = verify(cli, rel, "--rerun")
    assert code == 1 and result["rerun"]["verdict"] == "different"
    bad = failures(result)
    assert any(f.startswith("manifest field metrics[") and ".value: recorded" in f for f in bad), bad
    assert not any("fingerprint" in f or "versions" in f for f in bad), bad


def _rewrite_published(monkeypatch, how: str) -> None:
    """Make the re-run's release publisher write another table: ``records`` adds 1 to one
    attribute of every record of the first class (k-anonymity still holds), ``order`` writes
    the records in reverse order."""
    from anonflow_std.publishing import release as release_mod

    def change(data: pa.Table) -> pa.Table:
        if how == "order":
            return data.take(pa.array(range(data.num_rows - 1, -1, -1)))
        mask = pc.equal(data["_class"], data["_class"][0])
        i = data.schema.get_field_index("AFNLWGT")
        col = data.column(i)
        return data.set_column(i, data.schema.field(i), pc.if_else(mask, pc.add(col, pa.scalar(1, col.type)), col))

    for name in ("write_parquet", "write_csv"):
        real = getattr(release_mod, name)
        monkeypatch.setattr(release_mod, name, (lambda r: lambda path, data, *a: r(path, change(data), *a))(real))


@pytest.mark.parametrize("versions", ["same", "other"])
def test_a_rerun_publishing_other_records_fails_naming_the_file_and_the_records(cli, project, made, scratch_root,
                                                                               monkeypatch, versions):
    rel = copy_release(made, project)
    if versions == "other":
        forge(rel, older_code)
    classes = pq.read_table(rel / "published.parquet", columns=["_class"])["_class"]
    changed = pc.sum(pc.equal(classes, classes[0])).as_py()
    _rewrite_published(monkeypatch, "records")
    code, result = verify(cli, rel, "--rerun")
    assert code == 1 and result["rerun"]["verdict"] == "different"
    bad = failures(result)
    for name in ("published.parquet", "published.csv"):
        assert any(f.startswith(f"file {name}: differs from the re-run's: sha256 ") and
                   f"{changed} of the release's 1080 records are not in the re-run's file, and {changed} of the "
                   "re-run's 1080 records are not in the release's" in f for f in bad), bad
    assert any(f.startswith("manifest field files[0].sha256") for f in bad) == (versions == "same"), bad


@pytest.mark.parametrize("versions", ["same", "other"])
def test_the_same_records_in_another_order(cli, project, made, scratch_root, monkeypatch, versions):
    """The same table (a multiset of records) in another order: with other code the same
    published table (said); with the same code the bytes must be the same."""
    rel = copy_release(made, project)
    if versions == "other":
        forge(rel, older_code)
    _rewrite_published(monkeypatch, "order")
    code, result = verify(cli, rel, "--rerun")
    if versions == "other":
        assert code == 0, failures(result)
        assert result["rerun"]["verdict"] == "same-tables-different-code"
        assert shown(result, "file published.parquet")[-1].startswith(
            "holds the same table as the re-run's (the same 14 columns and 1080 records, ")
        assert "of them in another place); its bytes differ" in shown(result, "file published.parquet")[-1]
    else:
        assert code == 1
        assert any(f.startswith("file published.parquet: differs from the re-run's: sha256 ") and
                   "(the same table, the same 14 columns and 1080 records" in f for f in failures(result)), \
            failures(result)


def test_compare_tables_counts_records_both_ways(tmp_path):
    from anonflow_std.publishing.rerun_compare import compare_tables

    a = pa.table({"x": [1, 2, 2, 3], "s": ["a", "b", "b", None]})
    for name, t in {"a": a, "same": a, "moved": a.take([3, 2, 1, 0]), "other": a.slice(0, 3),
                    "cols": a.rename_columns(["x", "t"]), "typed": a.cast(pa.schema([("x", pa.float64()),
                                                                                       ("s", pa.string())]))}.items():
        pq.write_table(t, tmp_path / f"{name}.parquet")
        t.to_pandas().to_csv(tmp_path / f"{name}.csv", index=False)
    p = lambda n: tmp_path / f"{n}.parquet"  # noqa: E731
    assert compare_tables(p("a"), p("same"), "parquet")["in_order"] is True
    moved = compare_tables(p("a"), p("moved"), "parquet")
    assert moved["same"] and not moved["in_order"]
    other = compare_tables(p("a"), p("other"), "parquet")
    assert not other["same"] and (other["only_a"], other["only_b"]) == (1, 0)
    assert "other columns" in compare_tables(p("a"), p("cols"), "parquet")["detail"]
    assert "column 'x' is BIGINT in the release, DOUBLE in the re-run" in compare_tables(p("a"), p("typed"),
                                                                                        "parquet")["detail"]
    assert compare_tables(tmp_path / "a.csv", tmp_path / "moved.csv", "csv")["same"]
    assert not compare_tables(tmp_path / "a.csv", tmp_path / "other.csv", "csv")["same"]


def test_version_changes_name_packages_plugins_and_code():
    from anonflow_std.publishing.rerun_compare import version_changes

    a = {"anonflow": "1.0", "duckdb": "1.1", "plugins": {"algorithm:mdav": "anonflow 1.0", "metric:x": "ext 2"},
         "code": {"anonflow": "1" * 64, "plugins": {"algorithm:mdav": "2" * 64, "metric:x": "3" * 64}}}
    b = {"anonflow": "1.1", "duckdb": "1.1", "plugins": {"algorithm:mdav": "anonflow 1.1"},
         "code": {"anonflow": "4" * 64, "plugins": {"algorithm:mdav": "2" * 64}}}
    versions, code = version_changes(a, b)
    assert versions == ["anonflow 1.0 -> 1.1", "plugin algorithm:mdav: anonflow 1.0 -> anonflow 1.1",
                        "plugin metric:x: ext 2 -> not installed"]
    assert code == ["anonflow's own code (sha256 1111111111111111... -> 4444444444444444...)",
                    "the code of 1 plugin(s) of ext (metric:x)"]
    assert version_changes(a, a) == ([], [])
    assert version_changes({k: v for k, v in a.items() if k != "code"}, a)[1][0].startswith(
        "the manifest records no code digests")


def test_an_old_manifest_without_fitted_values_passes_a_rerun_by_newer_code(cli, project, made, scratch_root):
    """A release written before anonflow recorded what an algorithm fitted (``steps[i].fitted``,
    read by ``anonflow apply``): a re-run by newer code adds it, shown as expected."""
    rel = copy_release(made, project)
    assert sorted(json.loads((rel / "manifest.json").read_text())["steps"][2]["fitted"]) == ["standardization"]

    def older(m):
        m["versions"].pop("code")
        m["steps"][2].pop("fitted")

    forge(rel, older)
    code, result = verify(cli, rel, "--rerun")
    assert code == 0, failures(result)
    assert result["rerun"]["verdict"] == "same-tables-different-code"
    assert shown(result, "re-run fitted values") == [
        "the re-run records what 1 algorithm step(s) fitted (steps[2].fitted), which the release, written before "
        "anonflow recorded it, does not: expected with newer code, not a data difference"]


def test_with_the_same_code_a_missing_fitted_value_fails(cli, project, made, scratch_root):
    rel = copy_release(made, project)
    forge(rel, lambda m: m["steps"][2].pop("fitted"))
    code, result = verify(cli, rel, "--rerun")
    assert code == 1 and result["rerun"]["verdict"] == "different"
    assert any(f.startswith("manifest field steps[2].fitted: recorded <absent>") for f in failures(result)), \
        failures(result)


def test_a_parameter_a_plugin_gained_since_the_release_is_shown_not_failed(cli, project, made, scratch_root):
    """A plugin given a new parameter (noise's block_size, release's tradeoff): the release, written
    before, records its step without it; a re-run by newer code records it at its default."""
    rel = copy_release(made, project)
    params = json.loads((rel / "manifest.json").read_text())["steps"][2]["params"]
    gone = sorted(params)[0]

    def older(m):
        m["versions"].pop("code")
        m["steps"][2]["params"].pop(gone)

    forge(rel, older)
    code, result = verify(cli, rel, "--rerun")
    assert code == 0, failures(result)
    assert shown(result, "re-run new parameters") == [
        f"the re-run's plugins have 1 parameter(s) the release, written by older code, does not record "
        f"(steps[2].params.{gone}), each at its default: expected with newer code; what the steps publish is "
        "compared below"]
    # with the same code, a parameter the release lacks is a difference
    shutil.rmtree(project / "out")
    rel = copy_release(made, project)
    forge(rel, lambda m: m["steps"][2]["params"].pop(gone))
    code, result = verify(cli, rel, "--rerun")
    assert code == 1 and any(f.startswith(f"manifest field steps[2].params.{gone}: recorded <absent>")
                             for f in failures(result)), failures(result)
