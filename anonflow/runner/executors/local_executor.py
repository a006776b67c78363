"""The ``local`` executor (the default): the tasks run in this process, one after the other."""

from __future__ import annotations

from typing import Iterator

from ...executor_spec import ExecutorSpec
from .executor import Executor, FragmentResult, FragmentTask, run_fragment


class LocalExecutor(Executor):
    def __init__(self, spec: ExecutorSpec) -> None:
        self.spec = spec

    def map(self, tasks: list[FragmentTask]) -> Iterator[FragmentResult]:
        for task in tasks:
            yield run_fragment(task)
