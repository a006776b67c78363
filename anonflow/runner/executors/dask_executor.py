"""The ``dask`` executor: a Dask ``distributed`` LocalCluster anonflow starts and stops (TLS,
throw-away credentials), or an existing scheduler named on the command line or in Python."""

from __future__ import annotations

import os
import shutil
from typing import Any, Iterator

from ...cleanup import private_folder
from ...egress import local_cluster_security
from ...errors import InputError, RunError
from ...executor_spec import ExecutorSpec
from .executor import Executor, FragmentResult, FragmentTask, run_fragment


def _refused_at_once(address: str) -> None:
    """Raise at once where a TCP/TLS scheduler's port refuses connections: Dask's client would
    retry for its whole timeout (5 s) before saying so. Connects to the named scheduler only."""
    import socket

    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port

    scheme, location = parse_address(address)
    if scheme not in ("tcp", "tls"):
        return
    host, port = parse_host_port(location)
    try:
        with socket.create_connection((host, port), timeout=5):
            pass
    except ConnectionRefusedError as exc:
        raise OSError(exc.strerror or "connection refused") from None
    except OSError:
        return  # unresolved, unreachable, timed out: Dask's client says so in its own words


class DaskExecutor(Executor):
    """A ``distributed`` client: of a scheduler at ``address``, or of a LocalCluster of
    worker processes started here (and stopped by :meth:`close`)."""

    def __init__(self, spec: ExecutorSpec, where: str = "", journal: Any = None) -> None:
        self.spec = spec
        self.journal = journal
        try:
            import logging

            from distributed import Client, LocalCluster
        except ImportError:
            raise InputError("the dask executor needs Dask's distributed: pip install 'anonflow[dask]'",
                             where=where) from None
        self.cluster = None
        self._local: str | None = None
        if spec.address:
            try:
                _refused_at_once(spec.address)
                self.client = Client(spec.address, timeout="5s", set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise InputError(f"cannot reach the Dask scheduler at {spec.address}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                                 where=where) from None
        else:
            import tempfile

            security = local_cluster_security()  # TLS, throw-away credentials: no other process joins
            # the workers spill the fragments they hold (original records) here: owner-only, removed on
            # close, journaled first (removed after a kill too)
            self._local = str(private_folder(tempfile.gettempdir(), "anonflow-dask-", journal, "dask"))
            self.cluster = LocalCluster(n_workers=spec.workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=logging.ERROR,
                                        # no dashboard; the scheduler's own HTTP routes (health) on a free
                                        # loopback port, not on 8787 (taken by a second cluster, with a warning)
                                        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                                        local_directory=self._local, security=security)
            self.client = Client(self.cluster, security=security, set_as_default=False)

    def map(self, tasks: list[FragmentTask]) -> Iterator[FragmentResult]:
        from distributed import as_completed

        futures = [self.client.submit(run_fragment, t, key=f"anonflow-{t.step}-{t.index}-{os.urandom(4).hex()}",
                                      pure=False) for t in tasks]
        try:
            for fut in as_completed(futures, loop=self.client.loop):
                try:
                    yield fut.result()
                except Exception as exc:
                    if type(exc).__name__ == "KilledWorker":
                        raise RunError(f"Dask workers died running a fragment group again and again ({exc}); "
                                       "out of memory?") from None
                    raise
        finally:
            for fut in futures:
                fut.release()

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            try:
                if self.cluster is not None:
                    self.cluster.close()
            finally:
                if self._local is not None:
                    shutil.rmtree(self._local, ignore_errors=True)
                    if self.journal is not None and not os.path.lexists(self._local):
                        self.journal.removed(self._local)
