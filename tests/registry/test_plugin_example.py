"""The example plugin package in docs/ installs like any third-party plugin and works."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import install_site

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "plugin-example"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return install_site(EXAMPLE, tmp_path_factory.mktemp("site"))


def anonflow(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "anonflow", *args], capture_output=True, text=True, env=env,
                          cwd=cwd)


def test_example_plugin_is_listed_with_its_distribution(site, tmp_path):
    res = anonflow(site, "plugins", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    entry = next(p for p in json.loads(res.stdout) if p["name"] == "example.discernibility")
    assert entry["kind"] == "metric"
    assert entry["distribution"] == "anonflow-example"
    assert entry["version"] == "1.0.0"


def test_example_workflow_runs_the_plugin_metric(site, tmp_path):
    res = anonflow(site, "run", str(EXAMPLE / "workflow.yaml"), "--db", str(tmp_path / "s.duckdb"), "--json",
                   cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    metrics = json.loads(res.stdout)["metrics"]
    # MDAV with k = 4 on 1,080 records: 270 classes of exactly 4, so DM = 270 * 4^2
    assert metrics["scores.example.discernibility"] == 270 * 16
    assert metrics["scores.example.discernibility.mean_class_size"] == 4
    assert metrics["scores.k-anonymity"] == 4


def test_without_the_plugin_the_workflow_is_rejected_before_running(tmp_path):
    res = subprocess.run([sys.executable, "-m", "anonflow", "run", str(EXAMPLE / "workflow.yaml"),
                          "--db", str(tmp_path / "s.duckdb")], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2
    assert "unknown metric 'example.discernibility'" in res.stderr
    assert not (tmp_path / "s.duckdb").exists()
