from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from anonflow import registry as plugins
from tests.support import data
from tests.support.helpers import DATA, census_project, cli_invoker


@pytest.fixture(autouse=True)
def _fresh_registry():
    """Every test starts from the installed plugins; mock registrations never leak."""
    plugins.set_registry(None)
    yield
    plugins.set_registry(None)


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A scratch folder with a copy of the Census data at data/sdcmicro/."""
    return census_project(tmp_path)


@pytest.fixture
def cli():
    return cli_invoker()


@pytest.fixture
def scratch_root(tmp_path, monkeypatch) -> Path:
    """Where verify's mkdtemp goes: a known folder, so a write that escapes the scratch folder
    by '..' lands somewhere the test can see."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


# -- the shipped data sets, read once per process (each xdist worker has its own session) ---------

@pytest.fixture(scope="session")
def adult_full():
    """workflows/data/adult/adult_full.csv as a pyarrow table (45,222 records)."""
    return data.adult_full()


@pytest.fixture(scope="session")
def arx_adult():
    """ARX's Adult, workflows/data/arx/adult.csv, as a pyarrow table (30,162 records)."""
    return data.arx_adult()


@pytest.fixture(scope="session")
def census():
    """sdcMicro's CASC reference microdata (CASCrefmicrodata.csv) as a pyarrow table."""
    return data.sdcmicro("census")


# -- order: the files holding slow tests first -----------------------------------------------------

def pytest_collection_modifyitems(config, items):
    """Files that hold tests marked slow (whole workflows on full data sets) run first, the rest in
    the order collected: with ``-n auto --dist loadfile`` the workers take files in this order, so
    the longest files no longer start last and leave one worker running alone at the end."""
    heavy = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in heavy)  # stable: the order within each part is kept
