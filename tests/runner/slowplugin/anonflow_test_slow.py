"""A third-party test plugin that waits, so that a test can interrupt a run at a known point.

It is found like any installed plugin (its ``.dist-info`` beside it) by a process whose
``PYTHONPATH`` holds this folder: tests/runner/test_interrupted_runs.py runs ``anonflow run`` so, and
the worker processes and Dask workers the run starts inherit it.

- ``test.slow`` (algorithm): writes a file ``algorithm-<process id>`` into the folder
  ``ANONFLOW_TEST_SLOW_MARKS`` names, then sleeps ``ANONFLOW_TEST_SLOW_SECONDS`` (default 0),
  then puts every record of its fragment group into class 0;
- ``test.slow`` (publisher): marks ``publisher-<process id>``, sleeps
  ``ANONFLOW_TEST_SLOW_PUBLISH_SECONDS`` (default 0), then writes nothing.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa

from anonflow.api import CLASS, Algorithm, Publisher, hookimpl


def _wait(kind: str, seconds: str) -> None:
    marks = os.environ.get("ANONFLOW_TEST_SLOW_MARKS")
    if marks:
        with open(os.path.join(marks, f"{kind}-{os.getpid()}"), "w") as fh:
            fh.write("waiting\n")
    time.sleep(float(os.environ.get(seconds, "0")))


class Slow(Algorithm):
    name = "test.slow"
    version = "1.0"
    description = "waits, then puts every record of its input in one class"

    def run(self, table, params, ctx):
        _wait("algorithm", "ANONFLOW_TEST_SLOW_SECONDS")
        return table.replace(data=table.data.append_column(CLASS, pa.array([0] * table.num_rows, pa.int64())))


class SlowPublisher(Publisher):
    name = "test.slow"
    version = "1.0"
    description = "waits, then publishes nothing"
    outputs = ()

    def publish(self, table, params, ctx):
        _wait("publisher", "ANONFLOW_TEST_SLOW_PUBLISH_SECONDS")
        return []


@hookimpl
def anonflow_register_algorithms(register):
    register(Slow())


@hookimpl
def anonflow_register_publishers(register):
    register(SlowPublisher())
