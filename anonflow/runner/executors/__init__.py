"""Where the fragments of a partitioned table run: one module per executor kind.

- ``local`` (:mod:`.local_executor`): in this process, one task after the other (the default);
- ``processes:N`` (:mod:`.process_executor`): N worker processes on this machine;
- ``dask`` / ``dask:N`` / ``dask:tcp://host:port`` (:mod:`.dask_executor`): a Dask cluster.

They differ only in where :func:`~.executor.run_fragment` runs (:class:`~.executor.Executor`,
the common interface), so the results are the same bytes wherever it runs. What a workflow
asks for is parsed by :mod:`anonflow.executor_spec`.
"""

from __future__ import annotations

from typing import Any

from ...executor_spec import ExecutorSpec
from .dask_executor import DaskExecutor
from .executor import (Executor, FragmentResult, FragmentTask, WorkFolder, fragment_seed, run_all,
                       run_fragment)
from .local_executor import LocalExecutor
from .process_executor import ProcessExecutor


def start_executor(spec: ExecutorSpec, where: str = "", journal: Any = None) -> Executor:
    """``journal`` (:class:`anonflow.cleanup.Journal`): where folders the executor creates
    (a LocalCluster's local folder) are recorded before they are made."""
    if spec.kind == "processes":
        return ProcessExecutor(spec)
    if spec.kind == "dask":
        return DaskExecutor(spec, where, journal=journal)
    return LocalExecutor(spec)


__all__ = ["Executor", "LocalExecutor", "ProcessExecutor", "DaskExecutor", "FragmentTask", "FragmentResult",
           "WorkFolder", "run_all", "run_fragment", "fragment_seed", "start_executor"]
