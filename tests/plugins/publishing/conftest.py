"""Fixtures of the publishing tests."""
from __future__ import annotations

import pytest

from tests.plugins.publishing.adult_release import _adult_release, _split_adult


@pytest.fixture(scope="session")
def adult(tmp_path_factory):
    """ARX's Adult less every 10th record released by arx-adult-k5's steps (a lattice release), and the
    held-out records' file: (release folder, held-out.csv). Tests copy the release before changing it."""
    from click.testing import CliRunner

    from anonflow.cli import main

    folder = tmp_path_factory.mktemp("adult")
    held = _split_adult(folder)
    runner = CliRunner()

    def cli(*args):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return _adult_release(cli, folder), held
