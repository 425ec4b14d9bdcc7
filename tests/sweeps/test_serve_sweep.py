"""``sweep --serve``: a server per server point, on the embedded engine (``workbench sim
serve``) as the server command; failures are failed points with the server's log tail,
and no server outlives the sweep (also on SIGTERM). Tests wait on events (progress
lines, process exits), never on sleeps."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import workbench as wb
from tests.proctree import descendants, kill_left, living
from tests.waiting import until
from workbench.cli import main
from workbench.errors import ConfigError
from workbench.sweeps.serve import ServeSpec
from workbench.sweeps.store import load_sweep

TRACE = "synthetic:random,requests=6,input=fixed:64,output=fixed:8,rate=50"
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sim_serve(port: int) -> str:
    return f"{PY} -m workbench sim serve --port {port} --max-num-seqs {{seqs}}"


def base(port: int, tmp_path: Path) -> dict:
    return {"trace": TRACE, "target": f"http://127.0.0.1:{port}", "out_dir": str(tmp_path)}


def test_each_server_point_serves_its_client_points_then_stops(tmp_path: Path) -> None:
    port = free_port()
    said: list[str] = []
    me = os.getpid()
    seen: dict[int, int] = {}

    def progress(text: str) -> None:
        said.append(text)
        if "ready after" in text:  # the server's processes, while it runs
            seen.update(descendants(me, b"sim"))

    try:
        sweep = wb.sweep(base(port, tmp_path), {"arrival.max_concurrency": [1, 3]},
                         serve=ServeSpec(sim_serve(port), {"seqs": [2, 8]}),
                         sweep_id="s", progress=progress)
        assert len(seen) >= 2 and living(seen) == []  # both started, none left
    finally:
        kill_left(seen)
    m = sweep.manifest
    assert m.status == "completed" and m.failed_points == []
    assert [p["params"] for p in m.points] == [
        {"serve.seqs": 2, "arrival.max_concurrency": 1},
        {"serve.seqs": 2, "arrival.max_concurrency": 3},
        {"serve.seqs": 8, "arrival.max_concurrency": 1},
        {"serve.seqs": 8, "arrival.max_concurrency": 3}]
    assert all(p["status"] == "done" for p in m.points)
    for name, seqs in (("s000", "2"), ("s001", "8")):
        rec = m.servers[name]
        assert rec["argv"][-2:] == ["--max-num-seqs", seqs]
        assert rec["stopped"] == "SIGTERM" and rec["ready_after_s"] > 0
        assert (sweep.sweep_dir / rec["stderr"]).is_file()
        assert (sweep.sweep_dir / rec["stdout"]).is_file()
    # every client point found its cache reset, on the server of its point
    for p in m.points:
        assert p["runs"][0]["flush"]["ok"] is True
    # each server saw exactly its own points' requests: 2 points × 6 requests
    assert [s.startswith("server s00") for s in said].count(True) == 6
    # resume: every point done, so no server starts again
    said.clear()
    again = wb.sweep(base(port, tmp_path), {"arrival.max_concurrency": [1, 3]},
                     serve=ServeSpec(sim_serve(port), {"seqs": [2, 8]}),
                     sweep_id="s", progress=said.append)
    assert not [s for s in said if "starting" in s]
    assert again.manifest.status == "completed"


def cli_sweep(tmp_path: Path, serve: str, *extra: str) -> list[str]:
    port = free_port()
    return ["sweep", "--trace", TRACE, "--target", f"http://127.0.0.1:{port}",
            "--over", "arrival.max_concurrency=1,2", "-o", str(tmp_path), "--sweep-id", "f",
            "--serve", serve.replace("PORT", str(port)), *extra]


def test_a_server_that_exits_at_start_fails_its_points(tmp_path: Path, capsys) -> None:
    serve = f"{PY} -c \"import sys; print('no such model: {{m}}', file=sys.stderr); sys.exit(3)\""
    code = main(cli_sweep(tmp_path, serve, "--serve-over", "m=tiny"))
    assert code == 1
    m = load_sweep(tmp_path / "f").manifest
    assert m.status == "completed_with_failures" and m.failed_points == [0, 1]
    for p in m.points:
        assert p["status"] == "failed" and p["runs"] == []
        assert "exited with status 3 before it answered" in p["failure"]["reason"]
        assert "no such model: tiny" in p["failure"]["log_tail"]
    assert m.servers["s000"]["exit_status"] == 3
    assert "no such model: tiny" in capsys.readouterr().err


def test_a_server_that_never_answers_is_stopped_and_fails(tmp_path: Path) -> None:
    me = os.getpid()
    # a server that prints and then waits forever, and a child of its own in its group
    serve = (f"{PY} -c \"import subprocess, sys; print('loading {{m}}', flush=True); "
             f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)']); "
             f"sys.stdin.close(); import time; time.sleep(3600)\"")
    before = set(descendants(me))
    try:
        code = main(cli_sweep(tmp_path, serve, "--serve-over", "m=big",
                              "--serve-ready-timeout", "3", "--serve-grace", "2"))
        left = {p: s for p, s in descendants(me).items() if p not in before}
        assert living(left) == []  # the server and its child: both gone
    finally:
        kill_left({p: s for p, s in descendants(me).items() if p not in before})
    assert code == 1
    m = load_sweep(tmp_path / "f").manifest
    p0 = m.points[0]
    assert p0["status"] == "failed"
    assert "did not answer GET /health or /v1/models" in p0["failure"]["reason"]
    assert "loading big" in p0["failure"]["log_tail"]
    assert m.servers["s000"]["stopped"] == "SIGTERM"


def test_a_server_that_dies_mid_point_fails_that_point(tmp_path: Path) -> None:
    port = free_port()
    me = os.getpid()
    server: dict[int, int] = {}

    def progress(text: str) -> None:
        if "ready after" in text:
            server.update(descendants(me, b"sim"))
        if text.endswith("max_concurrency=1 #0: running"):  # the first point has begun
            for pid in server:
                os.kill(pid, signal.SIGKILL)

    cfg = {**base(port, tmp_path), "trace": TRACE.replace("rate=50", "rate=2")}
    sweep = wb.sweep(cfg, {"arrival.max_concurrency": [1, 2]},
                     serve=ServeSpec(sim_serve(port), {"seqs": [4]}), sweep_id="d",
                     progress=progress)
    m = sweep.manifest
    assert m.failed_points == [0, 1]
    assert "during point 0" in m.points[0]["failure"]["reason"]
    assert "exited with status -9" in m.points[0]["failure"]["reason"]
    assert "during an earlier point" not in m.points[0]["failure"]["reason"]
    assert m.points[1]["status"] == "failed"
    assert living(server) == []


def test_sigterm_of_the_sweep_stops_its_server(tmp_path: Path) -> None:
    port = free_port()
    slow = TRACE.replace("requests=6", "requests=400").replace("rate=50", "rate=5")
    argv = [PY, "-m", "workbench", "sweep", "--trace", slow, "--target",
            f"http://127.0.0.1:{port}", "--over", "arrival.max_concurrency=1",
            "-o", str(tmp_path), "--sweep-id", "t", "--serve", sim_serve(port),
            "--serve-over", "seqs=4"]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    server: dict[int, int] = {}
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # bounded: the sweep prints a handful of lines, then runs
            if "ready after" in line:
                server = descendants(proc.pid, b"sim")
            if "#0: running" in line:
                break
        assert server
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 130
        assert living(server) == []
    finally:
        proc.kill()
        proc.wait()
        kill_left(server)
    m = load_sweep(tmp_path / "t").manifest
    assert m.status == "interrupted"
    assert m.servers["s000"]["stopped"] == "SIGTERM"


@pytest.mark.parametrize(("serve", "over", "rule"), [
    ("srv --n {n}", {}, "no --serve-over n=V1,V2"),
    ("srv", {"n": [1]}, "has no {n}"),
    ("srv {n", {"n": [1]}, "has no {n}"),
    ("  ", {}, "give the server command"),
])
def test_bad_serve_specs(serve: str, over: dict, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        ServeSpec(serve, over).check()


def test_serve_needs_a_url_target(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give --target http"):
        wb.sweep({"trace": TRACE, "out_dir": str(tmp_path)}, {"arrival.max_concurrency": [1]},
                 serve=ServeSpec("srv {n}", {"n": [1]}))


def test_json_braces_in_the_command_stay() -> None:
    spec = ServeSpec("""srv --n {n} --cfg '{"dir": "/t", "k": {"a": 1}}'""", {"n": [3]}).check()
    assert spec.argv({"n": 3}) == ["srv", "--n", "3", "--cfg", '{"dir": "/t", "k": {"a": 1}}']


def test_stop_waits_for_the_whole_group_not_only_its_leader(tmp_path: Path) -> None:
    """A child that ignores SIGTERM outlives its leader: the grace runs out, the group is
    SIGKILLed, and ``stop`` returns only once no process of the group is left."""
    from workbench.sweeps.serve import ManagedServer, group_members

    child = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print('child ready', flush=True); time.sleep(3600)")
    leader = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
              f"{child!r}]); time.sleep(3600)")
    server = ManagedServer([PY, "-c", leader], "http://127.0.0.1:9", tmp_path, "g",
                           ready_timeout_s=5, grace_s=1)
    server.start()
    assert server.pid is not None
    members: dict[int, int] = {}
    try:
        until(lambda: "child ready" in server.stdout_path.read_text(),
              "the child said it ignores SIGTERM")
        members = {p: s for p, s in descendants(os.getpid()).items()
                   if p in group_members(server.pid)}
        assert len(members) == 2  # the leader and its child
        stopped = server.stop()
        assert stopped["stopped"] == "SIGKILL after 1 s"
        assert group_members(server.pid) == [] and living(members) == []
        assert "left_running" not in stopped
    finally:
        kill_left(members)
        if server.exited() is None:
            server.stop()


def test_stopping_a_server_leaves_the_event_loop_free(tmp_path: Path) -> None:
    """A server that ignores SIGTERM holds ``stop`` for its grace period; awaited through
    ``stop_async``, that wait is on a thread: a callback the loop was given meanwhile runs
    before the stop ends (a blocking stop would run it only after)."""
    from workbench.sweeps.serve import ManagedServer

    ignores = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               "print('ready', flush=True); time.sleep(3600)")
    server = ManagedServer([PY, "-c", ignores], "http://127.0.0.1:9", tmp_path, "t",
                           ready_timeout_s=5, grace_s=2)
    server.start()
    try:
        until(lambda: "ready" in server.stdout_path.read_text(), "it said it ignores SIGTERM")

        async def main() -> tuple[bool, dict]:
            stop = asyncio.ensure_future(server.stop_async())
            ran = asyncio.Event()
            asyncio.get_running_loop().call_soon(ran.set)
            await ran.wait()
            during = not stop.done()
            return during, await stop

        during, stopped = asyncio.run(main())
        assert during, "the loop's callback ran only after the stop had ended"
        assert stopped["stopped"] == "SIGKILL after 2 s" and server.exited() is not None
    finally:
        if server.exited() is None:
            server.stop()
