"""DuckDB's spill folder: one of the store's own, removed on close, and removed by the next
store opened when a process was killed before it could close (it may hold original records)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from anonflow.cleanup import SPILL_PREFIX, remove_dead_spills, spill_folder
from anonflow.store import Store


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_store_spills_to_a_folder_of_its_process_and_removes_it_on_close(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    with Store(tmp_path / "s.duckdb") as store:
        (spill,) = [p for p in tmp_path.iterdir() if p.name.startswith(SPILL_PREFIX)]
        assert spill.name.startswith(f"{SPILL_PREFIX}p{os.getpid()}-") and oct(spill.stat().st_mode)[-3:] == "700"
        assert store.con.execute("SELECT current_setting('temp_directory')").fetchone()[0] == str(spill)
    assert not spill.exists()


def test_only_a_dead_process_s_spill_folders_of_this_user_are_removed(tmp_path):
    dead = tmp_path / f"{SPILL_PREFIX}p{_dead_pid()}-abc_12"
    dead.mkdir()
    (dead / "duckdb_temp_block-1.block").write_bytes(b"original records")
    live = tmp_path / f"{SPILL_PREFIX}p{os.getppid()}-abc"  # a living process (pytest's parent)
    live.mkdir()
    mine = Path(spill_folder(tmp_path))  # this process's: never removed by itself
    journaled = tmp_path / f"{SPILL_PREFIX}0a1b2c"  # a run's journaled spill: recover()'s business
    journaled.mkdir()
    link = tmp_path / f"{SPILL_PREFIX}p{_dead_pid()}-link"
    link.symlink_to(live)
    assert remove_dead_spills(tmp_path) == []  # spill_folder() above already removed the dead one
    assert not dead.exists()
    assert live.is_dir() and mine.is_dir() and journaled.is_dir() and link.is_symlink()


def test_a_store_opened_after_a_killed_process_removes_what_it_left(tmp_path):
    code = ("import os, signal; from anonflow.store import Store; Store('s.duckdb'); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    killed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env)
    assert killed.returncode == -signal.SIGKILL
    left = [p for p in tmp_path.iterdir() if p.name.startswith(SPILL_PREFIX)]
    assert len(left) == 1
    opened = subprocess.run([sys.executable, "-c", "from anonflow.store import Store; Store('s.duckdb').close()"],
                            cwd=tmp_path, env=env)
    assert opened.returncode == 0
    assert [p for p in tmp_path.iterdir() if p.name.startswith(SPILL_PREFIX)] == []
