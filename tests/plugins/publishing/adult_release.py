"""ARX's Adult split into a release's data and a held-out batch (``anonflow apply``'s judged
scenario, issue 18): the data and the release are built once per process by the ``adult``
fixture of this folder's conftest."""
from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.helpers import DATA, WORKFLOWS

HIERARCHIES = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]


def _split_adult(folder: Path, every: int = 10) -> Path:
    """``folder/data/arx/adult.csv`` without every ``every``-th record, the hierarchy files
    beside it; returns the held-out records' file (``held-out.csv``, ';'-separated)."""
    (folder / "data" / "arx").mkdir(parents=True)
    for h in HIERARCHIES:
        shutil.copy(DATA / "arx" / f"adult_hierarchy_{h}.csv", folder / "data" / "arx")
    lines = (DATA / "arx" / "adult.csv").read_text().splitlines(keepends=True)
    head, body = lines[0], lines[1:]
    (folder / "data" / "arx" / "adult.csv").write_text(head + "".join(r for i, r in enumerate(body) if i % every))
    held = folder / "held-out.csv"
    held.write_text(head + "".join(r for i, r in enumerate(body) if i % every == 0))
    return held


def _adult_release(cli, folder: Path) -> Path:
    """arx-adult-k5's steps with a release publisher in place of its CSV publisher."""
    text = (WORKFLOWS / "arx-adult-k5.yaml").read_text()
    text = text.replace("{publisher: csv, path: arx-adult-k5.csv}", "{publisher: release, path: adult-release}")
    assert "publisher: release" in text
    (folder / "wf.yaml").write_text(text)
    res = cli("run", folder / "wf.yaml", "--db", folder / "s.duckdb", "--out-dir", folder / "out")
    assert res.exit_code == 0, res.output
    return folder / "out" / "adult-release"
