"""Exceptions users see. Each says what broke and what to change."""

from __future__ import annotations


class WorkbenchError(Exception):
    """Base class of every error workbench raises on purpose."""


class TraceFormatError(WorkbenchError):
    """A trace file broke a rule of its format.

    The message is always ``path:line: rule`` so an editor can jump to it;
    ``line`` is 1-based (0 when the problem is the file as a whole).
    """

    def __init__(self, path: object, line: int, rule: str) -> None:
        self.path = str(path)
        self.line = int(line)
        self.rule = rule
        super().__init__(f"{self.path}:{self.line}: {rule}")


class ConfigError(WorkbenchError):
    """A run configuration is invalid; the message says which key to change."""
