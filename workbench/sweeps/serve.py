"""Sweeps over the server's configuration: ``sweep --serve 'CMD … {param} …' --serve-over``.

Per server point the command is started in a process group of its own, guarded by a
watchdog process (``watchdog.py``), polled until ready, given the client points, then
stopped; a server that exits, never answers or dies fails the points it could not serve,
with its log's tail: never a hang, never an orphan (docs/sweeps.md, "Server sweeps";
docs/security.md, "Processes and disks").
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench import redact
from workbench import safe_write as safe
from workbench.errors import ConfigError
from workbench.signals import die_with_parent
from workbench.sweeps.spec import check_points

if TYPE_CHECKING:
    from workbench.sweeps.sweep_runner import SweepRunner

#: params of a server point are stored under this prefix in a sweep point's params
SERVE_PREFIX = "serve."
LOG_TAIL_BYTES = 4000
#: after the group's SIGKILL, how long its processes may take to be gone
GONE_WAIT_S = 30.0
#: how long a released watchdog may take to exit
WATCHDOG_EXIT_S = 5.0
READY_PATHS = ("/health", "/v1/models")
SERVERS = "servers"
#: a server parameter's place in the command: ``{name}``, name an identifier
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ServeSpec:
    """The server command template, its axes, and the bounds of its lifetime."""

    command: str
    over: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    ready_timeout_s: float = 600.0
    grace_s: float = 20.0

    def check(self) -> ServeSpec:
        if not self.command.strip():
            raise ConfigError("--serve: give the server command")
        names = set(PLACEHOLDER.findall(self.command))
        missing = sorted(names - set(self.over))
        unused = sorted(set(self.over) - names)
        if missing:
            raise ConfigError(f"--serve command uses {{{missing[0]}}} but no --serve-over "
                              f"{missing[0]}=V1,V2 gives its values")
        if unused:
            raise ConfigError(f"--serve-over {unused[0]}: the --serve command has no "
                              f"{{{unused[0]}}} to put it in")
        for name, values in self.over.items():
            if isinstance(values, str) or not values:
                raise ConfigError(f"--serve-over {name}: give a non-empty list of values")
        check_points(math.prod(len(v) for v in self.over.values()), "the server points")
        for point in self.points():  # each command as it will run: POSIX shell words
            shown = f" with {_label(point)}" if point else ""
            try:
                argv = self.argv(point)
            except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
                raise ConfigError(f"--serve {self.command!r}{shown}: not a command line "
                                  f"({exc}; quote as a POSIX shell does)") from None
            if not argv or any("\0" in word for word in argv):
                raise ConfigError(f"--serve {self.command!r}{shown}: not a command line "
                                  "(no words, or a NUL character in one)")
        if not (0 < self.ready_timeout_s <= 86_400 and 0 < self.grace_s <= 3600):
            raise ConfigError("--serve-ready-timeout must be in (0, 86400] s and "
                              "--serve-grace in (0, 3600] s")
        return self

    def points(self) -> list[dict[str, Any]]:
        """The server points, ``{name: value}`` each, in run order."""
        if not self.over:
            return [{}]
        names = list(self.over)
        return [dict(zip(names, combo, strict=True))
                for combo in itertools.product(*(list(v) for v in self.over.values()))]

    def argv(self, point: Mapping[str, Any]) -> list[str]:
        """The command of ``point`` as an argument vector (POSIX shell words): each
        ``{name}`` replaced; other braces (a JSON argument) left as they are."""
        text = PLACEHOLDER.sub(lambda m: str(point[m.group(1)]), self.command)
        return shlex.split(text)

    def describe(self) -> dict[str, Any]:
        return {"command": self.command, "over": {k: list(v) for k, v in self.over.items()},
                "ready_timeout_s": self.ready_timeout_s, "grace_s": self.grace_s}


class ServerFailed(Exception):
    """The server exited, or never answered: ``reason`` and its log's ``tail``."""

    def __init__(self, reason: str, tail: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tail = tail


class ManagedServer:
    """One server process group: started, waited for, checked, stopped (see module doc)."""

    def __init__(self, argv: list[str], url: str, log_dir: Path, name: str, *,
                 ready_timeout_s: float, grace_s: float,
                 headers: Mapping[str, str] | None = None) -> None:
        self.argv, self.url, self.name = argv, url.rstrip("/"), name
        self.ready_timeout_s, self.grace_s = ready_timeout_s, grace_s
        self.headers = dict(headers or {})
        safe.make_dir(log_dir, parents=True)
        self.stdout_path = log_dir / f"{name}.stdout.log"
        self.stderr_path = log_dir / f"{name}.stderr.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.watchdog: subprocess.Popen[bytes] | None = None
        self.ready_after_s: float | None = None

    def start(self) -> None:
        parent = os.getpid()
        self.watchdog = _start_watchdog()
        guard = self.watchdog.stdin.fileno() if self.watchdog.stdin is not None else None

        def in_child() -> None:  # the server's process, before it runs the command
            # SIGTERM when the sweep dies however it dies (a server that stops cleanly
            # takes its children along); the watchdog escalates for the whole group
            die_with_parent(parent, signal.SIGTERM)
            if guard is not None:  # its group, guarded before the command runs
                os.write(guard, b"%d\n" % os.getpid())

        with safe.open_file(self.stdout_path, "ab") as out, \
                safe.open_file(self.stderr_path, "ab") as err:
            try:
                self.proc = subprocess.Popen(
                    self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                    start_new_session=True,  # its own process group: stopped as one
                    preexec_fn=in_child,
                )
            except OSError as exc:
                self._release_watchdog()
                raise ServerFailed(f"cannot start {self.argv[0]!r}: {exc.strerror or exc}",
                                   "") from None

    def _release_watchdog(self) -> None:
        """The group was stopped here: the watchdog ends without a signal."""
        dog, self.watchdog = self.watchdog, None
        if dog is None:
            return
        with contextlib.suppress(OSError):
            assert dog.stdin is not None
            dog.stdin.write(b"done\n")
            dog.stdin.close()
        try:
            dog.wait(timeout=WATCHDOG_EXIT_S)
        except subprocess.TimeoutExpired:
            dog.kill()
            dog.wait()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def exited(self) -> int | None:
        """The exit status once the server has exited, else None."""
        return self.proc.poll() if self.proc is not None else None

    def tail(self) -> str:
        """The last ``LOG_TAIL_BYTES`` of stderr then stdout (what a failure shows)."""
        parts = []
        for path in (self.stderr_path, self.stdout_path):
            try:
                with open(path, "rb") as fh:
                    fh.seek(max(path.stat().st_size - LOG_TAIL_BYTES, 0))
                    text = fh.read().decode("utf-8", errors="replace").strip()
            except OSError:
                continue
            if text:
                parts.append(f"--- {path.name} ---\n{text}")
        return "\n".join(parts)

    def failure(self, reason: str) -> ServerFailed:
        return ServerFailed(reason, redact.text(self.tail()))

    async def wait_ready(self) -> None:
        """Poll the readiness routes until one answers 200; an exit first, or
        ``ready_timeout_s``, is a ``ServerFailed``."""
        import aiohttp

        started = time.monotonic()
        deadline = started + self.ready_timeout_s
        timeout = aiohttp.ClientTimeout(total=5)
        from workbench.bodies import session as bounded_session

        # the status is all a health check reads: the body is never read (and a
        # compressed one never inflated); the connection is dropped with the answer
        async with bounded_session(headers=self.headers, timeout=timeout) as sess:
            while True:  # bounded: the deadline
                code = self.exited()
                if code is not None:
                    raise self.failure(f"server {self.name} exited with status {code} before "
                                       "it answered")
                for path in READY_PATHS:
                    try:
                        async with sess.get(self.url + path) as resp:
                            resp.close()
                            if resp.status == 200:
                                self.ready_after_s = time.monotonic() - started
                                return
                    except (aiohttp.ClientError, TimeoutError, OSError):
                        pass
                if time.monotonic() >= deadline:
                    raise self.failure(f"server {self.name} did not answer GET "
                                       f"{' or '.join(READY_PATHS)} at {self.url} within "
                                       f"{self.ready_timeout_s:g} s")
                await asyncio.sleep(0.5)

    def stop(self) -> dict[str, Any]:
        """SIGTERM to the group, SIGKILL after ``grace_s``; returns once all of it is gone."""
        proc = self.proc
        if proc is None:
            self._release_watchdog()
            return {"stopped": "never started"}
        how = "exited by itself" if proc.poll() is not None else "SIGTERM"
        _signal_group(proc.pid, signal.SIGTERM)
        if not self._gone_within(self.grace_s):
            how = f"SIGKILL after {self.grace_s:g} s"
        # the group may hold children the leader left behind: they go too, at once
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        out: dict[str, Any] = {"stopped": how, "exit_status": proc.returncode}
        # a killed process is gone only once it has freed its memory (a vLLM worker:
        # GBs): wait for that, so nothing of the server runs once the sweep goes on
        if not self._gone_within(GONE_WAIT_S):
            out["left_running"] = group_members(proc.pid)
        self._release_watchdog()
        return out

    async def stop_async(self) -> dict[str, Any]:
        """``stop`` on a thread of its own, so its waits do not hold up the event loop."""
        return await asyncio.to_thread(self.stop)

    def _gone_within(self, timeout_s: float) -> bool:
        """Whether the leader and its whole group are gone within ``timeout_s``."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while True:  # bounded: the deadline
            if self.proc.poll() is not None and not group_members(self.proc.pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def record(self, sweep_dir: Path) -> dict[str, Any]:
        """The sweep manifest's entry of this server."""
        return {"name": self.name, "argv": self.argv, "url": self.url, "pid": self.pid,
                "stdout": str(self.stdout_path.relative_to(sweep_dir)),
                "stderr": str(self.stderr_path.relative_to(sweep_dir)),
                "ready_after_s": self.ready_after_s}


def group_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` still running, zombies left out (``/proc``; elsewhere
    the group answering signal 0 stands for its leader)."""
    proc_dir = Path("/proc")
    if not (proc_dir / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    out = []
    for entry in proc_dir.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:  # gone meanwhile
            continue
        # after the command name (in parentheses, may hold spaces): state, ppid, pgrp
        fields = stat[stat.rfind(b")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            out.append(int(entry.name))
    return out


def _start_watchdog() -> subprocess.Popen[bytes]:
    """One server's watchdog (``watchdog.py``) in a session of its own; stdin: its pipe."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(Path(__file__).with_name("watchdog.py"))],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pgid, sig)


async def run_server_points(runner: SweepRunner, entries: list[dict[str, Any]],
                            spec: ServeSpec, url: str,
                            headers: Mapping[str, str] | None = None) -> list[int]:
    """Per server point with entries not done: start its server, run them, stop it.
    Returns the indices of failed points."""
    failed: list[int] = []
    if runner.sweep.manifest.servers is None:
        runner.sweep.manifest.servers = {}
    servers = runner.sweep.manifest.servers
    for s_idx, params in enumerate(spec.points()):
        group = [e for e in entries  # its entries: their serve.NAME params are this point's
                 if {k.removeprefix(SERVE_PREFIX): v for k, v in e["params"].items()
                     if k.startswith(SERVE_PREFIX)} == params]
        todo = [e for e in group if e["status"] != "done"]
        if not todo:
            continue
        name = f"s{s_idx:03d}"
        server = ManagedServer(spec.argv(params), url, runner.dir / SERVERS, name,
                               ready_timeout_s=spec.ready_timeout_s,
                               grace_s=spec.grace_s, headers=headers)
        runner._say(f"server {name} ({_label(params)}): starting")
        record: dict[str, Any] = {"params": params}
        try:
            server.start()
            record.update(server.record(runner.dir))
            await server.wait_ready()
            record.update(server.record(runner.dir))
            runner._say(f"server {name}: ready after {server.ready_after_s:.1f} s")
            for e in todo:
                if (code := server.exited()) is not None:
                    raise server.failure(f"server {name} exited with status {code} during "
                                         "an earlier point")
                try:
                    await runner.measure_many([e])
                except Exception:  # a run that could not reach its server: why it could not
                    if server.exited() is None:
                        raise
                if (code := server.exited()) is not None:
                    raise server.failure(f"server {name} exited with status {code} during "
                                         f"point {e['index']} ({e['label']})")
        except ServerFailed as exc:
            failed += _fail(runner, todo, exc, name)
        finally:
            record.update(await server.stop_async())
            servers[name] = redact.obj(record)  # a key in the command line stays out
            runner.save()
            runner._say(f"server {name}: {record['stopped']}")
    return failed


def _fail(runner: SweepRunner, todo: list[dict[str, Any]], exc: ServerFailed,
          name: str) -> list[int]:
    """Mark failed every point the server could not serve, and the one it died during."""
    out = []
    for e in todo:
        during = f"point {e['index']} " in exc.reason
        if e["status"] == "done" and not during:
            continue
        e["status"] = "failed"
        e["failure"] = {"server": name, "reason": exc.reason, "log_tail": exc.tail}
        out.append(e["index"])
        runner._say(f"{e['label']}: failed ({exc.reason})")
    return out


def _label(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "no parameters"
