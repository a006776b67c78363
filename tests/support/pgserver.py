"""A throw-away PostgreSQL server for the tests (``tests/sources/test_postgres.py``).

:func:`start` runs ``initdb`` into a fresh temporary folder, then ``pg_ctl start`` on a free
TCP port of 127.0.0.1 (its unix socket in the same folder); :meth:`PgServer.stop` stops it
and removes the folder. PostgreSQL refuses to run as root, so when the tests run as root the
server's programs run as the ``postgres`` user (Debian's ``postgresql`` package creates it)
through ``runuser``, and the folder belongs to that user.

The cluster's superuser is ``anonflow`` with a password (:data:`PASSWORD`): connections over
TCP must give it (scram-sha-256), so a test proves the password reaches libpq from the
environment (``PGPASSWORD``) or a ``.pgpass`` file, never from a workflow. Connections over the
unix socket are trusted (the fixture's own set-up).

Where no ``initdb`` is found (``PATH``, ``/usr/lib/postgresql/*/bin``), :func:`start` raises
:class:`Unavailable` with the reason; the fixture turns it into a skip. ``.ci/run`` installs
Debian's ``postgresql`` package, so CI runs these tests.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

USER = "anonflow"
PASSWORD = "pg-test-secret-7d1f"
DATABASE = "postgres"


class Unavailable(RuntimeError):
    """No PostgreSQL server can be started here (the reason is the message)."""


def find_bin() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: _version(p), reverse=True)
    for folder in candidates:
        if os.access(os.path.join(folder, "initdb"), os.X_OK) and os.access(os.path.join(folder, "pg_ctl"), os.X_OK):
            return Path(folder)
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl", path=os.path.dirname(found)):
        return Path(found).parent
    raise Unavailable("PostgreSQL's initdb was not found (on PATH or in /usr/lib/postgresql/*/bin); install the "
                      "'postgresql' package (.ci/run does) to run the PostgreSQL tests")


def _version(folder: str) -> int:
    try:
        return int(Path(folder).parent.name.split(".")[0])
    except ValueError:
        return 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    root: Path
    port: int
    bin: Path
    as_user: str | None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def url(self, database: str = DATABASE, user: str = USER) -> str:
        """The connection URL a workflow names (no password: libpq finds it)."""
        return f"postgresql://{user}@{self.host}:{self.port}/{database}"

    def socket_url(self, database: str = DATABASE) -> str:
        """A trusted connection over the unix socket (no password needed): for set-up."""
        return f"postgresql://{USER}@/{database}?host={self.root}&port={self.port}"

    def stop(self) -> None:
        try:
            _run(self, [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                 check=False)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _run(server_or_user: "PgServer | str | None", cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    user = server_or_user.as_user if isinstance(server_or_user, PgServer) else server_or_user
    full = (["runuser", "-u", user, "--"] + cmd) if user else cmd
    res = subprocess.run(full, capture_output=True, text=True, timeout=120)
    if check and res.returncode != 0:
        raise Unavailable(f"{' '.join(cmd[:1])} failed ({res.returncode}): {(res.stderr or res.stdout).strip()[-800:]}")
    return res


def start() -> PgServer:
    """Start a fresh cluster (see the module docstring); raises :class:`Unavailable`."""
    folder = find_bin()
    as_user = None
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            raise Unavailable("the tests run as root and runuser is missing: PostgreSQL cannot run as root")
        try:
            import pwd

            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise Unavailable("the tests run as root and there is no 'postgres' user to run PostgreSQL as") from None
        as_user = "postgres"
    # as root, in /tmp: the postgres user must reach the folder (TMPDIR may lie in root's own folders)
    root = Path(tempfile.mkdtemp(prefix="anonflow-pg-", dir="/tmp" if as_user and os.path.isdir("/tmp") else None))
    try:
        if as_user:
            os.chown(root, pw.pw_uid, pw.pw_gid)
        pwfile = root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if as_user:
            os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        server = PgServer(root, free_port(), folder, as_user)
        _run(server, [str(folder / "initdb"), "-D", str(server.data), "-U", USER, f"--pwfile={pwfile}",
                      "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"])
        pwfile.unlink()
        options = (f"-c listen_addresses=127.0.0.1 -p {server.port} -c unix_socket_directories={root} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        res = _run(server, [str(folder / "pg_ctl"), "-D", str(server.data), "-o", options, "-l",
                            str(root / "server.log"), "-w", "-t", "60", "start"], check=False)
        if res.returncode != 0:
            log = (root / "server.log").read_text(errors="replace")[-800:] if (root / "server.log").exists() else ""
            raise Unavailable(f"pg_ctl start failed: {(res.stderr or res.stdout).strip()[-400:]} {log}")
        return server
    except BaseException:
        if (root / "data" / "postmaster.pid").exists():
            _run(as_user, [str(folder / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "stop"], check=False)
        shutil.rmtree(root, ignore_errors=True)
        raise
