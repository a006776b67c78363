"""Fixtures of the publishing tests."""
from __future__ import annotations

import pytest

from tests.plugins.publishing.adult_release import _adult_release, _split_adult
from tests.support.helpers import cli_invoker


@pytest.fixture(scope="session")
def adult(tmp_path_factory):
    """ARX's Adult less every 10th record released by arx-adult-k5's steps (a lattice release), and the
    held-out records' file: (release folder, held-out.csv). Tests copy the release before changing it."""
    folder = tmp_path_factory.mktemp("adult")
    held = _split_adult(folder)
    return _adult_release(cli_invoker(), folder), held
