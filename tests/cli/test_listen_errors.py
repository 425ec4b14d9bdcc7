"""A listen that fails names the flag to change and exits 2, as ``--port 70000`` does:
a host name that does not resolve or an address not of this machine is ``--host``'s
(``--listen``'s for ``capture``), a port in use is ``--port``'s; never a bare
``[Errno -2] …`` (docs/interface.md, "Listening")."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True,
                          text=True, timeout=120)


#: a name under the reserved .invalid top-level domain never resolves (RFC 6761)
BAD_HOST = "no-such-host.invalid"
#: TEST-NET-1 (RFC 5737): never an address of this machine
FOREIGN = "192.0.2.1"


@pytest.mark.parametrize("host", [BAD_HOST, FOREIGN])
def test_sim_serve_on_a_bad_host_names_host(host):
    proc = cli("sim", "serve", "--host", host)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        f"workbench sim serve: error: --host {host}: cannot listen on {host}:0 (")
    assert "Errno" not in line and "Traceback" not in proc.stderr


def test_sim_serve_on_a_port_in_use_names_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = cli("sim", "serve", "--port", str(port))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"workbench sim serve: error: --port {port}: cannot listen on "
                           f"127.0.0.1:{port} (")
    assert "in use" in line and "Errno" not in line


@pytest.mark.parametrize("host", [BAD_HOST, FOREIGN])
def test_capture_on_a_bad_listen_address_names_listen(host, tmp_path):
    proc = cli("capture", "--upstream", "http://127.0.0.1:9", "--listen", f"{host}:0",
               "-o", str(tmp_path / "cap"))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"workbench capture: error: --listen {host}:0: cannot listen on "
                           f"{host}:0 (")
    assert "Errno" not in line and "Traceback" not in proc.stderr
