"""Helpers shared by the test folders: the repository's paths, scratch workflow files, installing a
plugin package into a scratch site (a shipped workflow's run: tests.support.shipped)."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
DATA = WORKFLOWS / "data"


def install_site(package: Path, target: Path) -> Path:
    """pip-install the plugin package folder ``package`` into the folder ``target`` (put it on
    PYTHONPATH to use it), from a copy beside ``target``: setuptools writes build/ and
    *.egg-info next to the sources, which must not land in the repository or make the package
    look installed."""
    import subprocess
    import sys

    build = target.parent / f"{target.name}-build" / package.name
    shutil.copytree(package, build, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(build)], check=True)
    return target


def cli_invoker():
    """anonflow's CLI run in process (click's ``CliRunner``, exceptions not caught): the ``cli``
    fixture's function, also for a module-scoped fixture (which cannot take ``cli``)."""
    from click.testing import CliRunner

    from anonflow.cli import main

    runner = CliRunner()

    def invoke(*args, **kwargs):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False, **kwargs)

    return invoke


def census_project(folder: Path) -> Path:
    """``folder`` with a copy of the Census data at data/sdcmicro/ (where :func:`census_workflow`
    reads it)."""
    (folder / "data" / "sdcmicro").mkdir(parents=True)
    shutil.copy(DATA / "sdcmicro" / "CASCrefmicrodata.csv", folder / "data" / "sdcmicro")
    return folder


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


CENSUS_QI = ["AFNLWGT", "AGI", "EMCONTRB", "FEDTAX", "PTOTVAL", "STATETAX", "TAXINC", "POTHVAL",
             "INTVAL", "PEARNVAL", "FICA", "WSALVAL", "ERNVAL"]


def census_workflow(folder: Path, k: int = 5, extra: str = "", name: str = "wf.yaml") -> Path:
    """A Census MDAV workflow in ``folder`` (which holds data/sdcmicro/); ``extra`` adds steps."""
    text = textwrap.dedent(f"""\
        name: census-test
        seed: 7
        sources:
          census: {{path: data/sdcmicro/CASCrefmicrodata.csv}}
        steps:
          typed:
            uses: typing
            input: census
            with:
              quasi: [{", ".join(CENSUS_QI)}]
          grouped:
            uses: mdav
            input: typed
            with: {{k: {k}}}
          scores:
            uses: evaluate
            input: [typed, grouped]
            with: {{metrics: [sse-il, k-anonymity]}}
          published:
            uses: publish
            input: grouped
            with: {{publisher: parquet, path: census.parquet}}
        """)
    if extra:
        text += textwrap.indent(textwrap.dedent(extra).strip("\n"), "  ") + "\n"
    path = folder / name
    path.write_text(text)
    return path
