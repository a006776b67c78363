"""A third-party plugin package (tests/registry/thirdparty/acme: Mondrian, t-closeness, JSON Lines),
written against the documented API only, installed into a scratch site as a user would and
driven from the CLI in subprocesses: its workflow reads its source by an absolute path, runs,
is released, verifies with ``--rerun``, and a fix to its code without a version bump is run
again rather than served from the cache (issue 16)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.helpers import install_site

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tests" / "registry" / "thirdparty" / "acme"
ADULT = ROOT / "workflows" / "data" / "adult" / "adult_full.csv"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return install_site(PACKAGE, tmp_path_factory.mktemp("site"))


@pytest.fixture
def workspace(tmp_path) -> tuple[Path, Path]:
    """A workflow in one folder reading, by absolute path, 2,000 Adult records kept elsewhere."""
    data = tmp_path / "elsewhere" / "adult-2000.csv"
    data.parent.mkdir()
    with open(ADULT, newline="") as src, open(data, "w", newline="") as dst:
        for i, line in enumerate(src):
            if i > 2000:
                break
            dst.write(line)
    folder = tmp_path / "project"
    folder.mkdir()
    wf = folder / "acme.yaml"
    wf.write_text(textwrap.dedent(f"""\
        name: acme-mondrian
        seed: 3
        sources:
          adult: {{path: {data}}}
        steps:
          typed:
            uses: typing
            input: adult
            with:
              quasi: [age, education-num, hours-per-week]
              sensitive: [occupation]
              others: drop
          grouped: {{uses: acme.mondrian, input: typed, with: {{k: 8}}}}
          scores:
            uses: evaluate
            input: grouped
            with: {{metrics: [k-anonymity, {{acme.t-closeness: {{t: 1.0}}}}]}}
          lines: {{uses: publish, input: grouped, with: {{publisher: acme.jsonl, path: adult.jsonl}}}}
          release: {{uses: publish, input: grouped, with: {{publisher: release, path: adult-release}}}}
        """))
    return wf, data


def anonflow(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "anonflow", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd)


def test_listed_with_their_distribution_and_code(site, tmp_path):
    res = anonflow(site, "plugins", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    ours = {p["name"]: p for p in json.loads(res.stdout) if p["name"].startswith("acme.")}
    assert sorted(ours) == ["acme.jsonl", "acme.mondrian", "acme.t-closeness"]
    assert {p["distribution"] for p in ours.values()} == {"acme-anon"}
    assert len({p["code"] for p in ours.values()}) == 1 and len(ours["acme.mondrian"]["code"]) == 64


def test_runs_releases_and_verifies_with_rerun_from_an_absolute_source(site, workspace):
    wf, data = workspace
    folder = wf.parent
    res = anonflow(site, "run", wf, "--db", folder / "s.duckdb", "--json", cwd=folder)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    assert result["metrics"]["scores.k-anonymity"] >= 8
    assert result["metrics"]["scores.k-anonymity.holds"] == 1.0
    assert 0 < result["metrics"]["scores.acme.t-closeness"] <= 1
    lines = (folder / "out" / "adult.jsonl").read_text().splitlines()
    assert len(lines) == 2000
    first = json.loads(lines[0])
    assert first["age"].startswith("[") or first["age"].isdigit()  # published as interval labels
    # the release verifies, and re-runs from the source at its absolute path
    release = folder / "out" / "adult-release"
    res = anonflow(site, "verify", release, "--rerun", cwd=folder)
    assert res.returncode == 0, res.stdout + res.stderr
    # from another folder, with the source moved: --sources finds it by name
    moved = folder.parent / "moved"
    moved.mkdir()
    shutil.move(str(data), moved / data.name)
    res = anonflow(site, "verify", release, "--rerun", "--sources", moved, cwd=folder.parent)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_fix_without_a_version_bump_is_not_served_from_the_cache(site, workspace):
    wf, _ = workspace
    folder = wf.parent

    def run() -> tuple[dict[str, str], bytes]:
        res = anonflow(site, "run", wf, "--db", folder / "s.duckdb", "--json", cwd=folder)
        assert res.returncode == 0, res.stderr
        return ({s["step"]: s["status"] for s in json.loads(res.stdout)["steps"]},
                (folder / "out" / "adult.jsonl").read_bytes())

    first, published = run()
    assert first["grouped"] == "succeeded"
    again, same = run()
    assert again["grouped"] == "cached" and same == published
    module = site / "acme_anon" / "__init__.py"
    module.write_text(module.read_text().replace("WIDEN = 0\n", "WIDEN = 1\n"))
    try:
        fixed, changed = run()
    finally:
        module.write_text(module.read_text().replace("WIDEN = 1\n", "WIDEN = 0\n"))
    assert fixed["typed"] == "cached" and fixed["grouped"] == "succeeded" and fixed["scores"] == "succeeded"
    assert changed != published
    res = anonflow(site, "lineage", folder / "out" / "adult.jsonl", "--db", folder / "s.duckdb", cwd=folder)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith("lines [publish: acme.jsonl 2.3.0 (acme-anon, code ")
