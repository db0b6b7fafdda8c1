"""The test servers' start-up (``tests/servers.py``): a server is ready only once every port it was given
listens."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from tests.servers import ServerProcess, free_port

# Listens on its first port, then binds its second one, and exits when that is taken (as the Temporal dev server
# does when its HTTP API's port is): it looks ready on its first port before it fails.
SERVER = """
import socket, sys, time
first = socket.socket(); first.bind(("127.0.0.1", int(sys.argv[1]))); first.listen()
time.sleep(0.3)
second = socket.socket(); second.bind(("127.0.0.1", int(sys.argv[2]))); second.listen()
time.sleep(60)
"""


def test_a_server_that_fails_to_bind_its_second_port_is_started_again_on_new_ports(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # bound by another process's socket (not listening: no connection is accepted)
    given: list[int] = []

    def command(port: int) -> list[str]:
        given[:] = [taken.getsockname()[1] if not starts else free_port()]
        starts.append(port)
        return [sys.executable, "-c", SERVER, str(port), str(given[0])]

    starts: list[int] = []
    server = ServerProcess(command, tmp_path / "server.log", other_ports=lambda: given)
    try:
        assert len(starts) == 2  # the first start bound its first port, then exited on the taken one
        assert server.proc.poll() is None
        with socket.create_connection(("127.0.0.1", given[0]), timeout=1):
            pass
    finally:
        server.stop()
        taken.close()
