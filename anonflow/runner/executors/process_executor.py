"""The ``processes:N`` executor: N worker processes on this machine (Python's
``concurrent.futures``), with the tasks of a worker that dies run again by a new pool."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

from ...errors import RunError
from ...executor_spec import ExecutorSpec
from .executor import Executor, FragmentResult, FragmentTask, run_fragment


def _die_with_parent(parent: int) -> None:
    """A worker process's initializer: end with the run's process even when that one is
    killed outright (SIGKILL leaves no chance to stop the workers). Linux asks the kernel
    (``PR_SET_PDEATHSIG``); elsewhere a worker of a dead run ends at its next task."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


@contextlib.contextmanager
def _main_not_reimported() -> Iterator[None]:
    """Start worker processes without their importing the caller's main script when it is no
    file (a script piped to ``python -``, whose ``__main__.__file__`` is ``<stdin>``): a
    spawned worker re-runs the main module's file, and one named ``<stdin>`` cannot be found,
    so every worker died at start. The tasks need only anonflow and the plugins."""
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None or os.path.isfile(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


class ProcessExecutor(Executor):
    """N processes (spawned: a forked copy of a process holding a DuckDB connection and its
    threads is unsafe). A worker that dies breaks the pool; the unfinished tasks then run
    again on a new one, at most ``retries`` times. When the run is interrupted
    (:meth:`abort`) the workers are killed, not waited for; they also die with the run's
    process (:func:`_die_with_parent`)."""

    retries = 3

    def __init__(self, spec: ExecutorSpec) -> None:
        self.spec = spec
        self.pool: Any = None

    def _pool(self) -> Any:
        if self.pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(max_workers=self.spec.workers,
                                            mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_die_with_parent, initargs=(os.getpid(),))
        return self.pool

    def map(self, tasks: list[FragmentTask]) -> Iterator[FragmentResult]:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        pending = {t.index: t for t in tasks}
        broken = 0
        while pending:
            pool = self._pool()
            with _main_not_reimported():  # workers start as tasks are submitted
                futures = {pool.submit(run_fragment, t): i for i, t in pending.items()}
            try:
                waiting = set(futures)
                while waiting:
                    done, waiting = wait(waiting, return_when=FIRST_COMPLETED)
                    for fut in sorted(done, key=lambda f: futures[f]):
                        if isinstance(fut.exception(), BrokenProcessPool):
                            raise fut.exception()  # type: ignore[misc]
                        res = fut.result()
                        pending.pop(futures[fut], None)
                        yield res
            except BrokenProcessPool:
                broken += 1
                self.pool.shutdown(wait=False, cancel_futures=True)
                self.pool = None
                if broken > self.retries:
                    raise RunError(f"worker processes died {broken} time(s) running fragments; {len(pending)} fragment "
                                   "group(s) could not be run (out of memory, or workers that cannot start: see the "
                                   "system log)") from None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def abort(self) -> None:
        """Kill the workers (the run was interrupted: their tasks' results are not wanted)."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        for p in processes:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                p.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        for p in processes:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                p.join(5)
