"""One rule for the exit status of every command that produced a run or reads one
(README, "Exit codes"): a run that did not finish whole never exits 0.

``replay`` and ``simulate`` (the run they made) and ``report`` (the runs it read) all ask
``run_exit_status``; the note that says how such a run ended is ``report.tables.run_end_note``,
the same words in both.
"""

from __future__ import annotations

from workbench.errors import ExitCode
from workbench.plurals import counted

#: the manifest status of a run that finished whole (anything else: partial, failed,
#: cancelled, killed, still running)
WHOLE = "completed"


def run_exit_status(status: str | None, *, cancelled: bool = False, errors: int = 0,
                    ok: int = 0, max_error_rate: float | None = None) -> int:
    """The exit status for a run of manifest ``status``: 130 when a signal stopped the
    command that ran it (``cancelled``); 4 when more than ``max_error_rate`` of its requests
    failed (failed / (ok + failed); None: not judged: a run made without one, whose
    manifest records none, as ``report`` reads it);
    1 when it did not finish whole (its status is not ``completed``); else 0."""
    if cancelled:
        return ExitCode.CANCELLED
    if max_error_rate is not None and errors and errors / (errors + ok) > max_error_rate:
        return ExitCode.ERROR_RATE
    if status is not None and status != WHOLE:
        return ExitCode.FAILED
    return ExitCode.COMPLETED


def over_error_rate(errors: int, ok: int, max_error_rate: float) -> str:
    """Why a run exits 4, in one line: ``"2 of 5 requests failed, more than
    --max-error-rate 0"``."""
    return (f"{errors} of {counted(errors + ok, 'request')} failed, more than "
            f"--max-error-rate {max_error_rate:g}")
