"""The ``executor:`` block of a workflow (and ``--executor``): where the fragments of a
partitioned table run (:class:`ExecutorSpec`). The executors themselves are
:mod:`anonflow.runner.executors`; this module only parses and checks what is asked for, so
the workflow file's reader needs nothing of the runner.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import AnonflowWarning, InputError

KINDS = ("local", "processes", "dask")

#: at most this many worker processes per core (``processes:N``, a LocalCluster's ``dask:N``):
#: more only adds memory and start-up time, and thousands exhaust the process table
WORKERS_PER_CORE = 4


def most_workers() -> int:
    """The most worker processes anonflow starts on this machine."""
    return WORKERS_PER_CORE * (os.cpu_count() or 1)


@dataclass(frozen=True)
class ExecutorSpec:
    """How fragments are run: ``kind`` local | processes | dask; ``workers`` for processes
    and a LocalCluster; ``address`` a Dask scheduler; ``work_dir`` the folder fragments travel
    through (default: a private folder inside the output folder, removed after each step)."""

    kind: str = "local"
    workers: int | None = None
    address: str | None = None
    work_dir: str | None = None

    def describe(self) -> str:
        if self.kind == "local":
            return "local"
        if self.kind == "processes":
            return f"processes:{self.workers}"
        return f"dask:{self.address}" if self.address else \
            f"dask (LocalCluster of {self.workers} worker{'s' if self.workers != 1 else ''})"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in {"kind": self.kind, "workers": self.workers, "address": self.address,
                                  "work_dir": self.work_dir}.items() if v is not None}

    def merged(self, other: "ExecutorSpec | None") -> "ExecutorSpec":
        """``other`` (the command line's) where given, keeping this one's work folder."""
        if other is None:
            return self
        return ExecutorSpec(other.kind, other.workers, other.address, other.work_dir or self.work_dir)


_ADDRESS = re.compile(r"^(tcp|tls|ucx|inproc|ws|wss)://[^\s]+$")


def parse_executor(text: Any, where: str) -> ExecutorSpec:
    """``local``, ``processes:N``, ``dask``, ``dask:N`` or ``dask:tcp://host:port``."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"expected local, processes:N or dask[:ADDRESS], got {text!r}", where=where)
    kind, _, rest = text.strip().partition(":")
    return executor_spec({"kind": kind, **({"address": rest} if rest and not rest.isdigit() else {}),
                          **({"workers": int(rest)} if rest.isdigit() else {})}, where)


def executor_spec(data: Any, where: str, base: Path | None = None) -> ExecutorSpec:
    """The ``executor:`` block of a workflow (a string as for ``--executor``, or a mapping with
    ``kind``, ``workers``, ``address``, ``work_dir``)."""
    if isinstance(data, str):
        return parse_executor(data, where)
    if not isinstance(data, dict):
        raise InputError(f"expected local, processes:N, dask[:ADDRESS] or a mapping with kind, workers, address, "
                         f"work_dir; got {data!r}", where=where)
    unknown = sorted(set(data) - {"kind", "workers", "address", "work_dir"})
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}; expected kind, workers, address, work_dir", where=where)
    kind = data.get("kind", "local")
    if kind not in KINDS:
        raise InputError(f"unknown executor {kind!r}; expected one of {', '.join(KINDS)}", where=where)
    workers = data.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 4096):
        raise InputError(f"'workers' must be a whole number from 1 to 4096, got {workers!r}", where=where)
    address = data.get("address")
    if address is not None:
        if kind != "dask":
            raise InputError(f"an address is for the dask executor, not {kind}", where=where)
        if not isinstance(address, str) or not _ADDRESS.match(address):
            raise InputError(f"expected a Dask scheduler address such as tcp://host:8786, got {address!r}",
                             where=where)
        if workers is not None:
            raise InputError("give a scheduler address or a number of workers, not both", where=where)
    work_dir = data.get("work_dir")
    if work_dir is not None:
        if not isinstance(work_dir, str) or not work_dir or "\0" in work_dir:
            raise InputError(f"'work_dir' must be a folder, got {work_dir!r}", where=where)
        if base is not None and not os.path.isabs(work_dir):
            work_dir = str(base / work_dir)
    if kind == "local":
        if workers not in (None, 1):
            raise InputError("the local executor runs one fragment at a time; use processes:N for N workers",
                             where=where)
        workers = None
    elif kind == "processes" or (kind == "dask" and address is None):
        workers = workers or (os.cpu_count() or 1)
        if workers > most_workers():
            import warnings

            warnings.warn(f"{where}: {workers} worker processes asked for, {most_workers()} started "
                          f"({WORKERS_PER_CORE} per core on this machine's {os.cpu_count() or 1}); more would "
                          "only add memory and start-up time", AnonflowWarning, stacklevel=2)
            workers = most_workers()
    return ExecutorSpec(kind, workers, address, work_dir)
