"""``anonflow apply RELEASE NEW_DATA``: a release applied to new data (issue 18).

The judged scenario: ARX's Adult with every 10th record held out, a release made from the
rest by ``arx-adult-k5``'s steps and a ``release`` publisher, the held-out part applied: the
output passes k-anonymity (k = 5) on its own; a value outside a hierarchy (exit 2) and a
batch that would break k (exit 1) are refused with nothing written. Then the MDAV case on
Census, the refusals for l-clustering and lossy-join releases, and determinism.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from tests.plugins.publishing.adult_release import HIERARCHIES
from tests.support.helpers import CENSUS_QI, DATA, WORKFLOWS, census_project


def _k(table, quasi) -> int:
    counts = table.group_by(quasi).aggregate([([], "count_all")])
    return min(counts.column("count_all").to_pylist())


def test_the_held_out_part_of_adult_is_published_under_k5_on_its_own(cli, adult, tmp_path):
    release, held = adult
    # the recorded node leaves 19 held-out records in classes of fewer than 5: refused as it is
    res = cli("apply", release, held, "-o", tmp_path / "a")
    assert res.exit_code == 1, res.output
    assert "the new batch alone does not satisfy the release's guarantee: k-anonymity" in res.output
    assert "withholding them needs --suppression 0.007" in res.output
    assert not (tmp_path / "a").exists()
    # ... and published once those records may be withheld
    res = cli("apply", release, held, "-o", tmp_path / "a", "--suppression", "0.01")
    assert res.exit_code == 0, res.output
    out = tmp_path / "a"
    assert sorted(p.name for p in out.iterdir()) == ["application.json", "published.csv", "published.parquet"]
    record = json.loads((out / "application.json").read_text())
    assert record["format"] == "anonflow-application"
    assert record["checked"] == "the new batch alone, not its union with the release"
    assert record["suppression"]["withheld"] == 19 and record["suppression"]["allowance"] == 0.01
    assert all(c["holds"] is not False for c in record["checks"])
    assert any(c["check"] == "k-anonymity" and c["holds"] for c in record["checks"])
    node = record["applied"]["node"]
    assert node == {"sex": 0, "age": 4, "race": 0, "marital-status": 2, "education": 3, "native-country": 2,
                    "workclass": 2, "occupation": 1}
    data = pq.read_table(out / "published.parquet")
    published = pq.read_table(release / "published.parquet")
    assert data.schema.names == published.schema.names
    assert data.schema.metadata[b"anonflow.typing"] == published.schema.metadata[b"anonflow.typing"]
    held_rows = sum(1 for _ in held.open()) - 1
    assert data.num_rows == held_rows - 19 == record["files"][0]["rows"]
    assert _k(data, HIERARCHIES) >= 5                                # k-anonymity of the new batch alone
    # every published label is a label of the recorded level of its hierarchy
    for q, level in node.items():
        labels = {r.split(";")[level] for r in (DATA / "arx" / f"adult_hierarchy_{q}.csv").read_text().split("\n")
                  if r}
        assert set(data.column(q).to_pylist()) <= labels
    # the sensitive attribute is published as it is, in the new data's order
    src = pacsv.read_csv(held, parse_options=pacsv.ParseOptions(delimiter=";"))
    assert set(data.column("salary-class").to_pylist()) <= set(src.column("salary-class").to_pylist())
    # the CSV holds the Parquet file's records
    assert pacsv.read_csv(out / "published.csv").num_rows == data.num_rows
    # the record names what was read and applied
    assert record["new_data"]["file"] == "held-out.csv" and record["new_data"]["rows"] == held_rows
    assert {f["path"] for f in record["files_read"]} == {f"data/arx/adult_hierarchy_{h}.csv" for h in HIERARCHIES}


def test_apply_is_deterministic(cli, adult, tmp_path):
    release, held = adult
    for name in ("a", "b"):
        res = cli("apply", release, held, "-o", tmp_path / name, "--suppression", "0.01")
        assert res.exit_code == 0, res.output
    for f in ("published.parquet", "published.csv", "application.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_a_value_outside_a_hierarchy_is_one_line_naming_it_and_nothing_is_written(cli, adult, tmp_path):
    release, held = adult
    lines = held.read_text().splitlines(keepends=True)
    cells = lines[3].split(";")
    cells[1] = "150"
    lines[3] = ";".join(cells)
    bad = tmp_path / "hostile.csv"
    bad.write_text("".join(lines))
    res = cli("apply", release, bad, "-o", tmp_path / "out", "--suppression", "0.01")
    assert res.exit_code == 2
    assert res.output.count("\n") == 1, res.output
    assert "column 'age'" in res.output and "'150'" in res.output and "hierarchy" in res.output
    assert "/tmp/anonflow-apply" not in res.output                   # no scratch path
    assert not (tmp_path / "out").exists()


def test_a_missing_column_is_one_line(cli, adult, tmp_path):
    release, held = adult
    t = pacsv.read_csv(held, parse_options=pacsv.ParseOptions(delimiter=";")).drop_columns(["education"])
    bad = tmp_path / "no-education.parquet"
    pq.write_table(t, bad)                                           # Parquet new data is read too
    res = cli("apply", release, bad, "-o", tmp_path / "out")
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and "column 'education' is not in input" in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_a_batch_that_would_break_k_is_refused_and_nothing_is_written(cli, adult, tmp_path):
    release, held = adult
    lines = held.read_text().splitlines(keepends=True)
    tiny = tmp_path / "tiny.csv"
    tiny.write_text("".join(lines[:4]))                              # 3 records
    res = cli("apply", release, tiny, "-o", tmp_path / "out")
    assert res.exit_code == 1
    assert res.output.count("\n") == 1, res.output
    assert "does not satisfy the release's guarantee: k-anonymity" in res.output and "nothing was written" in res.output
    assert not (tmp_path / "out").exists()
    # an allowance cannot rescue a batch every record of which would be withheld
    res = cli("apply", release, tiny, "-o", tmp_path / "out", "--suppression", "1")
    assert res.exit_code == 1 and "every record of the new batch would be withheld" in res.output
    assert not (tmp_path / "out").exists()


def test_the_output_folder_is_never_written_over(cli, adult, tmp_path):
    release, held = adult
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("mine")
    res = cli("apply", release, held, "-o", tmp_path / "taken", "--suppression", "0.01")
    assert res.exit_code == 2 and "exists and is not empty" in res.output
    assert (tmp_path / "taken" / "mine.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    res = cli("apply", release, held, "-o", tmp_path / "file", "--suppression", "0.01")
    assert res.exit_code == 2 and (tmp_path / "file").read_text() == "x"
    (tmp_path / "empty").mkdir()                                     # an empty folder may be filled
    res = cli("apply", release, held, "-o", tmp_path / "empty", "--suppression", "0.01")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "empty" / "application.json").is_file()


def test_hierarchies_are_found_by_sha256_in_a_given_folder(cli, adult, tmp_path):
    release, held = adult
    moved = tmp_path / "moved" / "adult-release"
    shutil.copytree(release, moved)                                  # nothing beside it now
    res = cli("apply", moved, held, "-o", tmp_path / "a", "--suppression", "0.01")
    assert res.exit_code == 2 and "was not found beside the workflow" in res.output
    assert "--hierarchies DIR" in res.output
    flat = tmp_path / "h"
    flat.mkdir()
    for h in HIERARCHIES:
        shutil.copy(DATA / "arx" / f"adult_hierarchy_{h}.csv", flat)
    res = cli("apply", moved, held, "-o", tmp_path / "a", "--suppression", "0.01", "--hierarchies", flat)
    assert res.exit_code == 0, res.output
    # a hierarchy file with other content is not the release's
    (flat / "adult_hierarchy_age.csv").write_text((flat / "adult_hierarchy_age.csv").read_text() + "200;*;*;*;*\n")
    res = cli("apply", moved, held, "-o", tmp_path / "b", "--suppression", "0.01", "--hierarchies", flat)
    assert res.exit_code == 2 and "is not the file the release was made with" in res.output
    assert not (tmp_path / "b").exists()


# -- microaggregation --------------------------------------------------------------------


def _census_release(cli, folder: Path, every: int = 10) -> tuple[Path, Path]:
    (folder / "data" / "sdcmicro").mkdir(parents=True)
    lines = (DATA / "sdcmicro" / "CASCrefmicrodata.csv").read_text().splitlines(keepends=True)
    head, body = lines[0], lines[1:]
    (folder / "data" / "sdcmicro" / "CASCrefmicrodata.csv").write_text(
        head + "".join(r for i, r in enumerate(body) if i % every))
    held = folder / "held-out.csv"
    held.write_text(head + "".join(r for i, r in enumerate(body) if i % every == 0))
    text = (WORKFLOWS / "census-mdav.yaml").read_text()
    (folder / "wf.yaml").write_text(text)
    res = cli("run", folder / "wf.yaml", "--db", folder / "s.duckdb", "--out-dir", folder / "out")
    assert res.exit_code == 0, res.output
    return folder / "out" / "census-mdav-release", held


@pytest.fixture(scope="module")
def census_made(tmp_path_factory) -> Path:
    """The folder ``_census_release`` fills, made once per module; each test copies it."""
    from tests.support.helpers import cli_invoker

    folder = tmp_path_factory.mktemp("census-made") / "w"
    _census_release(cli_invoker(), folder)
    return folder


def _census_copy(made: Path, folder: Path) -> tuple[Path, Path]:
    """``_census_release(cli, folder)``: a copy of the module's (the release records no absolute
    path, and apply reads only the release and the new batch)."""
    shutil.copytree(made, folder)
    return folder / "out" / "census-mdav-release", folder / "held-out.csv"


def test_mdav_assigns_each_new_record_its_nearest_published_centroid(cli, census_made, tmp_path):
    release, held = _census_copy(census_made, tmp_path / "w")
    # 108 held-out records over 194 groups of 5: most centroids get 1 or 2 of them
    res = cli("apply", release, held, "-o", tmp_path / "a")
    assert res.exit_code == 1 and "does not satisfy the release's guarantee: k-anonymity" in res.output, res.output
    assert not (tmp_path / "a").exists()
    # a batch of 5 copies of each held-out record gives each centroid used a multiple of 5
    lines = held.read_text().splitlines(keepends=True)
    five = tmp_path / "five.csv"
    five.write_text(lines[0] + "".join(r for r in lines[1:] for _ in range(5)))
    res = cli("apply", release, five, "-o", tmp_path / "a")
    assert res.exit_code == 0, res.output
    record = json.loads((tmp_path / "a" / "application.json").read_text())
    assert record["applied"]["groups_used"] <= record["applied"]["groups"]
    assert record["applied"]["records_per_group_used"]["min"] >= 5
    out = pq.read_table(tmp_path / "a" / "published.parquet")
    pub = pq.read_table(release / "published.parquet")
    assert out.schema.names == pub.schema.names and out.num_rows == 5 * (len(lines) - 1)
    assert record["applied"]["standardization"] == "recorded" and record["notes"][-1].startswith("mdav: ")
    # the run recorded its standardization: the original table's means and population deviations
    manifest = json.loads((release / "manifest.json").read_text())
    step = next(s for s in manifest["steps"] if s["step"] == "grouped")
    rec = step["fitted"]["standardization"]
    assert sorted(step["fitted"]) == ["standardization"] and rec["quasi"] == CENSUS_QI
    original = pacsv.read_csv(tmp_path / "w" / "data" / "sdcmicro" / "CASCrefmicrodata.csv")
    O = np.column_stack([original.column(q).to_numpy().astype(float) for q in CENSUS_QI])
    assert np.allclose(rec["mean"], O.mean(axis=0), rtol=1e-12, atol=0)
    assert np.allclose(rec["std"], O.std(axis=0), rtol=1e-12, atol=0)       # ddof 0
    P = np.column_stack([pub.column(q).to_numpy() for q in CENSUS_QI])
    assert np.allclose(rec["mean"], P.mean(axis=0), rtol=1e-9)               # the centroids keep the means
    assert (P.std(axis=0) < np.asarray(rec["std"])).all()                     # but not the deviations
    # nearest centroid, Euclidean on z-scores by the recorded means and deviations
    cls = pub.column("_class").to_numpy()
    groups, first = np.unique(cls, return_index=True)
    C = P[first]
    X = np.column_stack([pacsv.read_csv(five).column(q).to_numpy().astype(float) for q in CENSUS_QI])
    mean, std = np.asarray(rec["mean"]), np.asarray(rec["std"])
    d = ((((X - mean) / std)[:, None, :] - ((C - mean) / std)[None, :, :]) ** 2).sum(axis=2)
    want = groups[np.argmin(d, axis=1)]
    # each record its nearest centroid, exactly as published; the file lists them by class,
    # then by value (never in the batch's order)
    expected = np.column_stack([want, C[np.searchsorted(groups, want)]])
    got = np.column_stack([out.column("_class").to_numpy(), *[out.column(q).to_numpy() for q in CENSUS_QI]])
    assert np.array_equal(got, expected[np.lexsort(expected.T[::-1])])
    assert _k(out, CENSUS_QI) >= 5
    # the same batch in another order publishes the same bytes
    body = lines[1:]
    np.random.default_rng(3).shuffle(body)
    shuffled = tmp_path / "shuffled.csv"
    shuffled.write_text(lines[0] + "".join(r for r in body for _ in range(5)))
    res = cli("apply", release, shuffled, "-o", tmp_path / "b")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "b" / "published.parquet").read_bytes() == (tmp_path / "a" / "published.parquet").read_bytes()


def test_a_partitioned_mdav_run_records_the_whole_tables_standardization(cli, tmp_path):
    """Every fragment group z-scores by the whole table's means and deviations (the
    fragments' domain): they record it alike, so the step records it once."""
    census_project(tmp_path)
    text = (WORKFLOWS / "census-mdav.yaml").read_text()
    text = text.replace("  grouped:\n    uses: mdav\n    input: typed\n",
                        "  parts: {uses: partition, input: typed, with: {max_records: 300}}\n"
                        "  grouped:\n    uses: mdav\n    input: parts\n")
    assert "input: parts" in text
    (tmp_path / "wf.yaml").write_text(text)
    res = cli("run", tmp_path / "wf.yaml", "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "out")
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "out" / "census-mdav-release" / "manifest.json").read_text())
    rec = next(s for s in manifest["steps"] if s["step"] == "grouped")["fitted"]["standardization"]
    original = pacsv.read_csv(DATA / "sdcmicro" / "CASCrefmicrodata.csv")
    O = np.column_stack([original.column(q).to_numpy().astype(float) for q in CENSUS_QI])
    assert rec["quasi"] == CENSUS_QI
    assert np.allclose(rec["mean"], O.mean(axis=0), rtol=1e-12, atol=0)
    assert np.allclose(rec["std"], O.std(axis=0), rtol=1e-12, atol=0)


def _without_fitted(release: Path, folder: Path) -> Path:
    """A copy of ``release`` whose manifest is as a release made before anonflow recorded
    what its algorithm step fitted (no ``steps[i].fitted``), its integrity digest redone."""
    from anonflow_std.publishing.manifest import integrity, manifest_bytes

    copy = folder / "out" / release.name
    shutil.copytree(release, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    assert sum(1 for s in manifest["steps"] if s.pop("fitted", None) is not None) == 1
    manifest.pop("integrity")
    manifest["integrity"] = integrity(manifest)
    (copy / "manifest.json").write_bytes(manifest_bytes(manifest))
    for h in HIERARCHIES:
        (folder / "data" / "arx").mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / "arx" / f"adult_hierarchy_{h}.csv", folder / "data" / "arx")
    return copy


def test_the_release_records_the_lattice_node_and_apply_uses_it(cli, adult, tmp_path):
    release, held = adult
    manifest = json.loads((release / "manifest.json").read_text())
    algo = next(s for s in manifest["steps"] if s["kind"] == "algorithm")
    node = algo["fitted"]["node"]
    assert sorted(algo["fitted"]) == ["node"] and sorted(node) == ["levels", "quasi"]
    assert len(node["quasi"]) == len(node["levels"]) == 8 and all(isinstance(v, int) for v in node["levels"])
    res = cli("apply", release, held, "-o", tmp_path / "a", "--suppression", "0.01", "--json")
    assert res.exit_code == 0, res.output
    record = json.loads(res.output)
    assert record["applied"]["node"] == dict(zip(node["quasi"], node["levels"]))
    assert record["applied"]["node_from"] == "recorded" and record["notes"][-1].startswith("lattice: node [")
    # a release made before anonflow recorded the node: read off the published labels, with a note
    old = _without_fitted(release, tmp_path / "old")
    res = cli("apply", old, held, "-o", tmp_path / "b", "--suppression", "0.01")
    assert res.exit_code == 0, res.output
    assert "note: lattice: the release records no node" in res.output
    b = json.loads((tmp_path / "b" / "application.json").read_text())
    assert b["applied"]["node"] == record["applied"]["node"] and b["applied"]["node_from"] == "published labels"
    assert (tmp_path / "a" / "published.parquet").read_bytes() == (tmp_path / "b" / "published.parquet").read_bytes()


def test_a_recorded_node_the_published_labels_contradict_is_refused_in_one_line(cli, adult, tmp_path):
    from anonflow_std.publishing.manifest import integrity, manifest_bytes

    release, held = adult
    copy = tmp_path / "w" / "out" / release.name
    shutil.copytree(release, copy)
    for h in HIERARCHIES:
        (tmp_path / "w" / "data" / "arx").mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / "arx" / f"adult_hierarchy_{h}.csv", tmp_path / "w" / "data" / "arx")
    manifest = json.loads((copy / "manifest.json").read_text())
    node = next(s for s in manifest["steps"] if s["kind"] == "algorithm")["fitted"]["node"]
    i = next(i for i, lv in enumerate(node["levels"]) if lv > 0)
    node["levels"][i] = 0
    manifest.pop("integrity")
    manifest["integrity"] = integrity(manifest)
    (copy / "manifest.json").write_bytes(manifest_bytes(manifest))
    res = cli("apply", copy, held, "-o", tmp_path / "a")
    assert res.exit_code == 2, res.output
    assert "is not a label of the recorded level 0" in res.output and node["quasi"][i] in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "a").exists()


def test_a_census_release_made_before_the_standardization_was_recorded_falls_back_with_a_note(cli, census_made,
                                                                                             tmp_path):
    from anonflow_std.publishing.manifest import integrity, manifest_bytes

    release, held = _census_copy(census_made, tmp_path / "w")
    manifest = json.loads((release / "manifest.json").read_text())
    for s in manifest["steps"]:
        s.pop("fitted", None)
    manifest.pop("integrity")
    manifest["integrity"] = integrity(manifest)
    (release / "manifest.json").write_bytes(manifest_bytes(manifest))
    lines = held.read_text().splitlines(keepends=True)
    five = tmp_path / "five.csv"
    five.write_text(lines[0] + "".join(r for r in lines[1:] for _ in range(5)))
    res = cli("apply", release, five, "-o", tmp_path / "a", "--json")
    assert res.exit_code == 0, res.output
    record = json.loads(res.output)
    assert record["applied"]["standardization"] == "published table"
    assert "the release records no standardization" in record["notes"][0]


# -- refusals ----------------------------------------------------------------------------


def _small_adult(folder: Path, rows: int = 400) -> None:
    (folder / "data").mkdir(parents=True)
    lines = (DATA / "arx" / "adult.csv").read_text().splitlines(keepends=True)
    (folder / "data" / "adult.csv").write_text("".join(lines[: rows + 1]))
    (folder / "new.csv").write_text("".join([lines[0]] + lines[rows + 1: rows + 101]))


def _run(cli, folder: Path, steps: str) -> Path:
    text = textwrap.dedent("""\
        name: small
        seed: 3
        sources:
          adult: {path: data/adult.csv, delimiter: ";"}
        steps:
          typed:
            uses: typing
            input: adult
            with:
              quasi: {age: continuous, sex: nominal, race: nominal, education: nominal}
              sensitive: [occupation]
        """) + textwrap.indent(textwrap.dedent(steps), "  ")
    (folder / "wf.yaml").write_text(text)
    res = cli("run", folder / "wf.yaml", "--db", folder / "s.duckdb", "--out-dir", folder / "out")
    assert res.exit_code == 0, res.output
    return folder / "out" / "rel"


def test_an_l_clustering_release_is_refused_in_one_line(cli, tmp_path):
    _small_adult(tmp_path)
    release = _run(cli, tmp_path, """\
        clustered:
          uses: l-clustering
          input: typed
          with: {l: 2}
        release:
          uses: publish
          input: clustered
          with: {publisher: release, path: rel}
        """)
    res = cli("apply", release, tmp_path / "new.csv", "-o", tmp_path / "a")
    assert res.exit_code == 2
    assert res.output.count("\n") == 1, res.output
    assert "made by 'l-clustering', which cannot be applied to new data" in res.output
    assert "lattice" in res.output and "mdav" in res.output
    assert not (tmp_path / "a").exists()


def test_a_lossy_join_release_is_refused_in_one_line(cli, tmp_path):
    _small_adult(tmp_path)
    release = _run(cli, tmp_path, """\
        grouped:
          uses: alpha-k-gca
          input: typed
          with: {k: 3, alpha: 0.7}
        release:
          uses: publish
          input: grouped
          with: {publisher: release, path: rel, layout: lossy-join}
        """)
    res = cli("apply", release, tmp_path / "new.csv", "-o", tmp_path / "a")
    assert res.exit_code == 2
    assert res.output.count("\n") == 1, res.output
    assert "a lossy-join release cannot be applied to new data" in res.output
    assert not (tmp_path / "a").exists()


def test_not_a_release_and_an_edited_manifest_are_refused(cli, adult, tmp_path):
    release, held = adult
    res = cli("apply", tmp_path, held, "-o", tmp_path / "a")
    assert res.exit_code == 2 and "not an anonflow release" in res.output
    copy = tmp_path / "copy"
    shutil.copytree(release, copy)
    m = json.loads((copy / "manifest.json").read_text())
    m["release"]["claims"] = {"k-anonymity": {"k": 2}}
    (copy / "manifest.json").write_text(json.dumps(m))
    res = cli("apply", copy, held, "-o", tmp_path / "a")
    assert res.exit_code == 2 and "does not match its own integrity digest" in res.output
    assert not (tmp_path / "a").exists()
