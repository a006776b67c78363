"""Code run inside a network namespace of its own, with a fake PostgreSQL server listening in it
(tests/foundations/test_egress.py).

:func:`run` starts ``unshare -n python -c SCRIPT``: the namespace has only its own loopback
interface, brought up, with :data:`OTHER_HOST` added to it, so "another host" is an address
nothing outside the namespace can reach, and nothing the code does ever leaves the machine.
Before the test's code runs, the script starts a fake PostgreSQL server on each address given
(``host:port``): it accepts connections, answers an SSL or GSS request with "no", asks for a
clear-text password, and records every byte the client sends (the password included, were it
offered). The test's code runs in the same process (``OUT`` is a dict it fills); the script
prints ``{"seen": {address: {"connections": n, "received": text}}, "out": OUT}``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

#: the address that stands for another machine (added to the namespace's loopback only)
OTHER_HOST = "10.99.0.1"

PRELUDE = textwrap.dedent('''
    import json, socket, struct, subprocess, threading
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "addr", "add", "OTHER/32", "dev", "lo"], check=True)
    SEEN = {}

    def _recv(conn, n):
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _handle(conn, key):
        got = b""
        conn.settimeout(10)
        try:
            while True:  # SSLRequest / GSSENCRequest, then the startup message
                head = _recv(conn, 4)
                body = _recv(conn, struct.unpack("!i", head)[0] - 4)
                got += head + body
                if struct.unpack("!i", body[:4])[0] in (80877103, 80877104):
                    conn.sendall(b"N")
                    continue
                break
            conn.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
            kind = _recv(conn, 1)
            head = _recv(conn, 4)
            got += kind + head + _recv(conn, struct.unpack("!i", head)[0] - 4)
            err = b"SFATAL\\0C28P01\\0Mfake server: authentication failed\\0\\0"
            conn.sendall(b"E" + struct.pack("!i", len(err) + 4) + err)
        except Exception:
            pass
        finally:
            SEEN[key]["received"] += got.decode("latin-1")
            conn.close()

    def _serve(sock, key):
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            SEEN[key]["connections"] += 1
            threading.Thread(target=_handle, args=(conn, key), daemon=True).start()

    for _address in LISTEN:
        _host, _port = _address.rsplit(":", 1)
        _sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _sock.bind((_host, int(_port)))
        _sock.listen(8)
        SEEN[_address] = {"connections": 0, "received": ""}
        threading.Thread(target=_serve, args=(_sock, _address), daemon=True).start()

    OUT = {}
''')


def available() -> None:
    """Skip the test unless a network namespace can be made here (root, unshare, ip)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("a network namespace needs root, unshare and ip")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -n is not permitted here: {probe.stderr.decode(errors='replace').strip()}")


def run(code: str, listen: list[str], env: dict[str, str] | None = None, timeout: int = 240) -> dict:
    """Run ``code`` in a fresh network namespace with fake servers at ``listen``; its result."""
    available()
    script = (PRELUDE.replace("OTHER", OTHER_HOST).replace("LISTEN", repr(list(listen)))
              + textwrap.dedent(code) + "\nprint('@@RESULT@@' + json.dumps({'seen': SEEN, 'out': OUT}))\n")
    res = subprocess.run(["unshare", "-n", sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, **(env or {})})
    marker = [ln for ln in res.stdout.splitlines() if ln.startswith("@@RESULT@@")]
    assert res.returncode == 0 and marker, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return json.loads(marker[-1][len("@@RESULT@@"):])
