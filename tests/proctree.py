"""A process's descendants from ``/proc``, for the tests that kill a command with SIGKILL
and check that nothing it started outlives it (issue 23, rule 1)."""

from __future__ import annotations

import os
from pathlib import Path


def _stat_fields(stat: bytes) -> list[bytes]:
    """``/proc/PID/stat``'s fields after the command name (state first)."""
    return stat[stat.rfind(b")") + 2 :].split()


def descendants(pid: int, cmd_contains: bytes | None = None) -> dict[int, int]:
    """Every live (not zombie) descendant of ``pid`` — only those whose command line holds
    ``cmd_contains`` when given — as {pid: start time}, the start time telling a process
    from a later one that reuses its pid."""
    parents: dict[int, list[int]] = {}
    info: dict[int, tuple[int, bytes]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
            cmd = Path(entry.path, "cmdline").read_bytes() if cmd_contains else b""
        except OSError:
            continue
        fields = _stat_fields(stat)
        if fields[0] == b"Z":
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
        info[int(entry.name)] = (int(fields[19]), cmd)
    out, todo = {}, [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if cmd_contains is None or cmd_contains in info[child][1]:
                out[child] = info[child][0]
            todo.append(child)
    return out


def alive(pid: int, start: int) -> bool:
    """Alive and the same process (not a zombie, not a reused pid)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    fields = _stat_fields(stat)
    return fields[0] != b"Z" and int(fields[19]) == start


def living(procs: dict[int, int]) -> list[int]:
    """The pids of ``procs`` ({pid: start time}) still alive."""
    return [p for p, s in procs.items() if alive(p, s)]


def kill_left(procs: dict[int, int]) -> None:
    """SIGKILL whatever of ``procs`` is still alive (a test never leaves an orphan behind)."""
    import signal

    for pid in living(procs):
        os.kill(pid, signal.SIGKILL)
