"""Helpers shared by the first-party plugins."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from anonflow.api import InputError, TypedTable


def continuous_quasi(table: TypedTable, plugin: str) -> list[str]:
    """The quasi-identifiers, all of which must be continuous for a numeric-only method."""
    quasi = table.typing.quasi
    if not quasi:
        raise InputError(f"{plugin} needs at least one quasi-identifier; name them under 'quasi' in the typing step")
    for name in quasi:
        attr = table.typing.get(name)
        if attr.type != "continuous":
            raise InputError(f"{plugin} works on numbers only, but quasi-identifier {name!r} is typed {attr.type}; "
                             f"type it continuous in the typing step (quasi: {{{name}: continuous}}) if its "
                             "values are numbers, or leave it out of the quasi-identifiers")
    return quasi


def zscores(X: np.ndarray, names: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Standardize columns (population std); constant columns become 0 and are reported."""
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    constant = [n for n, s in zip(names, std) if s == 0]
    safe = np.where(std == 0, 1.0, std)
    return (X - mean) / safe, constant
