"""Trusting a release someone else made (issue 12): a confined ``verify --rerun``, Ed25519
signatures, every CSV checked against its Parquet partner, CSV formula injection, and the
two k figures of a lossy-join release; and (issue 13) what verify must catch, each test in
section 7 failing for a one-line mutant of verify or of the release publisher that the other
tests let through (the workflow text against its sha256, manifest fields added or removed,
unlisted files of any kind, row counts, each claimed model, inclusive thresholds, ...).

Every run passes ``--out-dir`` and names publish paths relative to it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.plugins.publishing.made_release import copy_into, copy_release, make_release
from tests.support.helpers import census_workflow, cli_invoker, write
from tests.plugins.publishing.test_release import RELEASE, _workflow_copy, failures, run_json, verify

def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A project folder in which ``census_workflow`` with ``RELEASE`` was run (--out-dir out),
    made once per module: a test that verifies, forges or moves the release takes
    ``copy_release(made, project)``, the same release in its own project folder."""
    return make_release(tmp_path_factory, RELEASE)


@pytest.fixture(scope="module")
def made_signed(tmp_path_factory) -> Path:
    """The same with ``SIGNED``: keys/release.key made by keygen before the run."""
    return make_release(tmp_path_factory, SIGNED, key=True)


def forge(rel: Path, edit, workflow_sha256: bool = True) -> None:
    """Edit the manifest as an attacker would: ``edit(manifest)``, then recompute every digest
    (the workflow text's, each file's, the integrity block) so that it is consistent on its face.
    ``workflow_sha256=False``: all but the workflow text's (a forger who forgets that one)."""
    from anonflow_std.publishing.manifest import integrity, manifest_bytes

    path = rel / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    if workflow_sha256:
        m["workflow"]["sha256"] = sha(m["workflow"]["text"].encode())
    for f in m["files"]:
        f["sha256"] = sha((rel / f["path"]).read_bytes())
    m["integrity"] = integrity(m)
    path.write_bytes(manifest_bytes(m))


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): (sha(p.read_bytes()) if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


# -- 1. verify --rerun is confined to a scratch folder ----------------------------------------


def test_rerun_runs_from_a_scratch_copy_holding_only_the_recorded_files(cli, project, made, scratch_root, monkeypatch):
    from anonflow import runner

    rel = copy_release(made, project)
    seen = {}
    real = runner.Runner.run

    def spy(self, spec, **kwargs):
        folder = spec.path.parent
        seen["files"] = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        seen["mode"] = stat.S_IMODE(folder.parent.stat().st_mode)
        seen["inside"] = str(folder).startswith(str(scratch_root))
        seen["out"] = str(kwargs["output_dir"]).startswith(str(folder.parent))
        return real(self, spec, **kwargs)

    monkeypatch.setattr(runner.Runner, "run", spy)
    before = tree(project)
    code, result = verify(cli, rel, "--rerun")
    assert code == 0, failures(result)
    assert seen["files"] == ["data/sdcmicro/CASCrefmicrodata.csv", "wf.yaml"]
    assert seen["mode"] == 0o700 and seen["inside"] and seen["out"]
    assert tree(project) == before                 # nothing written beside the release or the sources
    assert list(scratch_root.iterdir()) == []      # the scratch folder is gone


@pytest.mark.parametrize("where", ["absolute", "dotdot"])
def test_rerun_refuses_a_source_outside_the_workflow_folder(cli, project, made, tmp_path, scratch_root, where):
    rel = copy_release(made, project)
    outside = tmp_path / "elsewhere" / "census.csv"       # the same bytes, outside the workflow's folder
    outside.parent.mkdir()
    outside.write_bytes((project / "data" / "sdcmicro" / "CASCrefmicrodata.csv").read_bytes())
    path = str(outside) if where == "absolute" else "../elsewhere/census.csv"

    def edit(m):
        m["workflow"]["text"] = m["workflow"]["text"].replace("data/sdcmicro/CASCrefmicrodata.csv", path)
        m["sources"][0]["path"] = path
        m["steps"][0]["params"]["path"] = path
        m["steps"][0]["inputs"][0]["path"] = path

    forge(rel, edit)
    assert verify(cli, rel)[0] == 0               # consistent on its face
    before = tree(tmp_path)
    code, result = verify(cli, rel, "--rerun", "--sources", project)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith("re-run: not attempted: source census is") and "leaving the workflow's folder" in f
               for f in bad), bad
    assert tree(tmp_path) == before


def test_rerun_refuses_a_workflow_whose_sources_are_not_the_manifests(cli, project, made, scratch_root):
    rel = copy_release(made, project)
    (project / "data" / "other.csv").write_bytes((project / "data" / "sdcmicro" / "CASCrefmicrodata.csv").read_bytes())
    forge(rel, lambda m: m["workflow"].__setitem__(
        "text", m["workflow"]["text"].replace("data/sdcmicro/CASCrefmicrodata.csv", "data/other.csv")))
    code, result = verify(cli, rel, "--rerun")
    assert code == 1
    bad = failures(result)
    assert any(f.startswith("re-run: not attempted: source census reads data/other.csv in the workflow, but the "
                            "manifest records data/sdcmicro/CASCrefmicrodata.csv") for f in bad), bad


def test_rerun_refuses_a_hierarchy_file_the_manifest_does_not_pin(cli, tmp_path, scratch_root):
    wf = _workflow_copy("arx-adult-k5", tmp_path, rows=2000)
    run_json(cli, wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "o")
    rel = tmp_path / "o" / "release"
    rel2 = tmp_path / "o2"          # a second run's output folder: the release is byte-identical (its own test)
    shutil.copytree(tmp_path / "o", rel2)
    hier = tmp_path / "data" / "arx" / "adult_hierarchy_sex.csv"
    stolen = tmp_path / "secret.csv"
    stolen.write_bytes(hier.read_bytes())
    forge(rel, lambda m: m["workflow"].__setitem__(
        "text", m["workflow"]["text"].replace("data/arx/adult_hierarchy_sex.csv", str(stolen))))
    code, result = verify(cli, rel, "--rerun", "--sources", tmp_path)
    assert code == 1
    bad = failures(result)
    assert any("re-run: not attempted" in f and "hierarchy file of sex is" in f and str(stolen) in f for f in bad), bad
    # a pinned hierarchy file that changed on disk: named, and the re-run is not attempted
    hier.write_text(hier.read_text().replace("Male", "Mal3", 1))
    code, result = verify(cli, rel2 / "release", "--rerun", "--sources", tmp_path)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith("hierarchy file of hier.sex: data/arx/adult_hierarchy_sex.csv has changed") for f in bad), bad
    assert any(f.startswith("re-run: not attempted: a source or a file the workflow reads differs") for f in bad), bad


@pytest.mark.parametrize("path", ["absolute", "../../evil.csv"])
def test_rerun_of_a_workflow_publishing_outside_its_output_folder_writes_nothing(cli, project, made, tmp_path,
                                                                                   scratch_root, path):
    rel = copy_release(made, project)
    target = str(tmp_path / "evil.csv") if path == "absolute" else path
    step = f"  evil: {{uses: publish, input: grouped, with: {{publisher: csv, path: {json.dumps(target)}}}}}\n"
    forge(rel, lambda m: m["workflow"].__setitem__("text", m["workflow"]["text"] + step))
    before = tree(tmp_path)
    code, result = verify(cli, rel, "--rerun")
    assert code == 1
    bad = failures(result)
    assert any(f.startswith("re-run: not attempted: step evil: path =") for f in bad), bad
    assert not (tmp_path / "evil.csv").exists() and not (scratch_root / "evil.csv").exists()
    assert tree(tmp_path) == {**before}
    assert list(scratch_root.iterdir()) == []


def test_rerun_of_a_filter_reading_a_file_by_sql_fails(cli, project, made, tmp_path, scratch_root):
    """Needs the engine's sandbox of ``filter where:`` SQL (no file-reading functions): without
    it the re-run reads /etc/passwd and only the step-by-step comparison fails."""
    rel = copy_release(made, project)

    def edit(m):
        m["workflow"]["text"] = m["workflow"]["text"].replace(
            "  typed:\n    uses: typing\n    input: census\n",
            "  sneaky:\n    uses: filter\n    input: census\n    with: {where: \"(SELECT count(*) FROM "
            "read_csv('/etc/passwd')) > 0\"}\n  typed:\n    uses: typing\n    input: sneaky\n")

    forge(rel, edit)
    assert "read_csv('/etc/passwd')" in json.loads((rel / "manifest.json").read_text())["workflow"]["text"]
    before = tree(tmp_path)
    code, result = verify(cli, rel, "--rerun")
    assert code == 1
    bad = failures(result)
    assert any(f.startswith(("re-run: the recorded workflow failed when re-run", "re-run: not attempted"))
               for f in bad), bad
    assert tree(tmp_path) == before and list(scratch_root.iterdir()) == []


# -- 2. signed releases --------------------------------------------------------------------------


def keygen(cli, path: Path) -> Path:
    res = cli("keygen", path)
    assert res.exit_code == 0, res.output
    return Path(str(path) + ".pub")


def test_keygen_writes_an_owner_only_key_and_never_overwrites(cli, tmp_path):
    pub = keygen(cli, tmp_path / "k")
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600
    assert (tmp_path / "k").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    before = (tmp_path / "k").read_bytes(), pub.read_bytes()
    res = cli("keygen", tmp_path / "k")
    assert res.exit_code == 2 and "already exists" in res.output and len(res.output.strip().splitlines()) == 1
    assert ((tmp_path / "k").read_bytes(), pub.read_bytes()) == before
    # a private key is not overwritten either when only the .pub is in the way
    (tmp_path / "j.pub").write_text("mine")
    assert cli("keygen", tmp_path / "j").exit_code == 2 and not (tmp_path / "j").exists()


SIGNED = """
    release: {uses: publish, input: grouped, with: {publisher: release, path: release, sign: keys/release.key}}
"""


def signed_copy(made_signed: Path, project: Path) -> tuple[Path, Path]:
    """A copy of the module's signed release (and its key pair, keys/release.key) in ``project``;
    (the release, the public key)."""
    return copy_release(made_signed, project), project / "keys" / "release.key.pub"


def test_a_signed_release_verifies_with_its_key_and_hides_the_key_path(cli, project, made_signed, tmp_path):
    from cryptography.hazmat.primitives import serialization

    rel, pub = signed_copy(made_signed, project)
    m = json.loads((rel / "manifest.json").read_text())
    raw = serialization.load_pem_public_key(pub.read_bytes()).public_bytes(serialization.Encoding.Raw,
                                                                           serialization.PublicFormat.Raw)
    assert m["signature"]["public_key_sha256"] == sha(raw) and m["signature"]["algorithm"] == "ed25519"
    assert "sign" not in m["release"]["params"]
    for name in ("manifest.json", "report.html"):   # the workflow text holds the path; nothing else does
        data = (rel / name).read_text()
        if name == "manifest.json":
            data = data.replace(json.dumps(m["workflow"]["text"])[1:-1], "")
        assert "release.key" not in data, name
    assert len(base64.b64decode((rel / "manifest.sig").read_bytes().strip(), validate=True)) == 64

    res = cli("verify", rel, "--key", pub)
    assert res.exit_code == 0, res.output
    assert "ok    signature: manifest.sig is a valid Ed25519 signature" in res.output
    code, result = verify(cli, rel, "--key", pub)
    assert code == 0 and result["signature"]["status"] == "valid"
    # without --key: signed, not checked
    res = cli("verify", rel)
    assert res.exit_code == 0 and "signed (Ed25519" in res.output and "signature was not checked: give --key" in res.output
    assert verify(cli, rel)[1]["signature"]["status"] == "signed-unchecked"
    # another key: fails
    other = keygen(cli, tmp_path / "other")
    res = cli("verify", rel, "--key", other)
    assert res.exit_code == 1 and "FAIL  signature: manifest.sig is not a valid signature" in res.output
    # the re-run signs with a throwaway key and still reproduces every file
    code, result = verify(cli, rel, "--rerun", "--key", pub)
    assert code == 0, failures(result)
    assert any(i["what"] == "re-run" and i["ok"] for i in result["findings"])


@pytest.mark.parametrize("what", ["report.html", "manifest"])
def test_a_signed_release_edited_with_digests_recomputed_fails_with_the_key(cli, project, made_signed, what):
    rel, pub = signed_copy(made_signed, project)
    if what == "report.html":
        page = rel / "report.html"
        page.write_text(page.read_text().replace("Privacy guarantees", "Privacy guarantee!"))
        forge(rel, lambda m: None)
    else:
        forge(rel, lambda m: m.__setitem__("seed", m["seed"] + 1))
    code, result = verify(cli, rel, "--key", pub)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith("signature: manifest.sig is not a valid signature of manifest.json") for f in bad), bad


def test_an_unsigned_release_says_so_and_fails_with_a_key(cli, project, made, tmp_path):
    rel = copy_release(made, project)
    res = cli("verify", rel)
    assert res.exit_code == 0 and "ok    signature: unsigned" in res.output
    code, result = verify(cli, rel)
    assert code == 0 and result["signature"]["status"] == "unsigned"
    pub = keygen(cli, tmp_path / "k")
    res = cli("verify", rel, "--key", pub)
    assert res.exit_code == 1 and "FAIL  signature: the release is unsigned" in res.output
    # a signature file the manifest does not account for is not a signature
    (rel / "manifest.sig").write_text("AAAA\n")
    code, result = verify(cli, rel)
    assert code == 1 and "signature: manifest.sig is present, but the manifest records no signature" in failures(result)


def test_without_cryptography_signing_says_which_extra_to_install(cli, project, made, monkeypatch):
    rel = copy_release(made, project)
    (project / "k.pub").write_text("x")
    for name in [n for n in sys.modules if n == "cryptography" or n.startswith("cryptography.")] + ["cryptography"]:
        monkeypatch.setitem(sys.modules, name, None)
    res = cli("verify", rel, "--key", project / "k.pub")
    assert res.exit_code == 2
    assert res.output.strip().count("\n") == 0 and "pip install 'anonflow[sign]'" in res.output
    res = cli("keygen", project / "new")
    assert res.exit_code == 2 and "pip install 'anonflow[sign]'" in res.output and not (project / "new").exists()


# -- 3. every CSV is checked against its Parquet partner -------------------------------------------


def test_verify_compares_each_csv_with_its_parquet_cell_by_cell(cli, project, made):
    rel = copy_release(made, project)
    code, result = verify(cli, rel)
    assert code == 0, failures(result)
    assert any(i["what"] == "file published.csv" and i["detail"].startswith("holds exactly the records of "
                                                                             "published.parquet")
               for i in result["findings"])
    # one record's quasi-identifier made unique (k = 1 in the CSV), every digest recomputed
    path = rel / "published.csv"
    lines = path.read_text().splitlines(keepends=True)
    cells = lines[1].split(",")
    cells[0] = "123456789"
    lines[1] = ",".join(cells)
    path.write_text("".join(lines))
    forge(rel, lambda m: None)
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith("file published.csv: does not hold the records of published.parquet: record 1, column "
                            "'AFNLWGT': the CSV holds '123456789'") for f in bad), bad


@pytest.mark.parametrize("edit", ["header", "drop-row", "null"])
def test_verify_names_a_csv_header_row_or_null_that_differs(cli, project, made, edit):
    rel = copy_release(made, project)
    path = rel / "published.csv"
    lines = path.read_text().splitlines(keepends=True)
    if edit == "header":
        lines[0] = lines[0].replace('"AFNLWGT"', '"AFNLWGT2"')
    elif edit == "drop-row":
        del lines[5]
    else:
        cells = lines[3].split(",")
        cells[1] = ""
        lines[3] = ",".join(cells)
    path.write_text("".join(lines))

    def fix_rows(m):
        for f in m["files"]:
            if f["path"] == "published.csv":
                f["rows"] = len(lines) - 1

    forge(rel, fix_rows)
    code, result = verify(cli, rel)
    assert code == 1
    bad = [f for f in failures(result) if f.startswith("file published.csv: does not hold the records")]
    expect = {"header": "its header is", "drop-row": "holds 1079 records", "null": "record 3, column 'AGI'"}[edit]
    assert bad and expect in bad[0], failures(result)


# -- 4. CSV formula injection ----------------------------------------------------------------------

FORMULAS = ["=1+2", "+SUM(A1)", "-2+3", "@cmd", "\tx", "plain", "a=b", "=HYPERLINK(\"http://x\")"]


def formula_project(folder: Path) -> Path:
    rows = ["age,income,note,disease"]
    for i in range(48):
        note = FORMULAS[i % len(FORMULAS)].replace('"', '""')
        disease = ["=flu", "cold", "+asthma", "@gout"][i % 4]
        rows.append(f"{20 + i},{-1000 * (i % 7) - 5},\"{note}\",{disease}")
    (folder / "data.csv").write_text("\n".join(rows) + "\n")
    return write(folder / "wf.yaml", """
        name: formulas
        seed: 1
        sources:
          people: {path: data.csv}
        steps:
          typed:
            uses: typing
            input: people
            with: {quasi: [age, income], sensitive: [disease], insensitive: [note]}
          grouped:
            uses: alpha-k-gca
            input: typed
            with: {k: 3, alpha: 0.5}
          plain:
            uses: publish
            input: grouped
            with: {publisher: csv, path: plain.csv}
          raw:
            uses: publish
            input: grouped
            with: {publisher: csv, path: raw.csv, escape_formulas: false}
          pair:
            uses: publish
            input: grouped
            with: {publisher: lossy-join, path: pair, format: csv}
          release:
            uses: publish
            input: grouped
            with: {publisher: release, path: release, layout: lossy-join}
          flat:
            uses: publish
            input: grouped
            with: {publisher: release, path: flat}
        """)


@pytest.fixture(scope="module")
def made_formulas(tmp_path_factory) -> Path:
    """A folder in which ``formula_project``'s workflow was run (store s.duckdb, --out-dir o),
    made once per module: a test that reads, verifies or forges its releases takes
    ``copy_into(made_formulas, tmp_path)``, the same folder in its own tmp_path."""
    folder = tmp_path_factory.mktemp("made-formulas")
    wf = formula_project(folder)
    run_json(cli_invoker(), wf, "--db", folder / "s.duckdb", "--out-dir", folder / "o")
    return folder


def test_every_csv_escapes_formula_cells_and_verify_accounts_for_it(cli, made_formulas, tmp_path):
    import pyarrow.csv as pacsv

    copy_into(made_formulas, tmp_path)      # formula_project(tmp_path), run (store s.duckdb, --out-dir o)
    out = tmp_path / "o"

    def text_cells(path: Path) -> pa.Table:
        return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types={"note": pa.string(), "disease": pa.string(), "income": pa.string()}))

    plain = text_cells(out / "plain.csv")
    notes = plain.column("note").to_pylist()
    for value in notes:
        assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), value
    assert "'=1+2" in notes and "'-2+3" in notes and "'\tx" in notes and "plain" in notes and "a=b" in notes
    assert "'=HYPERLINK(\"http://x\")" in notes
    assert all(v.startswith("-") for v in plain.column("income").to_pylist())   # numbers are never escaped
    assert set(plain.column("disease").to_pylist()) == {"'=flu", "cold", "'+asthma", "'@gout"}
    raw = text_cells(out / "raw.csv")
    assert "=1+2" in raw.column("note").to_pylist()                      # escape_formulas: false
    sa = text_cells(out / "pair-sa.csv")
    assert "'=flu" in sa.column("disease").to_pylist() and "'@gout" in sa.column("disease").to_pylist()
    for rel, csv_name in ((out / "release", "published-sa.csv"), (out / "flat", "published.csv")):
        cells = text_cells(rel / csv_name).column("disease").to_pylist()
        assert "'=flu" in cells and "=flu" not in cells
        assert "=flu" in pq.read_table(rel / csv_name.replace(".csv", ".parquet")).column("disease").to_pylist()
        code, result = verify(cli, rel)
        assert code == 0, failures(result)
    # an unescaped formula slipped into a release CSV (digests recomputed) is caught
    rel = out / "flat"
    path = rel / "published.csv"
    path.write_text(path.read_text().replace("\"'=flu\"", "\"=flu\"", 1))
    forge(rel, lambda m: None)
    code, result = verify(cli, rel)
    assert code == 1
    assert any("the CSV holds '=flu', its Parquet partner \"'=flu\"" in f for f in failures(result)), failures(result)


# -- 5. the two k figures of a lossy-join release ---------------------------------------------------


def test_a_lossy_join_release_states_both_k_figures(cli, made_formulas, tmp_path):
    copy_into(made_formulas, tmp_path)      # formula_project(tmp_path), run (store s.duckdb, --out-dir o)
    out = tmp_path / "o"
    rel = out / "release"
    m = json.loads((rel / "manifest.json").read_text())
    checks = {c["check"]: c for c in m["checks"]}
    # independently: classes by class id, and groups of identical QI tuples in the QI table
    qi = pq.read_table(rel / "published-qi.parquet")
    by_class = qi.group_by("class_id").aggregate([([], "count_all")]).column("count_all").to_pylist()
    by_qi = qi.group_by(["age", "income"]).aggregate([([], "count_all")]).column("count_all").to_pylist()
    assert min(by_class) >= 3 and min(by_qi) == 1
    k = checks["lossy-join-k"]
    assert k["result"] == {"class_k": float(min(by_class)), "qi_table_k": float(min(by_qi)),
                           "qi_table_unique_records": float(sum(1 for n in by_qi if n == 1))}
    assert k["holds"] is None and "not of the QI values" in k["meaning"]
    page = (rel / "report.html").read_text()
    assert "It is <em>not</em> k-anonymity of the QI values" in page
    assert f"k = {min(by_class)}</strong>" in page and f"holds <strong>{min(by_qi)}</strong> record(s)" in page
    res = cli("verify", rel)
    assert res.exit_code == 0, res.output
    assert (f"k-anonymity of the classes (records per class id) = {min(by_class)}, not of the QI values: the "
            f"published QI table's smallest group of identical QI tuples holds {min(by_qi)} record(s)") in res.output
    assert "privacy check k-anonymity" in res.output and ("k-anonymity of the classes (records per class id), not of "
                                                          "the QI values\n") in res.output
    # a forged QI-table figure, digests recomputed, is recomputed from the files and caught
    forge(rel, lambda m: next(c for c in m["checks"] if c["check"] == "lossy-join-k")["result"].__setitem__(
        "qi_table_k", 3.0))
    code, result = verify(cli, rel)
    assert code == 1
    assert any("privacy check lossy-join-k" in f and "qi_table_k: recorded 3.0, now 1.0" in f
               for f in failures(result)), failures(result)


@pytest.mark.parametrize("key,message", [
    ("/etc/release.key", "'sign' must be a key file inside the workflow's folder"),
    ("../release.key", "'sign' must be a key file inside the workflow's folder"),
    ("keys/missing.key", "signing key"),
    ("data/sdcmicro/CASCrefmicrodata.csv", "is not a PEM private key"),
])
def test_a_bad_signing_key_is_one_clear_line(cli, project, key, message):
    wf = census_workflow(project, extra=SIGNED.replace("keys/release.key", key))
    res = cli("run", wf, "--db", project / "s.duckdb", "--out-dir", project / "out")
    assert res.exit_code == 2, res.output
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (project / "out" / "release").exists()


# -- 6. the audit of verify: sources, derived checks, regular files, SIGTERM, keys, headers -----------


def _spy_runs(monkeypatch) -> list:
    from anonflow import runner

    runs: list = []
    real = runner.Runner.run

    def spy(self, spec, **kwargs):
        runs.append(spec.path)
        return real(self, spec, **kwargs)

    monkeypatch.setattr(runner.Runner, "run", spy)
    return runs


@pytest.mark.parametrize("target", ["above", "etc-passwd"])
def test_rerun_without_sources_reads_only_the_folder_above_the_output_folder(cli, made, tmp_path, scratch_root,
                                                                              monkeypatch, target):
    """A forged source path that names a file far above the release (``etc/passwd`` resolved from
    ``/``) is not searched for: without --sources only the output folder's parent is used."""
    project = tmp_path / "a" / "b" / "project"
    (project / "data" / "sdcmicro").mkdir(parents=True)
    census = project / "data" / "sdcmicro" / "CASCrefmicrodata.csv"
    census.write_bytes((Path(__file__).resolve().parents[3] / "workflows" / "data" / "sdcmicro" /
                        "CASCrefmicrodata.csv").read_bytes())
    rel = copy_release(made, project)
    if target == "above":              # a file the old upward search found in tmp_path, 3 folders up
        secret = tmp_path / "secret.csv"
        secret.write_bytes(census.read_bytes())
        path = "secret.csv"
    else:
        secret = Path("/etc/passwd")
        if not secret.is_file():
            pytest.skip("no /etc/passwd here")
        path = "etc/passwd"

    def edit(m):
        m["workflow"]["text"] = m["workflow"]["text"].replace("data/sdcmicro/CASCrefmicrodata.csv", path)
        m["sources"][0]["path"] = path
        m["sources"][0]["sha256"] = sha(secret.read_bytes())
        m["steps"][0]["params"]["path"] = path
        m["steps"][0]["inputs"][0] = {"path": path, "sha256": sha(secret.read_bytes())}

    forge(rel, edit)
    runs = _spy_runs(monkeypatch)
    code, result = verify(cli, rel, "--rerun")
    assert code == 1
    bad = failures(result)
    assert any(f.startswith(f"re-run: not attempted: cannot find the sources: {project.resolve()} (the folder above "
                            f"the output folder {(project / 'out').resolve()}, the only one searched) does not hold "
                            f"{path}") for f in bad), bad
    assert runs == [] and list(scratch_root.iterdir()) == []
    # with the workflow's folder given, the honest release still re-runs
    rel2 = tmp_path / "honest"
    run_json(cli, project / "wf.yaml", "--db", project / "s2.duckdb", "--out-dir", rel2)
    code, result = verify(cli, rel2 / "release", "--rerun", "--sources", project)
    assert code == 0, failures(result)
    assert any(i["what"] == "sources" and i["detail"].startswith(f"the recorded files are read from {project.resolve()}"
                                                                  " (given with --sources)") for i in result["findings"])


def test_rerun_takes_the_sources_from_the_workflow_folder_not_the_output_folder(cli, project, scratch_root):
    """A published file named like a source (out/census.csv beside the release) is no source."""
    (project / "census.csv").write_bytes((project / "data" / "sdcmicro" / "CASCrefmicrodata.csv").read_bytes())
    wf = census_workflow(project, extra=RELEASE + """
    flat: {uses: publish, input: grouped, with: {publisher: csv, path: census.csv}}
    """)
    wf.write_text(wf.read_text().replace("data/sdcmicro/CASCrefmicrodata.csv", "census.csv"))
    run_json(cli, wf, "--db", project / "s.duckdb", "--out-dir", project / "out")
    assert (project / "out" / "census.csv").read_bytes() != (project / "census.csv").read_bytes()
    res = cli("verify", project / "out" / "release", "--rerun")
    assert res.exit_code == 0, res.output
    assert (f"ok    sources: the recorded files are read from {project.resolve()} (the folder above the output folder "
            f"{(project / 'out').resolve()}; give --sources DIR for another)") in res.output


@pytest.mark.parametrize("kind", ["symlink", "fifo", "symlinked-folder"])
def test_rerun_never_reads_a_source_that_is_not_a_regular_file_inside_the_workflow_folder(cli, project, made, tmp_path,
                                                                                          scratch_root, monkeypatch,
                                                                                          kind):
    rel = copy_release(made, project)
    src = project / "data" / "sdcmicro" / "CASCrefmicrodata.csv"
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / src.name).write_bytes(src.read_bytes())
    if kind == "symlink":           # the same bytes, through a link to a file outside the workflow's folder
        src.unlink()
        src.symlink_to(outside / src.name)
        expect = "data/sdcmicro/CASCrefmicrodata.csv (under {}) is a symbolic link, not a regular file: not read"
    elif kind == "fifo":            # opening it the old way waits forever for a writer
        (project / "data" / "fifo").mkdir()
        path = "data/fifo/census.csv"
        os.mkfifo(project / path)
        recorded = sha(src.read_bytes())

        def edit(m):
            m["workflow"]["text"] = m["workflow"]["text"].replace("data/sdcmicro/CASCrefmicrodata.csv", path)
            m["sources"][0]["path"] = path
            m["steps"][0]["params"]["path"] = path
            m["steps"][0]["inputs"][0] = {"path": path, "sha256": recorded}

        forge(rel, edit)
        expect = "data/fifo/census.csv (under {}) is not a regular file: not read"
        src.unlink()               # the source named by the forged manifest is only the FIFO
    else:                          # a folder on the path is a link leading out of the workflow's folder
        shutil_tree = project / "data" / "sdcmicro"
        for p in shutil_tree.iterdir():
            p.unlink()
        shutil_tree.rmdir()
        shutil_tree.symlink_to(outside)
        expect = "data/sdcmicro/CASCrefmicrodata.csv (under {}) leads out of"
    runs = _spy_runs(monkeypatch)
    code, result = verify(cli, rel, "--rerun", "--sources", project)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith("source census: " + expect.format(project.resolve())) for f in bad), bad
    assert any(f.startswith("re-run: not attempted: a source or a file the workflow reads differs") for f in bad), bad
    assert runs == [] and list(scratch_root.iterdir()) == []


def test_rerun_hashes_a_source_before_copying_it(cli, project, made, scratch_root, monkeypatch):
    """A source whose sha256 does not match is never copied into the scratch folder; a match is
    hashed again as copied."""
    from anonflow_std.publishing import verify as verify_mod

    rel = copy_release(made, project)
    src = project / "data" / "sdcmicro" / "CASCrefmicrodata.csv"
    src.write_bytes(src.read_bytes() + b"1,2,3\n" * 1000)
    opened = []
    real_open = os.open

    def spy(path, flags, *args, **kwargs):
        if str(path).startswith(str(scratch_root)) and flags & os.O_CREAT:
            opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(verify_mod.os, "open", spy)
    code, result = verify(cli, rel, "--rerun")
    assert code == 1
    assert any(f.startswith("source census: data/sdcmicro/CASCrefmicrodata.csv has changed") for f in failures(result))
    assert not any(p.endswith("CASCrefmicrodata.csv") for p in opened), opened
    assert list(scratch_root.iterdir()) == []


def _one_anonymous(rel: Path) -> int:
    """Make the first published record unique in published.parquet and .csv (metadata kept);
    return the number of classes of the published QI values now."""
    from anonflow_std.publishing.manifest import write_csv, write_parquet

    from tests.support.helpers import CENSUS_QI

    path = rel / "published.parquet"
    table = pq.read_table(path)
    meta = table.schema.metadata
    col = table.column("AFNLWGT").to_pylist()
    col[0] = type(col[0])(123456789)
    table = table.set_column(table.column_names.index("AFNLWGT"), "AFNLWGT",
                             pa.array(col, table.schema.field("AFNLWGT").type))
    write_parquet(path, table, meta, "zstd")
    write_csv(rel / "published.csv", table.replace_schema_metadata(None))
    return table.group_by(CENSUS_QI).aggregate([([], "count_all")]).num_rows


@pytest.mark.parametrize("variant", ["no-checks", "check-params-k1", "evaluate-step-k1"])
def test_verify_derives_the_checks_from_the_claims(cli, project, made, variant):
    """Published data made 1-anonymous, release.claims still k = 5: whatever the manifest lists
    as its checks, verify runs what the claims call for, with the claimed parameters."""
    rel = copy_release(made, project)
    classes = _one_anonymous(rel)
    k1 = {"k-anonymity": 1.0, "k-anonymity.classes": float(classes), "k-anonymity.holds": 1.0,
          "k-anonymity.k": 1.0, "k-anonymity.violating_classes": 0.0}

    def edit(m):
        assert m["release"]["claims"] == {"k-anonymity": {"k": 5}}
        if variant == "no-checks":
            m["checks"] = []
            return
        m["checks"][0]["params"] = {"by": None, "k": 1}
        m["checks"][0]["result"] = k1
        if variant == "evaluate-step-k1":
            scores = next(s for s in m["steps"] if s["step"] == "scores")
            scores["params"]["metrics"] = ["sse-il", {"k-anonymity": {"k": 1}}]

    forge(rel, edit)
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    if variant == "evaluate-step-k1":       # the list is what the (edited) evaluate step asks for ...
        assert not any(f.startswith("manifest field checks") for f in bad), bad
        assert any(f.startswith("claimed model k-anonymity (k=5, release.claims): does not hold on the published "
                                "files: k-anonymity = 1.0") for f in bad), bad   # ... but the claim is k = 5
    else:
        assert any(f.startswith("manifest field checks: records ") and "call for k-anonymity (default parameters, which "
                                "read the claims; evaluate step scores)" in f for f in bad), bad
        assert any(f.startswith("privacy check k-anonymity") and "does not hold on the published files: k-anonymity "
                                "= 1.0" in f and "k-anonymity.k = 5.0" in f for f in bad), bad
    res = cli("verify", rel)
    assert res.exit_code == 1 and "does NOT verify" in res.output


def test_verify_applies_the_evaluate_steps_thresholds_to_the_published_files(cli, project):
    """Claims lowered to k = 1 along with the checks: the evaluate step's threshold still holds the line."""
    wf = census_workflow(project, extra=RELEASE)
    wf.write_text(wf.read_text().replace("with: {metrics: [sse-il, k-anonymity]}",
                                         "with: {metrics: [sse-il, k-anonymity], thresholds: {k-anonymity: {min: 5}}}"))
    run_json(cli, wf, "--db", project / "s.duckdb", "--out-dir", project / "out")
    rel = project / "out" / "release"
    assert verify(cli, rel)[0] == 0
    classes = _one_anonymous(rel)

    def edit(m):
        m["release"]["claims"] = {"k-anonymity": {"k": 1}}
        m["checks"][0]["result"] = {"k-anonymity": 1.0, "k-anonymity.classes": float(classes),
                                    "k-anonymity.holds": 1.0, "k-anonymity.k": 1.0,
                                    "k-anonymity.violating_classes": 0.0}

    forge(rel, edit)
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    assert bad == ["privacy check k-anonymity (manifest checks[0]): k-anonymity = 1.0 on the published files misses "
                   "the threshold {\"min\": 5} of evaluate step scores"], bad


@pytest.mark.parametrize("entry", ["report.html", "manifest.sig", "manifest.json", "unlisted", "fifo", "folder"])
def test_verify_opens_only_regular_files_of_a_release(cli, project, made, made_signed, tmp_path, entry, monkeypatch):
    from anonflow_std.publishing import verify as verify_mod

    if entry == "manifest.sig":
        rel, _ = signed_copy(made_signed, project)
    else:
        rel = copy_release(made, project)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the release's\n")
    expect: str
    if entry == "report.html":          # a symlink whose target's digest the forger records
        (rel / "report.html").unlink()
        (rel / "report.html").symlink_to(outside)
        forge(rel, lambda m: None)
        expect = "file report.html: is a symbolic link, not a regular file: not opened"
    elif entry in ("manifest.sig", "manifest.json"):  # the same bytes, moved out and linked back
        moved = tmp_path / entry
        moved.write_bytes((rel / entry).read_bytes())
        (rel / entry).unlink()
        (rel / entry).symlink_to(moved)
        expect = ("signature: manifest.sig" if entry == "manifest.sig" else "file manifest.json:") + \
            " is a symbolic link, not a regular file: not opened"
    elif entry == "unlisted":
        (rel / "notes.txt").symlink_to(outside)
        expect = "file notes.txt: is a symbolic link, not a regular file: not opened"
    elif entry == "fifo":
        os.mkfifo(rel / "pipe")
        expect = "file pipe: is a FIFO, not a regular file: not opened"
    else:
        (rel / "sub").mkdir()
        expect = "file sub: is a directory, not a regular file: not opened"
    hashed = []
    real = verify_mod.regular_sha256
    monkeypatch.setattr(verify_mod, "regular_sha256", lambda p: hashed.append(Path(p).name) or real(p))
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith(expect) for f in bad), bad
    assert outside.name not in hashed and "report.html" not in (hashed if entry == "report.html" else [])


TERM_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from anonflow import runner

    def slow(self, spec, **kwargs):
        Path(sys.argv[2]).write_text(str(spec.path))   # the scratch copy is in place: tell the test, then hang
        time.sleep(300)

    runner.Runner.run = slow
    from anonflow.cli import main
    main(["verify", sys.argv[1], "--rerun"])
""")


def test_a_verify_ended_by_sigterm_removes_its_scratch_folder(cli, project, made, tmp_path):
    rel = copy_release(made, project)
    scratch, flag = tmp_path / "scratch", tmp_path / "running"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-c", TERM_SCRIPT, str(rel), str(flag)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the re-run never started"
            time.sleep(0.05)
        (folder,) = scratch.glob("anonflow-verify-*")
        assert (folder / "workflow" / "data" / "sdcmicro" / "CASCrefmicrodata.csv").is_file()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, proc.communicate()
    assert list(scratch.glob("anonflow-verify-*")) == []


@pytest.mark.parametrize("case", ["public-key", "missing", "link-outside"])
def test_a_bad_signing_key_fails_when_the_workflow_is_validated(cli, project, tmp_path, case):
    """Before any step runs: the parquet publish step (which runs before the release) writes nothing."""
    (project / "keys").mkdir()
    if case == "public-key":            # the .pub file given as the private key
        keygen(cli, tmp_path / "k")
        (project / "keys" / "release.key").write_bytes((tmp_path / "k.pub").read_bytes())
        message = "is not a PEM private key"
    elif case == "link-outside":        # a link inside the workflow's folder to a key outside it
        outside = tmp_path.parent / f"{tmp_path.name}-keys"
        outside.mkdir()
        keygen(cli, outside / "k")
        (project / "keys" / "release.key").symlink_to(outside / "k")
        message = "leads out of the workflow's folder"
    else:
        message = "not found"
    wf = census_workflow(project, extra=SIGNED)
    res = cli("run", wf, "--db", project / "s.duckdb", "--out-dir", project / "out")
    assert res.exit_code == 2, res.output
    assert "release: " in res.output and message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert not (project / "out").exists()


def test_release_check_loads_the_signing_key_only_with_the_workflow_folder(project):
    from anonflow.errors import InputError
    from anonflow_std.publishing.release import Release

    params = {"path": "release", "layout": "table", "name": "published", "sensitive": None,
              "class_column": "class_id", "count_column": "count", "compression": "zstd", "sign": "keys/none.key"}
    Release().check(params)                              # no folder: nothing path-related
    with pytest.raises(InputError, match=r"^release: signing key .*none.key not found$"):
        Release().check(params, workflow_dir=project)


@pytest.mark.parametrize("publisher,param,name", [("release", "class_column", "=1+2"),
                                                  ("release", "count_column", "@cnt"),
                                                  ("lossy-join", "count_column", "+x"),
                                                  ("lossy-join", "class_column", "-id"),
                                                  ("lossy-join", "class_column", "\tid")])
def test_formula_like_column_names_of_a_publisher_are_refused(cli, tmp_path, publisher, param, name):
    wf = formula_project(tmp_path)
    text = wf.read_text()
    text = text.replace("with: {publisher: release, path: release, layout: lossy-join}" if publisher == "release" else
                        "with: {publisher: lossy-join, path: pair, format: csv}",
                        ("with: {publisher: release, path: release, layout: lossy-join, " if publisher == "release"
                         else "with: {publisher: lossy-join, path: pair, format: csv, ") + f"{param}: {json.dumps(name)}}}")
    assert json.dumps(name) in text
    wf.write_text(text)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert f"{publisher}: {param} {name!r} begins with {name[0]!r}" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


# -- hostile-audit regressions: forged counts and columns, duplicate files, a one-metric sweep --------


def _rewrite(rel: Path, stem: str, edit) -> None:
    """Rewrite ``stem``.parquet (its Parquet metadata kept) and ``stem``.csv as the release
    writes them, with ``edit(table)``; the digests are left to :func:`forge`."""
    from anonflow_std.publishing.manifest import write_csv

    data = pq.read_table(rel / f"{stem}.parquet")
    meta = data.schema.metadata
    data = edit(data).replace_schema_metadata(meta)
    pq.write_table(data, str(rel / f"{stem}.parquet"))
    write_csv(rel / f"{stem}.csv", data.replace_schema_metadata(None))


@pytest.mark.parametrize("count", [2 ** 31, 2 ** 62, -1, "shifted"])
def test_verify_refuses_forged_sa_counts_before_expanding_them(cli, made_formulas, tmp_path, count):
    copy_into(made_formulas, tmp_path)      # formula_project(tmp_path), run (store s.duckdb, --out-dir o)
    rel = tmp_path / "o" / "release"

    def edit(sa):
        counts = sa.column("count").to_pylist()
        if count == "shifted":        # the total kept: one record moved from the first class to the last
            counts[0] -= 1
            counts[-1] += 1
        else:
            counts[0] = count
        return sa.set_column(sa.column_names.index("count"), "count", pa.array(counts, sa.schema.field("count").type))

    _rewrite(rel, "published-sa", edit)
    forge(rel, lambda m: None)
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    assert not any("array is too big" in f or "ValueError" in f for f in bad), bad
    assert any(f.startswith("privacy checks: cannot be run on the published files: published-qi.parquet and "
                            "published-sa.parquet do not pair up") for f in bad), bad


@pytest.mark.parametrize("case", ["table-extra", "table-missing", "qi-extra", "sa-extra"])
def test_verify_refuses_published_columns_other_than_the_typings(cli, made_formulas, tmp_path, case):
    copy_into(made_formulas, tmp_path)      # formula_project(tmp_path), run (store s.duckdb, --out-dir o)
    rel = tmp_path / "o" / ("flat" if case.startswith("table") else "release")
    stem = {"table": "published", "qi": "published-qi", "sa": "published-sa"}[case.split("-")[0]]
    assert verify(cli, rel)[0] == 0
    if case.endswith("extra"):
        _rewrite(rel, stem, lambda t: t.append_column("secret", pa.array([f"ssn-{i}" for i in range(t.num_rows)])))
    else:
        _rewrite(rel, stem, lambda t: t.drop_columns(["note"]))

    forge(rel, lambda m: None)
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    want = "column 'secret' is not declared" if case.endswith("extra") else "column 'note' is missing"
    assert any(f.startswith(f"file {stem}.parquet: does not hold exactly the columns of the release's typing")
               and want in f for f in bad), bad


def test_verify_refuses_a_file_listed_twice(cli, project, made):
    rel = copy_release(made, project)
    forge(rel, lambda m: m["files"].append(dict(m["files"][0])))
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith("file published.parquet: is listed twice in the manifest (files[0] and files[")
               for f in bad), bad


def test_a_sweep_with_one_metric_publishes_a_release_without_a_plot(cli, project):
    wf = census_workflow(project, extra=RELEASE)
    wf.write_text(wf.read_text().replace("metrics: [sse-il, k-anonymity]", "metrics: [k-anonymity]"))
    for k in (5, 7):
        res = cli("run", wf, "--db", project / "s.duckdb", "--out-dir", project / f"o{k}", "--set", f"grouped.k={k}")
        assert res.exit_code == 0, res.output
    page = (project / "o7" / "release" / "report.html").read_text()
    assert "No plot: the sweep has no pair of metrics" in page
    code, result = verify(cli, project / "o7" / "release")
    assert code == 0, failures(result)


# -- 7. what verify must catch: each test below fails for a hand-made one-line mutant of verify or
#       of the release publisher that the tests above let through (issue 13) -------------------------


def copies(rel: Path, names) -> dict[str, Path]:
    """A copy of the release ``rel`` per name, beside it: one run, one forgery per copy."""
    out = {}
    for name in names:
        out[name] = rel.parent / f"{rel.name}-{name}"
        shutil.copytree(rel, out[name])
    return out


def test_verify_checks_the_workflow_text_against_its_sha256(cli, project, made):
    """The recorded workflow text edited and every digest recomputed but workflow.sha256's."""
    rel = copy_release(made, project)
    forge(rel, lambda m: m["workflow"].__setitem__("text", m["workflow"]["text"].replace("{k: 5}", "{k: 2}")),
          workflow_sha256=False)
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    assert len(bad) == 1 and bad[0].startswith("manifest field workflow.text: sha256 ") and \
        "but workflow.sha256 records" in bad[0], bad


#: a field added to or removed from the manifest, at the two levels its digests cover
EDITS = {
    "versions.extra": (lambda m: m["versions"].__setitem__("extra", "1.0"), "added"),
    "versions.duckdb": (lambda m: m["versions"].pop("duckdb"), "removed"),
    "note": (lambda m: m.__setitem__("note", "verified by hand"), "added"),
    "sweep": (lambda m: m.pop("sweep"), "removed"),
}


def test_verify_names_a_manifest_field_added_or_removed(cli, project, made):
    """Digests left as recorded: the field digests name what was added or removed."""
    rel = copy_release(made, project)
    for field, folder in copies(rel, EDITS).items():
        edit, how = EDITS[field]
        path = folder / "manifest.json"
        m = json.loads(path.read_text())
        edit(m)
        path.write_text(json.dumps(m, indent=2, sort_keys=True))
        code, result = verify(cli, folder)
        assert code == 1
        bad = failures(result)
        assert f"manifest field {field}: was {how} after the release was written" in bad, (field, bad)


#: fields added or removed with every digest recomputed: the manifest's schema names them
SCHEMA_EDITS = {
    "note": (lambda m: m.__setitem__("note", "verified by hand"), "is not a field of"),
    "workflow.url": (lambda m: m["workflow"].__setitem__("url", "https://example.org"), "is not a field of"),
    "files[0].note": (lambda m: m["files"][0].__setitem__("note", "the real data"), "is not a field of"),
    "sweep": (lambda m: m.pop("sweep"), "is missing:"),
    "signature": (lambda m: m.pop("signature"), "is missing:"),
    "release.claims": (lambda m: m["release"].pop("claims"), "is missing:"),
    "files[1].rows": (lambda m: m["files"][1].pop("rows"), "is missing:"),
}


def test_verify_names_a_field_the_manifest_schema_does_not_have_or_lacks(cli, project, made):
    rel = copy_release(made, project)
    for field, folder in copies(rel, SCHEMA_EDITS).items():
        edit, how = SCHEMA_EDITS[field]
        forge(folder, edit)
        code, result = verify(cli, folder)
        assert code == 1
        bad = failures(result)
        assert any(f.startswith(f"manifest field {field}: {how}") and "a schema_version 1 manifest" in f
                   for f in bad), (field, bad)


def test_verify_checks_the_whole_manifest_digest(cli, project, made):
    """Each field's digest recomputed, the whole manifest's not."""
    from anonflow_std.publishing.manifest import integrity, manifest_bytes

    rel = copy_release(made, project)
    path = rel / "manifest.json"
    m = json.loads(path.read_text())
    m["seed"] += 1
    m["integrity"]["fields"] = integrity(m)["fields"]
    path.write_bytes(manifest_bytes(m))
    code, result = verify(cli, rel)
    assert code == 1
    assert failures(result) == ["manifest: digest of the whole manifest does not match integrity.manifest"]


def test_verify_names_every_unlisted_file_whatever_its_kind(cli, project, made):
    """Another data file, report or manifest beside the listed ones (the same bytes as a listed file)."""
    rel = copy_release(made, project)
    added = {"published-2.parquet": "published.parquet", "published-2.csv": "published.csv",
             "index.html": "report.html", "manifest.json.bak": "manifest.json", ".published.csv": "published.csv"}
    for name, like in added.items():
        (rel / name).write_bytes((rel / like).read_bytes())
    code, result = verify(cli, rel)
    assert code == 1
    assert sorted(failures(result)) == sorted(f"file {name}: is not listed in the manifest" for name in added)


def test_verify_compares_each_files_rows_with_the_manifest(cli, project, made):
    rel = copy_release(made, project)

    def edit(m):
        for f in m["files"]:
            if f["format"] in ("parquet", "csv"):
                f["rows"] = 1079

    forge(rel, edit)
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    for i, name in enumerate(("published.parquet", "published.csv")):
        assert f"file {name}: holds 1080 rows; manifest files[{i}].rows records 1079" in bad, bad


def test_verify_checks_each_claimed_model_with_its_claimed_parameters(cli, tmp_path):
    """Two claimed models, an evaluate step checking both with weaker parameters: published data
    made to break both claims (a class of one record) fails both, each named."""
    wf = formula_project(tmp_path)
    text = wf.read_text()
    assert text.count("\n  plain:\n") == 1
    wf.write_text(text.replace("\n  plain:\n", (
        "\n  scores:\n    uses: evaluate\n    input: [typed, grouped]\n"
        "    with: {metrics: [{alpha-k-anonymity: {k: 1, alpha: 1.0}}, {k-anonymity: {k: 1}}]}\n"
        "  plain:\n")))
    run_json(cli, wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "o")
    rel = tmp_path / "o" / "flat"
    code, result = verify(cli, rel)
    assert code == 0, failures(result)
    held = [i["what"] for i in result["findings"] if i["what"].startswith("claimed model")]
    assert held == ['claimed model alpha-k-anonymity (alpha=0.5, k=3, release.claims)',
                    'claimed model k-anonymity (by="class", k=3, release.claims)'], held

    def alone(t):   # the first record in a class of its own
        cls = t.column("_class").to_pylist()
        cls[0] = max(cls) + 1
        return t.set_column(t.column_names.index("_class"), "_class", pa.array(cls, t.schema.field("_class").type))

    _rewrite(rel, "published", alone)
    forge(rel, lambda m: None)
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    for label in held:
        assert any(f.startswith(f"{label}: does not hold on the published files") for f in bad), (label, bad)


def test_a_release_whose_checks_do_not_hold_on_its_files_is_refused(cli, project):
    """With enforce: false the run goes on past a failing check; the release publisher still refuses."""
    wf = census_workflow(project, extra=RELEASE)
    wf.write_text(wf.read_text().replace("with: {metrics: [sse-il, k-anonymity]}",
                                         "with: {metrics: [sse-il, {k-anonymity: {k: 10}}], enforce: false}"))
    res = cli("run", wf, "--db", project / "s.duckdb", "--out-dir", project / "out")
    assert res.exit_code == 1, res.output
    assert "release: privacy check(s) do not hold on the published files: k-anonymity (k-anonymity = 5" in res.output
    assert not (project / "out" / "release").exists()


def test_a_signature_by_a_key_the_manifest_does_not_record_fails(cli, project, made_signed):
    """The manifest's key fingerprint forged and the manifest re-signed by the same key."""
    from cryptography.hazmat.primitives import serialization

    rel, pub = signed_copy(made_signed, project)
    forge(rel, lambda m: m["signature"].__setitem__("public_key_sha256", "0" * 64))
    key = serialization.load_pem_private_key((project / "keys" / "release.key").read_bytes(), password=None)
    (rel / "manifest.sig").write_bytes(base64.b64encode(key.sign((rel / "manifest.json").read_bytes())) + b"\n")
    code, result = verify(cli, rel, "--key", pub)
    assert code == 1 and result["signature"]["status"] == "invalid"
    assert any(f.startswith("signature: the manifest records public key sha256 0000000000000000..., but it verifies "
                            "under ") for f in failures(result)), failures(result)


def test_a_metric_exactly_at_its_thresholds_passes_and_the_release_verifies(cli, project):
    """Thresholds are inclusive (``min <= value <= max``) in the manifest's verdicts, in the
    publisher's own re-check and in verify: k = 5 with min 5, no violating class with max 0."""
    wf = census_workflow(project, extra=RELEASE)
    wf.write_text(wf.read_text().replace(
        "with: {metrics: [sse-il, k-anonymity]}",
        "with: {metrics: [sse-il, k-anonymity], thresholds: {k-anonymity: {min: 5}, "
        "k-anonymity.violating_classes: {max: 0}}}"))
    run_json(cli, wf, "--db", project / "s.duckdb", "--out-dir", project / "out")
    rel = project / "out" / "release"
    m = json.loads((rel / "manifest.json").read_text())
    verdicts = {x["name"]: (x["value"], x["passed"]) for x in m["metrics"] if x["threshold"]}
    assert verdicts == {"k-anonymity": (5.0, True), "k-anonymity.violating_classes": (0.0, True)}, verdicts
    code, result = verify(cli, rel)
    assert code == 0, failures(result)


def test_a_threshold_that_cannot_be_compared_is_a_miss_not_a_crash(cli, project):
    """A forged evaluate step whose threshold bound is text: verify reports the miss."""
    wf = census_workflow(project, extra=RELEASE)
    wf.write_text(wf.read_text().replace("with: {metrics: [sse-il, k-anonymity]}",
                                         "with: {metrics: [sse-il, k-anonymity], thresholds: {k-anonymity: {min: 5}}}"))
    run_json(cli, wf, "--db", project / "s.duckdb", "--out-dir", project / "out")
    rel = project / "out" / "release"

    def edit(m):
        step = next(s for s in m["steps"] if s.get("step") == "scores")
        step["params"]["thresholds"] = {"k-anonymity": {"min": "five"}}

    forge(rel, edit)
    code, result = verify(cli, rel)
    assert code == 1
    assert any("misses the threshold {\"min\": \"five\"} of evaluate step scores" in f for f in failures(result)), \
        failures(result)


def test_a_published_file_that_hashes_right_but_cannot_be_read_fails(cli, project, made):
    rel = copy_release(made, project)
    name = next(p.name for p in rel.iterdir() if p.suffix == ".parquet")
    (rel / name).write_bytes(b"PAR1 not a parquet file PAR1")
    forge(rel, lambda m: None)  # every digest recomputed: only reading the file can tell
    code, result = verify(cli, rel)
    assert code == 1
    bad = failures(result)
    assert any(f.startswith(f"file {name}") and "cannot be read" in f for f in bad), bad
    assert "Traceback" not in json.dumps(result)


def test_a_lossy_join_check_recorded_in_a_table_release_is_named_with_its_index(cli, project, made):
    rel = copy_release(made, project)

    def edit(m):
        m["checks"].append({"check": "lossy-join-k", "params": {}, "result": {}, "recheck": True, "holds": None})

    forge(rel, edit)
    code, result = verify(cli, rel)
    assert code == 1
    n = len(json.loads((rel / "manifest.json").read_text())["checks"]) - 1
    assert f"manifest field checks: records lossy-join-k (checks[{n}]), which a 'table' release does not have" \
        in failures(result), failures(result)


def test_a_metric_verdict_recorded_the_wrong_way_round_is_named(cli, project, made):
    rel = copy_release(made, project)
    flipped = {}

    def edit(m):
        i, entry = next((i, e) for i, e in enumerate(m["metrics"]) if e.get("passed") is True)
        entry["passed"] = False
        flipped.update(i=i, name=f"{entry['step']}.{entry['name']}")

    forge(rel, edit)
    code, result = verify(cli, rel)
    assert code == 1
    bad = [f for f in failures(result) if f.startswith(f"manifest field metrics[{flipped['i']}].passed")]
    assert len(bad) == 1 and f"{flipped['name']} = " in bad[0], failures(result)
    assert bad[0].endswith("passes, but the manifest records passed = False"), bad[0]


def test_only_hierarchy_and_typing_steps_pin_files_for_a_rerun():
    """A forged algorithm step whose parameters look like a hierarchy spec pins no file."""
    from anonflow_std.publishing.release_files import recorded_files

    spec = {"age": {"files": {"path": "a" * 64}, "params": {"path": "h.csv"}}}
    manifest = {"sources": [], "steps": [{"kind": "algorithm", "step": "anon", "params": spec},
                                         {"kind": "evaluate", "step": "scores", "params": spec},
                                         {"kind": "hierarchy", "step": "hier", "params": spec}]}
    files, problems = recorded_files(manifest)
    assert problems == [] and files == {"h.csv": {"sha256": "a" * 64, "what": "hierarchy file of hier.age",
                                                  "text": False}}
    files, _ = recorded_files({"sources": [], "steps": manifest["steps"][:2]})
    assert files == {}
