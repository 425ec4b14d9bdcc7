"""Exceptions users see. Each says what broke and what to change."""

from __future__ import annotations

import errno as _errno
import os
import signal
from typing import IO

from workbench import redact

#: the errnos of a write that failed for want of room or a working disk (not of a path)
WRITE_ERRNOS = frozenset(
    getattr(_errno, name) for name in ("ENOSPC", "EFBIG", "EIO", "EDQUOT", "EROFS")
    if hasattr(_errno, name)
)


class WorkbenchError(Exception):
    """Base class of every error workbench raises on purpose. Its text is redacted as it is
    made, by the redaction the CLI prints through (``redact.text``): a notebook that prints
    it never shows a secret the command line would have hidden (docs/security.md,
    "Errors")."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact.text(a) if isinstance(a, str) else a for a in args))


class TraceFormatError(WorkbenchError):
    """A trace file broke a rule of its format: ``path:line: rule``, ``line`` 1-based (0: the
    file as a whole)."""

    def __init__(self, path: object, line: int, rule: str) -> None:
        self.path = str(path)
        self.line = int(line)
        self.rule = redact.text(rule)
        super().__init__(f"{self.path}:{self.line}: {self.rule}")

    def __reduce__(self) -> tuple[type, tuple[str, int, str]]:
        # pickled whole: a sweep's or plan's point process raises it to its parent
        return (type(self), (self.path, self.line, self.rule))


class ConfigError(WorkbenchError):
    """A run configuration is invalid; the message says which key to change. ``field``:
    the config field whose value was refused (``arrival.rate``, ``target.engine.num_blocks``,
    ``sweep.repeats``), by which the command line names the flag that gave it
    (docs/interface.md, "Flag errors"); None: no one field's."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field  # pickled with it (``Exception`` keeps ``__dict__``): a sweep's
        # or plan's point process raises it to its parent


class ListenError(ConfigError):
    """A server (``sim serve``, ``capture``) could not listen on ``host:port``: a name that
    does not resolve or an address not of this machine (``part`` "host"), a port in use or
    not allowed (``part`` "port"); a command names its flag (docs/interface.md,
    "Listening"), exit code 2."""

    def __init__(self, host: str, port: int, exc: OSError) -> None:
        self.host, self.port = host, port
        code = exc.errno if isinstance(exc.errno, int) else 0
        # a resolver's error (socket.gaierror: a negative errno) or an address not here
        self.part = "host" if code <= 0 or code == _errno.EADDRNOTAVAIL else "port"
        # asyncio's bind error's strerror is its whole sentence: the errno's own words
        self.reason = (os.strerror(code) if code > 0 else exc.strerror or str(exc)).lower()
        shown = f"[{host}]" if ":" in host else host
        super().__init__(f"cannot listen on {shown}:{port} ({self.reason})")


class OutputWriteError(WorkbenchError):
    """A file of a run or a report could not be written; the message names path and errno."""

    def __init__(self, path: object, exc: OSError) -> None:
        self.path = str(path)
        self.errno = exc.errno
        name = _errno.errorcode.get(exc.errno or 0, "")
        self.reason = reason = exc.strerror or str(exc)
        super().__init__(f"cannot write {self.path}: {reason}{f' ({name})' if name else ''}")

    def __reduce__(self) -> tuple[type, tuple[str, OSError]]:
        # pickled whole: a sweep's or plan's point process raises it to its parent
        return (type(self), (self.path, OSError(self.errno, self.reason)))


#: how much of a child process's stderr an error quotes (its last characters)
STDERR_TAIL = 2000


def stderr_tail(fh: IO[bytes] | None, limit: int = STDERR_TAIL) -> str:
    """The last ``limit`` characters a child process wrote to ``fh`` (the temporary file
    its stderr went to), for the error that says why it failed; "" when there is no such
    file or it cannot be read (closed already)."""
    if fh is None:
        return ""
    try:
        fh.seek(0)
        return fh.read().decode("utf-8", "replace")[-limit:].strip()
    except (OSError, ValueError):  # ValueError: closed
        return ""


#: every signal a user can send whose default would kill the process where it stands: each
#: stops a command as Ctrl-C (SIGINT) does (docs/run-directory.md, "Stopping")
STOP_SIGNAL_NAMES = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in STOP_SIGNAL_NAMES if hasattr(signal, name))


class ExitCode:
    """The exit status of every ``workbench`` command: README, "Exit codes"."""

    COMPLETED = 0
    FAILED = 1
    CONFIG_ERROR = 2
    TRACE_ERROR = 3
    ERROR_RATE = 4
    WRITE_FAILED = 5
    CANCELLED = 130

    @staticmethod
    def of_error(exc: BaseException) -> int:
        """The exit status for an error raised out of a command."""
        for kind, code in ((OutputWriteError, ExitCode.WRITE_FAILED),
                           (TraceFormatError, ExitCode.TRACE_ERROR),
                           (ConfigError, ExitCode.CONFIG_ERROR)):
            if isinstance(exc, kind):
                return code
        return ExitCode.FAILED
