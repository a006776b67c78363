"""The shipped data sets (workflows/data/), each read once per test process and shared.

Every loader a test module used to carry (Adult read five ways, ARX's Adult, the sdcMicro files)
reads through these. The tables are pyarrow tables, which nobody can change in place, so sharing
them keeps the tests independent. Each pytest-xdist worker is a process of its own and reads a
file at most once; ``tests/conftest.py`` offers the same tables as session-scoped fixtures.
"""
from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.csv as pacsv

from tests.support.helpers import DATA

ADULT_FULL = DATA / "adult" / "adult_full.csv"
ARX_ADULT = DATA / "arx" / "adult.csv"
SDCMICRO = {"census": DATA / "sdcmicro" / "CASCrefmicrodata.csv", "tarragona": DATA / "sdcmicro" / "Tarragona.csv",
            "eia": DATA / "sdcmicro" / "EIA.csv"}


@functools.cache
def adult_full(fnlwgt_as_text: bool = False) -> pa.Table:
    """workflows/data/adult/adult_full.csv (45,222 records), pyarrow's types; ``fnlwgt_as_text``
    keeps fnlwgt as written (its digits counted by SPEC section 4)."""
    types = {"fnlwgt": pa.string()} if fnlwgt_as_text else {}
    return pacsv.read_csv(ADULT_FULL, convert_options=pacsv.ConvertOptions(column_types=types))


@functools.cache
def arx_adult() -> pa.Table:
    """ARX's Adult, workflows/data/arx/adult.csv (30,162 records, ';'-separated)."""
    return pacsv.read_csv(ARX_ADULT, parse_options=pacsv.ParseOptions(delimiter=";"))


@functools.cache
def sdcmicro(name: str) -> pa.Table:
    """One of sdcMicro's benchmark files: ``census`` (CASCrefmicrodata), ``tarragona``, ``eia``."""
    return pacsv.read_csv(SDCMICRO[name])
