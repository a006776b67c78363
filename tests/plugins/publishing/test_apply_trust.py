"""``anonflow apply`` trusts a release exactly as far as ``anonflow verify`` does (issue 28,
section 4 and the apply items of section 8): a release verify fails is refused (with and
without ``--key``), ``--key`` checks the signature, the sentence of what was checked on the
new batch is never empty, the output folder is never inside the release, a huge number in a
batch is one line; and the signing key's mode, ``--key`` given a private key, and
``latest`` as a run id."""

from __future__ import annotations

import json
import os
import shutil
import stat
import textwrap
from pathlib import Path

import pytest

from tests.support.helpers import CENSUS_QI, census_project, census_workflow, cli_invoker
from tests.plugins.publishing.test_release import RELEASE, failures, run_json, verify
from tests.plugins.publishing.test_release_trust import SIGNED, forge, keygen


def _batch(project: Path, rows: int = 300) -> Path:
    """The first ``rows`` Census records, as new data."""
    lines = (project / "data" / "sdcmicro" / "CASCrefmicrodata.csv").read_text().splitlines(keepends=True)
    path = project / "new.csv"
    path.write_text("".join(lines[: rows + 1]))
    return path


def _made(tmp_path_factory, extra: str) -> Path:
    """A project folder (Census data, keys/release.key) in which a Census MDAV release (k = 5)
    with the publish step ``extra`` was made: made once per module, copied by each test."""
    folder = census_project(tmp_path_factory.mktemp("made"))
    (folder / "keys").mkdir()
    cli = cli_invoker()
    keygen(cli, folder / "keys" / "release.key")
    run_json(cli, census_workflow(folder, extra=extra), "--db", folder / "s.duckdb", "--out-dir", folder / "out")
    _batch(folder)
    return folder


@pytest.fixture(scope="module")
def signed_made(tmp_path_factory):
    return _made(tmp_path_factory, SIGNED)


@pytest.fixture(scope="module")
def unsigned_made(tmp_path_factory):
    return _made(tmp_path_factory, RELEASE)


def _copy(made: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    folder = tmp_path / "p"
    shutil.copytree(made, folder, symlinks=True)    # (modes kept: the private key stays 0600)
    return folder / "out" / "release", folder / "keys" / "release.key.pub", folder / "new.csv"


@pytest.fixture
def signed(signed_made, tmp_path):
    """A signed Census MDAV release (k = 5), its public key and a batch of new records, in tmp_path/p."""
    return _copy(signed_made, tmp_path)


@pytest.fixture
def unsigned(unsigned_made, tmp_path):
    """The same release, unsigned (its folder also holds a key pair)."""
    return _copy(unsigned_made, tmp_path)


# -- section 4: apply refuses what verify fails -------------------------------------------------


def test_a_signed_release_whose_claims_were_lowered_is_refused_with_and_without_the_key(cli, signed, tmp_path):
    rel, pub, new = signed
    # as made (k = 5): 260 of the 300 records are in classes of fewer than 5, more than 20 % may withhold
    res = cli("apply", rel, new, "-o", tmp_path / "honest", "--suppression", "0.2", "--key", pub)
    assert res.exit_code == 1 and "does not satisfy the release's guarantee: k-anonymity" in res.output, res.output
    # an attacker lowers the claim to k = 2 and recomputes every digest: 54 records fail k = 2, within 20 %
    forge(rel, lambda m: m["release"].__setitem__("claims", {"k-anonymity": {"k": 2}}))
    assert cli("verify", rel).exit_code == 1 and cli("verify", rel, "--key", pub).exit_code == 1
    res = cli("apply", rel, new, "-o", tmp_path / "a", "--suppression", "0.2")
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert res.output.startswith("Error: the release does not verify, so apply will not publish under its name: "
                                 "privacy check k-anonymity (manifest checks[0]): the published files give another "
                                 "result than the recorded one: k-anonymity.k: recorded 5.0, now 2.0"), res.output
    assert f"see anonflow verify {rel}" in res.output
    res = cli("apply", rel, new, "-o", tmp_path / "a", "--suppression", "0.2", "--key", pub)
    assert res.exit_code == 2 and "signature: manifest.sig is not a valid signature of manifest.json" in res.output
    assert f"--key {pub}" in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "a").exists()


def test_the_checks_and_their_recorded_results_are_forged_too_and_the_key_still_refuses(cli, signed, tmp_path):
    """Claims, the recorded check and its result all lowered to k = 2: verify without --key cannot tell (the
    release is consistent on its face), so apply says the signature was not checked; with --key it refuses."""
    rel, pub, new = signed

    def edit(m):
        m["release"]["claims"] = {"k-anonymity": {"k": 2}}
        m["checks"][0]["result"]["k-anonymity.k"] = 2.0

    forge(rel, edit)
    res = cli("apply", rel, new, "-o", tmp_path / "a", "--suppression", "0.2")
    assert res.exit_code == 0, res.output
    assert ("the release is signed (public key sha256 " in res.output
            and "but its signature was not checked: give --key PUBLIC_KEY" in res.output), res.output
    assert json.loads((tmp_path / "a" / "application.json").read_text())["signature"]["status"] == "signed-unchecked"
    res = cli("apply", rel, new, "-o", tmp_path / "b", "--suppression", "0.2", "--key", pub)
    assert res.exit_code == 2 and "is not a valid signature of manifest.json" in res.output, res.output
    assert not (tmp_path / "b").exists()


def test_the_publishers_apply_takes_the_key_in_python(signed, tmp_path):
    """The API equivalent of --key: the release publisher's apply(..., key=)."""
    from anonflow.errors import InputError
    from anonflow.registry import get_registry
    from anonflow.session import Session

    rel, pub, new = signed
    publisher = get_registry().get("publisher", "release").obj
    engine = Session()
    record = publisher.apply(rel, new, tmp_path / "a", suppression=0.9, key=pub, engine=engine)
    assert record["signature"]["status"] == "valid" and record["checks"][0]["holds"] is True
    forge(rel, lambda m: m["release"].__setitem__("claims", {"k-anonymity": {"k": 2}}))
    with pytest.raises(InputError, match=r"^the release does not verify, so apply will not publish under its name: "
                                         r"signature: manifest.sig is not a valid signature"):
        publisher.apply(rel, new, tmp_path / "b", suppression=0.2, key=pub, engine=engine)
    with pytest.raises(InputError, match=r"k-anonymity.k: recorded 5.0, now 2.0"):
        publisher.apply(rel, new, tmp_path / "b", suppression=0.2, engine=engine)
    assert not (tmp_path / "b").exists()


def test_apply_checks_the_signature_with_the_key_and_says_what_it_checked(cli, signed, tmp_path):
    rel, pub, new = signed
    res = cli("apply", rel, new, "-o", tmp_path / "a", "--suppression", "0.9", "--key", pub)
    assert res.exit_code == 0, res.output
    assert "the release's signature is valid (public key sha256 " in res.output
    assert "checked on the new batch alone: k-anonymity (as claimed: k=5) holds" in res.output
    record = json.loads((tmp_path / "a" / "application.json").read_text())
    assert record["signature"]["status"] == "valid"
    other = keygen(cli, tmp_path / "other")
    res = cli("apply", rel, new, "-o", tmp_path / "b", "--suppression", "0.9", "--key", other)
    assert res.exit_code == 2 and "is not a valid signature" in res.output and not (tmp_path / "b").exists()
    # --key takes the public key: the private one is refused in one line, and never needed
    res = cli("apply", rel, new, "-o", tmp_path / "b", "--key", rel.parent.parent / "keys" / "release.key")
    assert res.exit_code == 2 and "is a private key; give its .pub file" in res.output
    assert len(res.output.strip().splitlines()) == 1
    res = cli("verify", rel, "--key", rel.parent.parent / "keys" / "release.key")
    assert res.exit_code == 2 and "is a private key; give its .pub file" in res.output


def test_an_unsigned_release_says_so_and_a_key_refuses_it(cli, unsigned, tmp_path):
    rel, _, new = unsigned
    res = cli("apply", rel, new, "-o", tmp_path / "a", "--suppression", "0.9")
    assert res.exit_code == 0, res.output
    assert "the release is unsigned: its authenticity rests on where you got it" in res.output
    pub = keygen(cli, tmp_path / "k")
    res = cli("apply", rel, new, "-o", tmp_path / "b", "--suppression", "0.9", "--key", pub)
    assert res.exit_code == 2 and "signature: the release is unsigned" in res.output and not (tmp_path / "b").exists()


def test_a_signed_release_stripped_of_its_signature_reads_as_unsigned_and_the_key_refuses_it(cli, signed, tmp_path):
    rel, pub, new = signed
    (rel / "manifest.sig").unlink()
    forge(rel, lambda m: m.__setitem__("signature", None))
    res = cli("apply", rel, new, "-o", tmp_path / "a", "--suppression", "0.9")
    assert res.exit_code == 0 and "the release is unsigned" in res.output, res.output
    res = cli("apply", rel, new, "-o", tmp_path / "b", "--suppression", "0.9", "--key", pub)
    assert res.exit_code == 2 and "signature: the release is unsigned" in res.output and not (tmp_path / "b").exists()


NO_EVALUATE = """\
    name: census-plain
    seed: 7
    sources:
      census: {path: data/sdcmicro/CASCrefmicrodata.csv}
    steps:
      typed: {uses: typing, input: census, with: {quasi: [QUASI]}}
      grouped: {uses: mdav, input: typed, with: {k: 5}}
      release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
    """


@pytest.fixture(scope="module")
def plain_made(tmp_path_factory) -> Path:
    """A project folder in which ``NO_EVALUATE`` was run (--out-dir out), made once per module."""
    folder = census_project(tmp_path_factory.mktemp("plain-made"))
    wf = folder / "wf.yaml"
    wf.write_text(textwrap.dedent(NO_EVALUATE).replace("QUASI", ", ".join(CENSUS_QI)))
    run_json(cli_invoker(), wf, "--db", folder / "s.duckdb", "--out-dir", folder / "out")
    return folder


@pytest.mark.parametrize("claims", ["none", "unknown-model"])
def test_the_sentence_of_what_was_checked_is_never_empty(cli, project, plain_made, tmp_path, claims):
    """A release with no evaluate step whose claims were emptied (verify holds: nothing is claimed), or that
    claims a model no installed plugin checks (verify fails it: refused)."""
    from tests.plugins.publishing.made_release import copy_into

    copy_into(plain_made, project, skip=("data",))   # NO_EVALUATE run in project (--out-dir out)
    rel, new = project / "out" / "release", _batch(project)

    def edit(m):
        m["release"]["claims"] = {} if claims == "none" else {**m["release"]["claims"], "acme.unheard-of": {"k": 3}}
        if claims == "none":
            m["checks"] = []

    forge(rel, edit)
    res = cli("apply", rel, new, "-o", tmp_path / "a")
    if claims == "unknown-model":
        assert res.exit_code == 2 and "claimed model acme.unheard-of: no installed check plugin" in res.output
        return
    assert verify(cli, rel)[0] == 0, failures(verify(cli, rel)[1])
    assert res.exit_code == 0, res.output
    assert ("checked on the new batch alone: nothing: the release claims no privacy model and no evaluate step of "
            "its table checks one, so no guarantee was checked") in res.output
    record = json.loads((tmp_path / "a" / "application.json").read_text())
    assert record["checks"] == [] and record["checked_sentence"].startswith("nothing: ")


# -- section 8: the output folder, huge numbers --------------------------------------------------


@pytest.mark.parametrize("where", ["inside", "itself", "link-inside", "deep"])
def test_an_output_folder_in_the_release_is_refused_and_the_release_still_verifies(cli, unsigned, tmp_path, where):
    rel, _, new = unsigned
    project = rel.parent.parent
    (tmp_path / "link").symlink_to(rel)
    out = {"inside": rel / "inside", "itself": rel, "link-inside": tmp_path / "link" / "inside",
           "deep": project / "out" / ".." / "out" / "release" / "x"}[where]
    res = cli("apply", rel, new, "-o", out, "--suppression", "0.9")
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert f"output {out} is {'the release folder' if where == 'itself' else 'inside the release folder'}" in res.output
    assert cli("verify", rel).exit_code == 0
    assert sorted(p.name for p in rel.iterdir()) == ["manifest.json", "published.csv", "published.parquet",
                                                     "report.html"]


@pytest.mark.parametrize("value,shown", [("1e23", "has no row for the value '1e+23'"),
                                         ("-1e23", "has no row for the value '-1e+23'"),
                                         ("nan", "has 1 missing value(s), the first in record 1")])
def test_a_huge_number_in_a_batch_is_one_line_naming_the_value(cli, adult, tmp_path, value, shown):
    release, held = adult
    if value == "nan":  # a CSV reads 'nan' as missing: a Parquet batch carries a NaN, which typing calls missing
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        table = pacsv.read_csv(held, parse_options=pacsv.ParseOptions(delimiter=";"))
        ages = table.column("age").cast(pa.float64()).to_pylist()
        ages[0] = float("nan")
        table = table.set_column(table.column_names.index("age"), "age", pa.array(ages, pa.float64()))
        batch = tmp_path / "big.parquet"
        pq.write_table(table, batch)
    else:
        lines = held.read_text().splitlines(keepends=True)
        cells = lines[1].split(";")
        cells[lines[0].split(";").index("age")] = value
        lines[1] = ";".join(cells)
        batch = tmp_path / "big.csv"
        batch.write_text("".join(lines))
    res = cli("apply", release, batch, "-o", tmp_path / "a", "--suppression", "0.5")
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert "column 'age'" in res.output and shown in res.output, res.output
    assert "ArrowInvalid" not in res.output and not (tmp_path / "a").exists()


# -- section 8: the signing key's mode -------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620], ids=lambda m: f"{m:04o}")
def test_a_signing_key_open_to_others_is_refused_as_ssh_does(cli, project, mode):
    (project / "keys").mkdir()
    keygen(cli, project / "keys" / "release.key")
    key = project / "keys" / "release.key"
    key.chmod(mode)
    wf = census_workflow(project, extra=SIGNED)
    res = cli("run", wf, "--db", project / "s.duckdb", "--out-dir", project / "out")
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert f"signing key {key} is open to others (mode {mode:04o}" in res.output
    assert f"chmod 600 {key}" in res.output
    assert not (project / "out").exists()
    if mode == 0o644:  # the same key, owner-only, signs
        key.chmod(0o600)
        assert cli("run", wf, "--db", project / "s.duckdb", "--out-dir", project / "out").exit_code == 0


def test_keygen_writes_the_private_key_0600_whatever_the_umask(cli, tmp_path):
    old = os.umask(0)
    try:
        pub = keygen(cli, tmp_path / "k")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600
    assert stat.S_IMODE(pub.stat().st_mode) == 0o644


# -- section 8: latest -----------------------------------------------------------------------------


def test_latest_names_the_newest_run_in_report_runs_and_lineage(cli, project, tmp_path):
    wf = census_workflow(project, extra=RELEASE)
    db = project / "s.duckdb"
    run_json(cli, wf, "--db", db, "--out-dir", project / "out")
    shutil.rmtree(project / "out")
    newest = run_json(cli, wf, "--db", db, "--out-dir", project / "out", "--set", "grouped.k=6")["run_id"]
    res = cli("report", "latest", "--db", db, "-o", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    assert f"report of run {newest} written" in res.output
    assert cli("report", newest, "--db", db).output == (tmp_path / "r.html").read_text()
    res = cli("runs", "latest", "--db", db, "--json")
    assert res.exit_code == 0 and json.loads(res.output)["run"]["run_id"] == newest
    res = cli("lineage", "grouped", "--run", "latest", "--db", db, "--json")
    assert res.exit_code == 0 and json.loads(res.output)[0][1]["run_id"] == newest
    empty = tmp_path / "empty.duckdb"
    from anonflow.store import Store

    Store(empty).close()
    res = cli("report", "latest", "--db", empty)
    assert res.exit_code == 1 and "no run recorded" in res.output and len(res.output.strip().splitlines()) == 1
