"""The workflow file format is declared once (anonflow/workflow/model.py) and checked before
anything else reads a file: each problem is one line naming the file, the line and the key,
exit code 2. The declaration ships as a JSON Schema; hostile inputs that used to end in a
traceback (``input: -1``, ``metrics: true``, a NUL byte in a path, ``inf`` in a continuous
column, ``new-plugin`` and ``keygen`` on odd paths) are refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import anonflow
from anonflow.workflow.reference import json_schema_text

from tests.support.helpers import ROOT, census_workflow, write

SCHEMA_FILE = ROOT / "anonflow" / "schemas" / "workflow.schema.json"


def one_line_error(res) -> str:
    assert res.exit_code == 2, res.output
    lines = res.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in res.output, res.output
    return lines[0]


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


# -- the shipped JSON Schema ----------------------------------------------------------

def test_the_shipped_json_schema_is_what_the_declaration_generates(cli):
    assert SCHEMA_FILE.read_text(encoding="utf-8") == json_schema_text(), \
        "anonflow/schemas/workflow.schema.json is stale: run python -m anonflow.workflow.reference"
    res = cli("schema")
    assert res.exit_code == 0 and res.output == json_schema_text()
    schema = json.loads(res.output)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["required"] == ["steps"] and schema["additionalProperties"] is False
    assert 'anonflow = ["py.typed", "schemas/*.json"]' in (ROOT / "pyproject.toml").read_text()


def test_the_json_schema_knows_each_built_in_step_and_its_parameters():
    from anonflow.steps import BUILTINS

    from anonflow.shapes import NAME_PATTERN

    steps = json.loads(json_schema_text())["properties"]["steps"]
    assert steps["additionalProperties"] is False and steps["minProperties"] == 1
    steps = steps["patternProperties"][NAME_PATTERN]
    kinds = steps.get("oneOf") or steps.get("anyOf")
    by_uses = {k["properties"]["uses"].get("const"): k for k in kinds}
    assert set(BUILTINS) <= set(by_uses) and None in by_uses  # None: any plugin's name
    assert by_uses[None]["properties"]["uses"]["not"] == {"enum": list(BUILTINS)}
    typing_with = by_uses["typing"]["properties"]["with"]
    typing_with = next((s for s in typing_with.get("anyOf", [typing_with]) if s.get("type") == "object"))
    assert set(typing_with["properties"]) == {p.name for p in BUILTINS["typing"].params}
    assert typing_with["properties"]["others"]["enum"] == ["drop", "insensitive"]


# -- the tracebacks the fuzzer found, now one line with file, line and key ----------------

@pytest.mark.parametrize("old, new, key, message", [
    ("input: census\n", "input: -1\n", "input: -1", "step 'typed': input: expected a source or step name, or a list "
                                                      "of them, got -1"),
    ("input: typed\n", "input: true\n", "input: true", "step 'grouped': input: expected a source or step name, or a "
                                                       "list of them, got True"),
    ("{metrics: [sse-il, k-anonymity]}", "{metrics: true}", "metrics: true",
     "step 'scores': with.metrics: expected a metric name, a list of them, or a mapping name -> parameters, got True"),
    ("with: {k: 5}", "with: {k: .inf}", "k: .inf", "step 'grouped': with.k holds a number that is not finite: inf"),
    ("with: {k: 5}", "with: {k: 100000000000000000000000000000}", "k: 1000",
     "step 'grouped': with.k holds an integer beyond 64 bits"),
    ("seed: 7", "seed: 2019-01-01", "seed:", "'seed' must be an integer from 0 to"),
    ("uses: mdav", "uses: [mdav]", "uses: [mdav]", "step 'grouped': uses: expected text, got ['mdav']"),
    ("    uses: mdav\n", "    uses: mdav\n    inptu: typed\n", "inptu:",
     "step 'grouped': unknown key 'inptu' (did you mean 'input'?)"),
])
def test_a_malformed_file_is_one_line_with_its_line_and_key(cli, project, old, new, key, message):
    wf = census_workflow(project)
    text = wf.read_text()
    assert old in text
    wf.write_text(text.replace(old, new, 1))
    for command in ("plan", "run"):
        line = one_line_error(cli(command, wf, "--db", project / "s.duckdb") if command == "run" else cli(command, wf))
        assert line.startswith(f"Error: {wf}: line {line_of(wf, key)}: "), line
        assert message in line
    assert not (project / "s.duckdb").exists()  # refused before anything ran


def test_a_nul_byte_in_a_hierarchy_file_path_is_one_line(cli, tmp_path):
    """It reached Path.is_file(), which raised 'ValueError: embedded null byte'."""
    shutil.copytree(ROOT / "workflows" / "data" / "arx", tmp_path / "data" / "arx")
    wf = write(tmp_path / "wf.yaml", r"""
        sources: {adult: {path: data/arx/adult.csv, delimiter: ";"}}
        steps:
          typed: {uses: typing, input: adult, with: {quasi: [age, sex]}}
          hier:
            uses: hierarchy
            input: typed
            with:
              sex: {arx: data/arx/adult_hierarchy_sex.csv}
              age: {arx: "data/arx/adult_hierarchy_age.csv\0"}
        """)
    for args in (("plan", wf), ("run", wf, "--db", tmp_path / "s.duckdb")):
        line = one_line_error(cli(*args))
        assert f"{wf}: line 9: step 'hier': with.age.arx holds text with a NUL character" in line
    assert not (tmp_path / "s.duckdb").exists()
    wf.write_text(wf.read_text().replace(r"csv\0", "csv"))
    assert cli("plan", wf, "--no-preview").exit_code == 0
    # the same through --set, which cannot give a line: it names the override
    line = one_line_error(cli("plan", wf, "--set", 'hier.sex={arx: "x\\0.csv"}'))
    assert f"{wf}: with --set hier.sex: step 'hier': with.sex.arx holds text with a NUL character" in line


def test_set_overrides_are_held_to_the_format(cli, project):
    wf = census_workflow(project)
    line = one_line_error(cli("plan", wf, "--set", "scores.metrics=true"))
    assert "with --set scores.metrics: step 'scores': with.metrics: expected a metric name" in line
    line = one_line_error(cli("plan", wf, "--set", "typed.quasi={AGI: continous}"))
    assert "type must be one of continuous, ordinal, nominal, semantic, got 'continous' (did you mean " \
           "'continuous'?)" in line


def test_the_python_api_gets_the_same_checks():
    wf = anonflow.Workflow.from_dict({"sources": {"d": "d.csv"},
                                      "steps": {"t": {"uses": "typing", "input": -1, "with": {"quasi": ["a"]}}}})
    with pytest.raises(anonflow.WorkflowError) as err:
        wf.plan()
    assert "step 't': input: expected a source or step name, or a list of them, got -1" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_column_listed_twice_under_a_role_is_refused(cli, project):
    wf = census_workflow(project)
    wf.write_text(wf.read_text().replace("quasi: [AFNLWGT, AGI,", "quasi: [AFNLWGT, AGI, AGI,"))
    line = one_line_error(cli("plan", wf, "--no-preview"))
    assert f"{wf}: step 'typed': column 'AGI' is listed twice under 'quasi'; name each column once" in line
    wf = census_workflow(project)
    line = one_line_error(cli("plan", wf, "--no-preview", "--set", "typed.quasi=[AGI, {AGI: continuous}]"))
    assert "column 'AGI' is listed twice under 'quasi'" in line
    line = one_line_error(cli("plan", wf, "--no-preview", "--set", "typed.sensitive=[FICA, FICA]"))
    assert "column 'FICA' is listed twice under 'sensitive'" in line


# -- inf in a continuous quasi-identifier -------------------------------------------------

@pytest.mark.parametrize("value, types, shown", [
    ("inf", "", "(inf)"), ("-Infinity", "", "(-inf)"), ("Infinity", ", types: {age: VARCHAR}", "('Infinity')"),
])
def test_a_continuous_column_holding_inf_is_refused_naming_column_and_record(cli, tmp_path, value, types, shown):
    rows = ["age,zip,income"] + [f"{20 + i % 40}.5,{'ab'[i % 2]},{i % 7}" for i in range(60)]
    rows[4] = f"{value},a,3"
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    wf = write(tmp_path / "wf.yaml", f"""
        sources: {{d: {{path: d.csv{types}}}}}
        steps:
          t: {{uses: typing, input: d, with: {{quasi: {{age: continuous}}, sensitive: [income]}}}}
          g: {{uses: mdav, input: t, with: {{k: 3}}}}
          p: {{uses: publish, input: g, with: {{publisher: csv, path: x.csv}}}}
        """)
    for args in (("plan", wf), ("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "out")):
        line = one_line_error(cli(*args))
        assert f"step 't': column 'age' is declared continuous but 1 record(s) hold a number that is not finite, " \
               f"the first in record 4 {shown}" in line
    assert not (tmp_path / "out" / "x.csv").exists()


# -- new-plugin and keygen on odd paths -------------------------------------------------

def read_only(folder: Path):
    """A command line running ``argv`` with ``folder`` mounted read-only (root: a mount
    namespace of its own; others: the folder's write bits cleared)."""
    if os.geteuid() == 0:  # root writes anywhere: only a read-only mount stops it
        probe = ["unshare", "-m", "sh", "-c", f'mount --bind -o ro "{folder}" "{folder}"']
        if shutil.which("unshare") is None or subprocess.run(probe, capture_output=True).returncode != 0:
            pytest.skip("root needs a mount namespace (unshare -m) to make a read-only folder")
        return lambda argv: ["unshare", "-m", "sh", "-c", f'mount --bind -o ro "{folder}" "{folder}" && exec "$@"',
                             "sh", *argv]
    folder.chmod(0o555)
    return lambda argv: argv


def anonflow_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "anonflow", *map(str, args)]


def test_new_plugin_on_a_dangling_link_or_an_unwritable_folder_is_one_line(cli, tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "missing")
    line = one_line_error(cli("new-plugin", "acme", "--dir", tmp_path / "link"))
    assert "--dir" in line and "is a symbolic link to" in line and "not a folder" in line
    assert not (tmp_path / "missing").exists()
    (tmp_path / "file").write_text("x")
    line = one_line_error(cli("new-plugin", "acme", "--dir", tmp_path / "file" / "sub"))
    assert "cannot write" in line and "Not a directory" in line
    ro = tmp_path / "ro"
    ro.mkdir()
    wrap = read_only(ro)
    res = subprocess.run(wrap(anonflow_cmd("new-plugin", "acme", "--dir", ro)), capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [f"Error: new-plugin: cannot write {ro}/anonflow-acme: "
                                               f"{'Read-only file system' if os.geteuid() == 0 else 'Permission denied'}"
                                               "; no package was written"]
    assert not any(ro.iterdir())


def test_new_plugin_never_writes_through_a_planted_link(cli, tmp_path):
    """The temporary folder used to be .anonflow-NAME.tmp-PID: a link planted at that name sent
    the package's files into the folder it points to. Plant one at every name the old code
    could use here (this process's id) and at the mkdtemp prefix: nothing goes through them."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    base = tmp_path / "base"
    base.mkdir()
    for name in (f".anonflow-acme.tmp-{os.getpid()}", ".anonflow-acme.tmp-"):
        (base / name).symlink_to(elsewhere)
    res = cli("new-plugin", "acme", "--dir", base)
    assert res.exit_code == 0, res.output
    assert not any(elsewhere.iterdir())
    assert (base / "anonflow-acme" / "pyproject.toml").is_file()
    assert sorted(p.name for p in base.iterdir()) == sorted(["anonflow-acme", f".anonflow-acme.tmp-{os.getpid()}",
                                                             ".anonflow-acme.tmp-"])
    mode = (base / "anonflow-acme").stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o777 & ~umask  # as a folder made by mkdir, not mkdtemp's owner-only mode


def test_keygen_with_no_file_name_or_an_unwritable_folder_is_one_line(cli, tmp_path):
    pytest.importorskip("cryptography")
    line = one_line_error(cli("keygen", ""))
    assert "names no file" in line
    ro = tmp_path / "ro"
    ro.mkdir()
    res = subprocess.run(read_only(ro)(anonflow_cmd("keygen", ro / "k")), capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and f"keygen: cannot write {ro}/k" in res.stderr
    assert not any(ro.iterdir())


def test_a_parameter_name_that_is_not_text_is_one_line(cli, tmp_path):
    """Found by the fuzz test: `0: [5, 10]` in a hierarchy builder's parameters reached difflib
    ('int' object is not iterable)."""
    shutil.copytree(ROOT / "workflows" / "data" / "arx", tmp_path / "data" / "arx")
    wf = write(tmp_path / "wf.yaml", """
        sources: {adult: {path: data/arx/adult.csv, delimiter: ";"}}
        steps:
          typed: {uses: typing, input: adult, with: {quasi: {age: continuous}}}
          hier: {uses: hierarchy, input: typed, with: {age: {interval: {0: [5, 10, 20], anchor: 0}}}}
        """)
    line = one_line_error(cli("plan", wf, "--no-preview"))
    assert "step 'hier': column 'age': hierarchy builder 'interval': parameter name 0 is not text" in line
    line = one_line_error(cli("plan", wf, "--no-preview", "--set", "hier.age={interval: {true: [5]}}"))
    assert "with --set hier.age: step 'hier': with.age.interval has the key True; keys are text" in line
