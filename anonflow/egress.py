"""What leaves the process: the one egress policy (docs/egress.md).

Records leave anonflow's process in three ways: a source read from a server (a PostgreSQL
``table``/``query``), a sink that writes to a server (the ``postgres`` publisher, any
publisher that declares a destination, :meth:`anonflow.api.Publisher.destinations`), and an
executor that hands fragments to other processes (a Dask scheduler). Every one of them asks
this module before it connects, and this module answers from one rule:

* **this machine** (a loopback address: ``127.0.0.0/8``, ``::1``, ``localhost``; or a Unix
  socket folder) may be reached on anyone's word;
* **any other host** only when the person running anonflow names it: ``--allow-host HOST``
  (``run``, ``plan``, ``verify``), ``allow_hosts=`` in Python, or a line of the user's file
  ``$XDG_CONFIG_HOME/anonflow/allowed-hosts`` (default ``~/.config``; one host a line, ``#``
  comments; refused when others may write it). A workflow file or a release's manifest
  never names one on its own: it names hosts, this module decides;
* **a Dask scheduler** only on the command line or in Python (``--executor dask:ADDRESS``,
  ``executor=``), which is the person's own word for that address; never in a workflow file
  or a manifest, not even on loopback (any local user may listen there). A LocalCluster
  anonflow starts speaks TLS with throw-away credentials (:func:`local_cluster_security`).

``anonflow verify --rerun`` runs someone else's workflow, so its policy (:func:`for_rerun`)
is stricter: a sink that leaves the re-run's scratch folder is not replayed at all (the
verdict names it), and credentials (``PGPASSWORD``, ``.pgpass``, a client certificate,
Kerberos) are offered only to hosts the verifier named; an unnamed loopback server is
connected to without any (:meth:`Policy.offers_credentials`).

The policy in force is a context value: the CLI and the Python API set it with :func:`use`
around a command; code that runs with none set gets :func:`default` (this machine, plus the
user's file). Passwords never travel in a destination: one anywhere in it is refused in a
line that does not repeat it.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import urlsplit

from .errors import AnonflowError, InputError
from .pgurl import parse

#: the user's file of allowed hosts, under $XDG_CONFIG_HOME/anonflow (default ~/.config/anonflow)
CONFIG_FILE = "allowed-hosts"


class EgressError(InputError):
    """A destination or origin the policy does not allow (exit 2, one line)."""


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "anonflow" / CONFIG_FILE


def normal_host(text: str) -> str:
    """A host as the policy compares it: lower case, without IPv6 brackets, an IP address in
    its canonical form."""
    host = text.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.rstrip(".")


def postgres_hosts(params: dict[str, str]) -> list[str]:
    """Every host a connection may reach: each of ``host`` (names, addresses, Unix socket
    folders; libpq takes a comma-separated list) and each of ``hostaddr`` (the address
    connected to, when given: ``host`` is then only the name credentials are looked up by).
    Empty when the URL names neither: the user's environment (``PGHOST``) decides."""
    found: list[str] = []
    for key in ("host", "hostaddr"):
        for part in params.get(key, "").split(","):
            part = part.strip()
            if part and (part.startswith(("/", "@")) or normal_host(part) not in found):
                found.append(part if part.startswith(("/", "@")) else normal_host(part))
    return found



def is_local(host: str) -> bool:
    """Whether ``host`` is this machine: a Unix socket folder (``/...``, or ``@`` Linux's
    abstract namespace), ``localhost``, or a loopback address. A name is never resolved (a
    name that resolves to 127.0.0.1 elsewhere is not this machine unless it is named)."""
    if host.startswith(("/", "@")):
        return True
    host = normal_host(host)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_allow_entry(text: Any, where: str) -> str:
    """One ``--allow-host`` value (or a line of the user's file): a host name or address,
    without scheme, port, user or wildcard."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{where}: give a host name or address, got {text!r}")
    host = text.strip()
    if not host.isprintable() or any(c.isspace() for c in host) or any(c in host for c in "/@*?#,"):
        raise InputError(f"{where}: {host!r} is not a host name or address (give the host alone: no scheme, user, "
                         "port, path or wildcard)")
    if ":" in host and not host.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise InputError(f"{where}: {host!r} is not a host name or address (give the host alone, without a "
                             "port)") from None
    return normal_host(host)


def user_hosts() -> tuple[str, ...]:
    """The hosts of the user's file (none if it does not exist)."""
    path = config_path()
    try:
        st = path.stat()
    except OSError:
        return ()
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(f"{path} may be written by other users (mode {stat.S_IMODE(st.st_mode):04o}); it says which "
                         "hosts the records may go to: chmod go-w it")
    hosts = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if line:
            hosts.append(check_allow_entry(line, f"{path}, line {n}"))
    return tuple(hosts)


@dataclass(frozen=True)
class Policy:
    """What may cross the process boundary (see the module docstring).

    ``named``: the hosts the person running anonflow named (normalized); ``credentials``:
    ``"allowed"`` (libpq's usual credential lookup for every allowed host) or ``"named"``
    (only for hosts in ``named``: a re-run); ``replay_external``: whether a sink that writes
    outside the output folder runs (False in a re-run)."""

    named: frozenset[str] = frozenset()
    credentials: str = "allowed"
    replay_external: bool = True

    def allows(self, host: str) -> bool:
        return is_local(host) or normal_host(host) in self.named

    def offers_credentials(self, hosts: Iterable[str]) -> bool:
        """Whether a connection to ``hosts`` (every host it may try) may carry the user's
        credentials. No host at all: the user's own environment (``PGHOST``) decides."""
        hosts = list(hosts)
        if self.credentials == "allowed":
            return all(self.allows(h) for h in hosts)
        return all(normal_host(h) in self.named for h in hosts)

    def check(self, hosts: Iterable[str], what: str) -> None:
        """Raise :class:`EgressError` unless every host of ``hosts`` is allowed; ``what``
        names the step and the destination (never with a password)."""
        for host in hosts:
            if not self.allows(host):
                raise EgressError(f"{what}: host {host!r} is not this machine, and the records may go to another "
                                  f"host only when you name it: --allow-host {host} (allow_hosts=[{host!r}] in "
                                  f"Python, or a line in {config_path()}); a workflow file or a manifest never "
                                  "allows one")

    def check_destination(self, destination: str, what: str) -> list[str]:
        """Check a destination (a URL: ``postgresql://...``, ``https://...``, ``tcp://...``;
        or a bare host) and return its hosts."""
        hosts = destination_hosts(destination, what)
        self.check(hosts, what)
        return hosts


def destination_hosts(destination: Any, what: str) -> list[str]:
    """The hosts a destination reaches. A PostgreSQL URL is read by libpq's own rules
    (:func:`anonflow.pgurl.parse`: several hosts, ``host=``/``hostaddr=`` parameters,
    Unix socket folders); another URL by its authority; a bare name is a host. A password
    anywhere in it is refused without repeating it."""
    if not isinstance(destination, str) or not destination.strip() or not destination.isprintable():
        raise EgressError(f"{what}: a destination must be a URL or a host name")
    scheme = destination.split("://", 1)[0].lower() if "://" in destination else ""
    if scheme in ("postgresql", "postgres"):
        return postgres_hosts(parse(destination, what))
    if not scheme:
        return [check_allow_entry(destination, what)]
    try:
        parts = urlsplit(destination)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise EgressError(f"{what}: not a valid URL") from None
    if parts.password is not None or "@" in parts.netloc:
        raise EgressError(f"{what}: a destination holds no user or password (give credentials the way the "
                          "destination's own tools take them, never in a workflow file)")
    if not parts.hostname:
        raise EgressError(f"{what}: the URL names no host")
    return [normal_host(parts.hostname)]


def for_user(allow_hosts: Iterable[str] | None = (), *, where: str = "--allow-host") -> Policy:
    """The policy of a command run by its user: this machine, the hosts given (``--allow-host``
    / ``allow_hosts=``) and those of the user's file."""
    if isinstance(allow_hosts, str):
        allow_hosts = [allow_hosts]
    named = {check_allow_entry(h, where) for h in allow_hosts or ()}
    return Policy(frozenset(named | set(user_hosts())))


def for_rerun(allow_hosts: Iterable[str] | None = (), *, where: str = "--allow-host") -> Policy:
    """The policy of ``anonflow verify --rerun``: as :func:`for_user`, but no sink outside the
    scratch folder is replayed, and credentials go only to the hosts the verifier named."""
    base = for_user(allow_hosts, where=where)
    return Policy(base.named, credentials="named", replay_external=False)


def default() -> Policy:
    """The policy when no command set one: this machine and the user's file."""
    return for_user(())


_CURRENT: contextvars.ContextVar[Policy | None] = contextvars.ContextVar("anonflow_egress", default=None)


def current() -> Policy:
    """The policy in force (:func:`use`), else :func:`default`."""
    policy = _CURRENT.get()
    return policy if policy is not None else default()


@contextlib.contextmanager
def use(policy: Policy) -> Iterator[Policy]:
    """Put ``policy`` in force for the code run inside (this thread/context)."""
    token = _CURRENT.set(policy)
    try:
        yield policy
    finally:
        _CURRENT.reset(token)


# -- what a run will reach: checked before anything runs ------------------------------------

def sink_destinations(publisher: Any, params: Any, what: str) -> list[str]:
    """The destinations a publisher declares for these parameters (a list of URLs; none for
    a publisher that writes only inside the output folder)."""
    declare = getattr(publisher, "destinations", None)
    try:
        found = declare(params) if callable(declare) else []
    except AnonflowError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug: one line, and nothing runs
        raise EgressError(f"{what}: the publisher's destinations() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(found, (list, tuple)) or not all(isinstance(d, str) for d in found):
        raise EgressError(f"{what}: the publisher's destinations() must return a list of URLs")
    return list(found)


def check_plan(plan: Any, registry: Any, policy: Policy | None = None) -> dict[str, list[str]]:
    """Check every origin and destination a plan names against ``policy`` (default: the one
    in force) before anything runs; return the publish steps that write outside the output
    folder, with their destinations (what a re-run does not replay)."""
    policy = policy or current()
    external: dict[str, list[str]] = {}
    for name in plan.order:
        node = plan.nodes[name]
        if node.kind == "source" and node.source is not None:  # a server's table: its URL (anonflow.sources)
            for dest in node.source.kind.destinations(node.source):
                policy.check_destination(dest, f"source {name!r}")
        elif node.kind == "publish":
            pub = node.params.get("publisher", "")
            if not registry.has("publisher", pub):
                continue
            what = f"step {name!r} (publisher {pub})"
            own = {k: v for k, v in node.params.items() if k not in ("publisher", "row_id")}
            found = sink_destinations(registry.get("publisher", pub).obj, own, what)
            for dest in found:
                hosts = destination_hosts(dest, what)
                if policy.replay_external:  # a re-run writes nowhere: nothing to allow
                    policy.check(hosts, what)
            if found:
                external[name] = found
    return external


def check_scheduler(address: str, *, named_by_user: bool, where: str) -> None:
    """A Dask scheduler receives every record of the fragments: it is named by the person
    running anonflow (``--executor dask:ADDRESS``, ``executor=`` in Python), which allows its
    host; a workflow file or a manifest never names one."""
    if not named_by_user:
        raise EgressError(f"a workflow file may not name a Dask scheduler ({address!r}): whatever process listens "
                          "there, on this machine or another, receives every record; name it yourself with "
                          f"--executor dask:{address} (executor= in Python), or use executor: dask (a LocalCluster "
                          "anonflow starts, with TLS)", where=where)


def local_cluster_security() -> Any:
    """Dask security for a LocalCluster anonflow starts: TLS with a throw-away key and
    certificate (``Security.temporary()``), so no other process can join the scheduler or
    talk to its workers (the ``dask`` extra brings ``cryptography`` for it)."""
    try:
        from distributed.security import Security

        return Security.temporary()
    except ImportError:
        raise InputError("the dask executor's LocalCluster uses TLS, which needs the cryptography package: pip "
                         "install 'anonflow[dask]'") from None
