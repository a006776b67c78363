"""Names are never patterns: every name the user chooses is used as it is.

A folder, store, source file or step name with ``[``, ``*``, ``?``, ``%``, ``_``, spaces and
non-ASCII letters runs a partitioned workflow on processes:2 and is purged; a decoy that the
name would match as a glob pattern lies beside each, and is never read, written or removed.
The engine and the plugins hold no glob, fnmatch or SQL LIKE (checked on their source).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import write

ROOT = Path(__file__).resolve().parents[2]
#: SQL that matches a pattern (the engine writes SQL keywords in capitals), and DuckDB's glob()
SQL_PATTERN = re.compile(r"\b(I?LIKE|GLOB|SIMILAR TO)\b|\bglob\(|\blike_escape\b|\bfnmatch\b")
ODD = "ä [1]*?%_ é"
#: source and step names hold ASCII letters, digits, "_" and "-" only (the rest is refused)
STEP = "_x_y-1"


def test_a_partitioned_run_and_a_purge_with_odd_names_everywhere(tmp_path, cli):
    base = tmp_path / f"w{ODD}"
    base.mkdir()
    # decoys: what each odd name matches as a glob pattern ('[1]' -> '1', '*' and '?' -> anything)
    decoy = tmp_path / "wä 1xx%_ é"
    decoy.mkdir()
    rows = "age,sex,d\n" + "".join(f"{20 + i},{'mf'[i % 2]},{'abc'[i % 3]}\n" for i in range(60))
    (base / f"d{ODD}.csv").write_text(rows)
    (base / "dä 1xx%_ é.csv").write_text("age,sex,d\n1,m,a\n")  # a decoy source beside it
    wf = write(base / f"wf{ODD}.yaml", f"""
        name: odd
        seed: 1
        sources: {{"s{STEP}": "d{ODD}.csv"}}
        steps:
          "t{STEP}": {{uses: typing, input: "s{STEP}", with: {{quasi: {{age: continuous}}, sensitive: [d]}}}}
          "p{STEP}": {{uses: partition, input: "t{STEP}", with: {{max_records: 15}}}}
          "m{STEP}": {{uses: mdav, input: "p{STEP}", with: {{k: 3}}}}
          "o{STEP}": {{uses: publish, input: "m{STEP}", with: {{publisher: csv, path: "r{ODD}.csv"}}}}
        """)
    out, work, temp = base / f"out{ODD}", base / f"work{ODD}", base / f"tmp{ODD}"
    # DuckDB reads '?' in a database path as the start of options: such a store is refused in one line
    res = cli("run", wf, "--db", base / f"s{ODD}.duckdb")
    assert res.exit_code == 1 and "holds '?'" in res.output and "Traceback" not in res.output, res.output
    db = tmp_path / f"s{ODD.replace('?', '')}.duckdb"
    for folder in (decoy / f"out{ODD}", decoy / f"work{ODD}"):
        folder.mkdir()
    res = cli("run", wf, "--db", db, "--out-dir", out, "--work-dir", work, "--temp-dir", temp,
              "--executor", "processes:2", "--json")
    assert res.exit_code == 0, res.output
    result = json.loads(res.output)
    assert result["status"] == "succeeded"
    published = (out / f"r{ODD}.csv").read_text().splitlines()
    assert len(published) == 61  # every record of the odd-named source, not the decoy's one
    step = next(s for s in result["steps"] if s["step"] == f"m{STEP}")
    assert any("ran on 4 fragment group(s)" in n for n in step["notes"]), step["notes"]
    for folder in (out, work, temp, decoy / f"out{ODD}", decoy / f"work{ODD}"):
        assert [p.name for p in folder.iterdir() if p.name.startswith((".anonflow-", "anonflow-"))] == []
    # a purge copy beside a store whose name is a pattern, and a decoy matching it
    stray = tmp_path / f".s{ODD.replace('?', '')}.duckdb.purge-0123456789ab"
    stray.write_bytes(b"left by a killed purge")
    other = tmp_path / ".sä 1x%_ é.duckdb.purge-0123456789ab"
    other.write_bytes(b"not this store's")
    res = cli("purge", "--db", db, "--all")
    assert res.exit_code == 0, res.output
    assert not stray.exists() and other.exists()
    assert (base / "dä 1xx%_ é.csv").exists() and (out / f"r{ODD}.csv").exists()
    res = cli("runs", "--db", db, "--json")
    assert json.loads(res.output)[0]["run_id"] == result["run_id"]


def test_a_source_file_is_read_as_named_not_as_a_pattern(tmp_path, cli):
    """``d[1].parquet`` with ``d1.parquet`` beside it: DuckDB's reader would take the name as
    a pattern and read the other file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"age": [30, 31, 32, 33], "sex": ["m", "f", "m", "f"]}), tmp_path / "d[1].parquet")
    pq.write_table(pa.table({"age": [99], "sex": ["x"]}), tmp_path / "d1.parquet")
    wf = write(tmp_path / "wf.yaml", """
        name: lit
        seed: 1
        sources: {d: "d[1].parquet"}
        steps:
          t: {uses: typing, input: d, with: {quasi: {age: continuous, sex: nominal}}}
        """)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    assert next(s for s in json.loads(res.output)["steps"] if s["step"] == "t")["rows"] == 4


def test_no_glob_fnmatch_or_like_in_the_engine_or_plugins():
    """No module imports glob or fnmatch, calls Path.glob/rglob, or writes LIKE in SQL; but the
    parquet-dataset source, whose ``path`` the user declares a pattern (``format:
    parquet-dataset``: docs/workflows.md)."""
    found = []
    for folder in (ROOT / "anonflow", ROOT / "plugins"):
        for path in folder.rglob("*.py"):  # our own fixed tree: no user name in this pattern
            if path == ROOT / "anonflow" / "sources" / "parquetdataset.py":
                continue
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import) and any(a.name in ("glob", "fnmatch") for a in node.names):
                    found.append(f"{path}: import")
                elif isinstance(node, ast.ImportFrom) and node.module in ("glob", "fnmatch"):
                    found.append(f"{path}: from-import")
                elif isinstance(node, ast.Attribute) and node.attr in ("glob", "rglob", "iglob", "fnmatch"):
                    found.append(f"{path}:{node.lineno}: .{node.attr}")
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_PATTERN.search(node.value):
                    found.append(f"{path}:{node.lineno}: SQL pattern")
    assert found == []


def test_workers_start_from_a_script_piped_to_python(tmp_path):
    """An API run with processes:2 from a script on standard input (``python - < script``):
    the workers used to die at start (they re-run the main script, '<stdin>', not a file),
    and the run said 'out of memory'."""
    rows = "age,sex,d\n" + "".join(f"{20 + i},{'mf'[i % 2]},{'abc'[i % 3]}\n" for i in range(40))
    (tmp_path / "d.csv").write_text(rows)
    script = f"""
import anonflow
wf = anonflow.Workflow.from_dict({{"name": "piped", "seed": 1, "sources": {{"d": "d.csv"}}, "steps": {{
    "t": {{"uses": "typing", "input": "d", "with": {{"quasi": {{"age": "continuous"}}}}}},
    "p": {{"uses": "partition", "input": "t", "with": {{"max_records": 10}}}},
    "m": {{"uses": "mdav", "input": "p", "with": {{"k": 3}}}}}}}}, base_dir={str(tmp_path)!r})
result = wf.run(db={str(tmp_path / 's.duckdb')!r}, out_dir={str(tmp_path / 'out')!r}, executor="processes:2")
print("STATUS", result.status)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")])}
    done = subprocess.run([sys.executable, "-"], input=script, env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and "STATUS succeeded" in done.stdout, done.stdout + done.stderr


def test_too_many_worker_processes_are_capped_with_a_message(tmp_path, cli):
    from anonflow.executor_spec import most_workers

    rows = "age,sex\n" + "".join(f"{20 + i},{'mf'[i % 2]}\n" for i in range(10))
    (tmp_path / "d.csv").write_text(rows)
    wf = write(tmp_path / "wf.yaml", """
        name: cap
        seed: 1
        sources: {d: d.csv}
        steps:
          t: {uses: typing, input: d, with: {quasi: {age: continuous, sex: nominal}}}
        """)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--executor", "processes:4096")
    assert res.exit_code == 0, res.output
    assert f"4096 worker processes asked for, {most_workers()} started" in res.output
