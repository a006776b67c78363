"""Interrupted runs leave nothing behind (anonflow.cleanup).

Real signals to real ``anonflow run`` processes. The runs use a third-party test plugin
(tests/runner/slowplugin: an algorithm and a publisher that mark their process and then wait), found
like an installed plugin through ``PYTHONPATH``, so each signal arrives at a known point:
while every worker holds a fragment group, or while a later publish step runs.

- SIGTERM, SIGHUP and SIGINT mid-partitioned-step (processes:2, local, a Dask LocalCluster):
  the run exits non-zero, its workers are gone, no work, Dask or spill folder and no journal
  is left;
- SIGKILL mid-step: the workers die with the run; what it left is removed the next time a run
  publishes into that folder (another store's too) or the store is opened for writing, and
  ``anonflow runs`` shows the run as interrupted and says what was cleaned;
- SIGKILL while publishing: the earlier output moved aside is put back (the same file).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.support.helpers import write

ROOT = Path(__file__).resolve().parents[2]
SLOW_PLUGIN = Path(__file__).resolve().parent / "slowplugin"


def workflow(folder: Path, *, slow_publish: bool = False) -> Path:
    """40 records cut into 4 fragments of 10; ``test.slow`` runs on each; published as CSV
    (then, with ``slow_publish``, a publish step that waits)."""
    (folder / "d.csv").write_text("age,sex,d\n" + "".join(f"{20 + i},{'mf'[i % 2]},{'abc'[i % 3]}\n"
                                                         for i in range(40)))
    extra = "  wait: {uses: publish, input: slow, with: {publisher: test.slow}}\n" if slow_publish else ""
    return write(folder / "wf.yaml", """
        name: slow
        seed: 1
        sources: {d: d.csv}
        steps:
          typed: {uses: typing, input: d, with: {quasi: {age: continuous, sex: nominal}, sensitive: [d]}}
          parts: {uses: partition, input: typed, with: {max_records: 10}}
          slow: {uses: test.slow, input: parts}
          out: {uses: publish, input: slow, with: {publisher: csv, path: slow.csv}}
        """ + extra)


def env(tmp: Path, marks: Path | None, seconds: float, publish_seconds: float = 0.0) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(SLOW_PLUGIN)])
    e["ANONFLOW_TEST_SLOW_SECONDS"] = str(seconds)
    e["ANONFLOW_TEST_SLOW_PUBLISH_SECONDS"] = str(publish_seconds)
    e["TMPDIR"] = str(tmp)  # Dask's local folders and DuckDB's spill folder go here
    e.pop("ANONFLOW_PLUGINS", None)
    if marks is not None:
        e["ANONFLOW_TEST_SLOW_MARKS"] = str(marks)
    return e


def anonflow(*args, tmp: Path, marks: Path | None = None, seconds: float = 0.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "anonflow", *map(str, args)], env=env(tmp, marks, seconds),
                          capture_output=True, text=True, timeout=300)


def show_runs(*args) -> Result:
    """``anonflow runs ARGS`` in this process (a read-only look at the store; the runs and the
    opens for writing that clean up stay real ``anonflow`` processes)."""
    from anonflow.cli import main

    return CliRunner().invoke(main, ["runs", *map(str, args)], catch_exceptions=False)


def start(*args, tmp: Path, marks: Path, seconds: float = 120.0, publish_seconds: float = 0.0) -> subprocess.Popen:
    marks.mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "anonflow", *map(str, args)],
                            env=env(tmp, marks, seconds, publish_seconds),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_marks(proc: subprocess.Popen, marks: Path, n: int, kind: str = "algorithm") -> list[int]:
    """The process ids of the first ``n`` tasks (of the plugin's ``kind``) that began waiting."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pids = [int(p.name.split("-")[1]) for p in marks.iterdir() if p.name.startswith(f"{kind}-")]
        if len(pids) >= n:
            return pids
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended before {n} task(s) waited: {out}{err}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("no task began waiting")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(pids, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def leftovers(*folders: Path) -> list[str]:
    """Whatever a run may leave: work, Dask and spill folders, moved-aside outputs, journals."""
    prefixes = (".anonflow-work-", ".anonflow-previous-", ".anonflow-journal-", "anonflow-dask-", "anonflow-spill-")
    return sorted(str(p) for f in folders if f.is_dir() for p in f.iterdir() if p.name.startswith(prefixes))


@pytest.mark.parametrize("executor,sig", [("processes:2", signal.SIGTERM), ("processes:2", signal.SIGHUP),
                                          ("local", signal.SIGINT)])
def test_a_signal_mid_step_ends_the_workers_and_leaves_nothing(tmp_path, executor, sig):
    wf = workflow(tmp_path)
    out, db, marks = tmp_path / "out", tmp_path / "s.duckdb", tmp_path / "marks"
    proc = start("run", wf, "--db", db, "--out-dir", out, "--executor", executor, tmp=tmp_path, marks=marks)
    workers = wait_for_marks(proc, marks, 2 if executor != "local" else 1)
    assert leftovers(out), "the run was not under way"
    if executor != "local":
        assert proc.pid not in workers
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0, stdout + stderr
    assert "Traceback" not in stderr, stderr
    assert gone(workers), [p for p in workers if alive(p)]
    assert leftovers(out, tmp_path) == []
    # the store says it was interrupted and that nothing was left to clean
    shown = show_runs("--db", db, "--json")
    (run,) = json.loads(shown.stdout)
    assert run["status"] == "failed" and run["error"] == "interrupted" and run["cleaned"] == []


def test_sigterm_ends_a_dask_local_cluster_and_removes_its_folders(tmp_path):
    pytest.importorskip("distributed")
    wf = workflow(tmp_path)
    out, marks = tmp_path / "out", tmp_path / "marks"
    proc = start("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", out, "--executor", "dask:2",
                 tmp=tmp_path, marks=marks)
    workers = wait_for_marks(proc, marks, 2)
    assert [p for p in leftovers(tmp_path) if "anonflow-dask-" in p], leftovers(tmp_path)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0, stdout + stderr
    assert gone(workers, 60)
    assert leftovers(out, tmp_path) == []


def test_what_a_killed_run_left_is_cleaned_by_the_next_run_and_runs_says_so(tmp_path):
    wf = workflow(tmp_path)
    out, db, marks = tmp_path / "out", tmp_path / "s.duckdb", tmp_path / "marks"
    proc = start("run", wf, "--db", db, "--out-dir", out, "--executor", "processes:2", tmp=tmp_path, marks=marks)
    workers = wait_for_marks(proc, marks, 2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert gone(workers), "the workers outlived the killed run"
    left = leftovers(out, tmp_path)
    assert any(".anonflow-work-slow-" in p for p in left) and any(".anonflow-journal-" in p for p in left), left
    # before anything opens the store for writing, 'runs' shows the run as interrupted
    (run,) = json.loads(show_runs("--db", db, "--json").stdout)
    assert run["status"] == "interrupted" and run["cleaned"] is None
    # the next run with this store (publishing elsewhere) cleans up after it
    again = anonflow("run", wf, "--db", db, "--out-dir", tmp_path / "elsewhere", tmp=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert leftovers(out, tmp_path, tmp_path / "elsewhere") == []
    shown = show_runs("--db", db).stdout
    line = next(x for x in shown.splitlines() if x.startswith(run["run_id"]))
    assert "interrupted" in line and "cleaned up after it: " in line, line
    assert "removed the work folder" in line and "removed the DuckDB spill folder" in line, line
    detail = show_runs(run["run_id"], "--db", db).stdout
    assert "cleaned up after it: removed the work folder" in detail


def test_another_store_publishing_into_the_folder_cleans_up_too(tmp_path):
    wf = workflow(tmp_path)
    out, marks = tmp_path / "out", tmp_path / "marks"
    proc = start("run", wf, "--db", tmp_path / "a.duckdb", "--out-dir", out, tmp=tmp_path, marks=marks)
    wait_for_marks(proc, marks, 1)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert leftovers(out)
    other = anonflow("run", wf, "--db", tmp_path / "b.duckdb", "--out-dir", out, tmp=tmp_path)
    assert other.returncode == 0, other.stdout + other.stderr
    assert "cleaned up after interrupted run" in other.stderr
    assert leftovers(out, tmp_path) == []
    # the first store, opened again, says who cleaned up
    anonflow("run", wf, "--db", tmp_path / "a.duckdb", "--out-dir", tmp_path / "o2", tmp=tmp_path)
    runs = json.loads(show_runs("--db", tmp_path / "a.duckdb", "--json").stdout)
    killed = next(r for r in runs if r["status"] == "interrupted")
    assert "journal" in killed["cleaned"][0] and "was gone" in killed["cleaned"][0]


def test_a_run_killed_while_publishing_gets_the_earlier_output_put_back(tmp_path):
    wf = workflow(tmp_path, slow_publish=True)
    out, db, marks = tmp_path / "out", tmp_path / "s.duckdb", tmp_path / "marks"
    first = anonflow("run", wf, "--db", db, "--out-dir", out, tmp=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    before = os.stat(out / "slow.csv")
    proc = start("run", wf, "--db", db, "--out-dir", out, "--no-cache", tmp=tmp_path, marks=marks, seconds=0,
                 publish_seconds=120)
    wait_for_marks(proc, marks, 1, "publisher")  # slow.csv was written again meanwhile
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert [p for p in leftovers(out) if ".anonflow-previous-" in p]
    assert os.stat(out / "slow.csv").st_ino != before.st_ino
    # the next writable open of the store puts the earlier file back
    opened = anonflow("purge", "--db", db, "--all", tmp=tmp_path)
    assert opened.returncode == 0, opened.stdout + opened.stderr
    assert leftovers(out, tmp_path) == []
    after = os.stat(out / "slow.csv")
    assert (after.st_ino, after.st_mode, after.st_mtime_ns) == (before.st_ino, before.st_mode, before.st_mtime_ns)
    runs = json.loads(show_runs("--db", db, "--json").stdout)
    killed = next(r for r in runs if r["status"] == "interrupted")
    assert any(line.startswith("put back the earlier output") and line.endswith("slow.csv")
               for line in killed["cleaned"]), killed["cleaned"]


def test_the_output_folder_gets_the_users_umask_like_its_files(tmp_path):
    wf = workflow(tmp_path)
    done = subprocess.run([sys.executable, "-c", "import os, sys; os.umask(0o022); from anonflow.cli import main; "
                           "main(sys.argv[1:])", "run", str(wf), "--db", str(tmp_path / "s.duckdb"), "--out-dir",
                           str(tmp_path / "a" / "b")], env=env(tmp_path, None, 0), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for folder in (tmp_path / "a", tmp_path / "a" / "b"):
        assert oct(folder.stat().st_mode & 0o777) == "0o755", folder
    assert oct((tmp_path / "a" / "b" / "slow.csv").stat().st_mode & 0o777) == "0o644"


def test_two_api_threads_run_on_one_new_store(tmp_path):
    """Two threads, each running a workflow through the Python API on the same new store:
    both succeed (they failed with "Catalog write-write conflict": one process's connections
    share one DuckDB database; creating the store and each run are one thread at a time)."""
    import threading

    import anonflow

    (tmp_path / "d.csv").write_text("age,sex\n" + "".join(f"{20 + i},{'mf'[i % 2]}\n" for i in range(30)))
    wf = anonflow.Workflow.from_dict({"name": "th", "seed": 1, "sources": {"d": "d.csv"}, "steps": {
        "t": {"uses": "typing", "input": "d", "with": {"quasi": {"age": "continuous"}}},
        "m": {"uses": "mdav", "input": "t", "with": {"k": 3}},
        "o": {"uses": "publish", "input": "m", "with": {"publisher": "csv", "path": "m.csv"}}}}, base_dir=tmp_path)
    results, errors = [], []

    def go(i):
        try:
            results.append(wf.run(db=tmp_path / "s.duckdb", out_dir=tmp_path / f"out{i}").status)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and results == ["succeeded", "succeeded"]
    assert (tmp_path / "out0" / "m.csv").read_bytes() == (tmp_path / "out1" / "m.csv").read_bytes()


def test_a_planted_journal_removes_nothing_but_what_anonflow_names(tmp_path, cli):
    """A journal is acted on only if it is this user's and owner-only, and then only on
    folders named as anonflow names them and on outputs inside its own output folder."""
    wf = workflow(tmp_path)
    wf.write_text(wf.read_text().replace("slow: {uses: test.slow, input: parts}",
                                         "slow: {uses: mdav, input: parts, with: {k: 3}}")
                  .replace("quasi: {age: continuous, sex: nominal}", "quasi: {age: continuous}"))
    out = tmp_path / "out"
    out.mkdir()
    keep, elsewhere = out / "keep.txt", tmp_path / "mine"
    keep.write_text("the user's")
    elsewhere.mkdir()
    records = [{"op": "begin", "run": "x"}, {"op": "publish", "path": str(keep)},
               {"op": "create", "kind": "work", "path": str(elsewhere)},
               {"op": "create", "kind": "work", "path": str(tmp_path / "d.csv")}]
    loose = out / ".anonflow-journal-planted.jsonl"
    loose.write_text("".join(json.dumps(r) + "\n" for r in records))
    os.chmod(loose, 0o644)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", out)
    assert res.exit_code == 0, res.output
    assert keep.exists() and loose.exists() and elsewhere.is_dir()
    os.chmod(loose, 0o600)  # owner-only: replayed, but 'mine' and d.csv are not anonflow's names
    records[1]["path"] = str(tmp_path / "d.csv")  # outside the journal's output folder
    loose.write_text("".join(json.dumps(r) + "\n" for r in records))
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--out-dir", out)
    assert res.exit_code == 0, res.output
    assert not loose.exists() and keep.exists() and elsewhere.is_dir() and (tmp_path / "d.csv").exists()
