"""BurstGPT traces (HPMLL/BurstGPT): CSV ``Timestamp,Model,Request tokens,Response
tokens,Total tokens,Log Type`` (BurstGPT_3 adds ``Session ID``, ``Elapsed time``), one
independent request a row, Timestamp in seconds rebased to the first request kept; a
``Response tokens`` of 0 is a failed request (docs/trace-formats.md, "burstgpt").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Workload
from workbench.traces import bounds
from workbench.traces._io import (
    as_float,
    check_columns,
    choice_option,
    header_sniffer,
    read_csv,
    token_count,
)
from workbench.traces.formats import register_format
from workbench.traces.shared import Request, note_rows, request_workload

COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens",
           "Log Type")
OPTIONAL = ("Session ID", "Elapsed time")  # BurstGPT_3's
FAILED = ("skip", "keep")
_MAX_S = bounds.MAX_ARRIVAL_MS / 1000
_SHOWN_VALUES = 10  # a column's values named in an error, at most


def _filter(name: str, value: Any) -> str | None:
    """A ``model`` / ``log_type`` option: None (keep every row) or a column's value."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise ConfigError(f"burstgpt option {name} must be a non-empty string (a value of the "
                      f"file's column), got {bounds.shown(value)}")


def _text(path: Path, line: int, name: str, value: str) -> str:
    text = value.strip()
    if not text:
        raise TraceFormatError(path, line, f"{name} must not be empty")
    return text


def _unit_meta(path: Path, line: int, row: dict[str, str], model: str, kind: str,
               shared: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """A unit's ``meta``; one dict for every row of a model and log type without BurstGPT_3's
    columns (``shared``: read only, and millions of rows need not hold a dict each)."""
    sid = row.get("Session ID", "").strip()
    elapsed = row.get("Elapsed time", "").strip()
    if not sid and not elapsed:
        return shared.setdefault((model, kind), {"model": model, "log_type": kind})
    meta: dict[str, Any] = {"model": model, "log_type": kind}
    if sid:
        meta["session_id"] = sid
    if elapsed:
        meta["elapsed_s"] = as_float(path, line, "Elapsed time", elapsed,
                                     maximum=bounds.MAX_WAIT_MS / 1000, unit="s")
    return meta


@register_format(
    "burstgpt",
    sniff=header_sniffer(COLUMNS),
    description="BurstGPT CSV: Timestamp (s),Model,Request tokens,Response tokens,"
    "Total tokens,Log Type (options model, log_type, failed)",
)
def read_burstgpt(path: Path, *, model: str | None = None, log_type: str | None = None,
                  failed: str = "skip") -> Workload:
    """Load a BurstGPT trace: one independent request a row, in file order; ``model`` and
    ``log_type`` keep only the rows with that ``Model`` / ``Log Type``; ``failed``: what
    becomes of a failed request (``Response tokens`` 0): ``skip`` it, or ``keep`` its
    prompt with 1 output token."""
    want_model, want_kind = _filter("model", model), _filter("log_type", log_type)
    choice_option("burstgpt", "failed", failed, FAILED)
    path = Path(path)
    header, header_line, rows = read_csv(path, COLUMNS, "burstgpt")
    check_columns(path, header_line, header, COLUMNS + OPTIONAL,
                  f"{','.join(COLUMNS)} (and BurstGPT_3's {', '.join(OPTIONAL)})")
    seen_models: dict[str, None] = {}
    seen_kinds: dict[str, None] = {}
    kept: list[tuple[int, int, float, int, int, dict]] = []
    failures: list[int] = []
    empty: list[int] = []
    filtered = 0
    shared: dict[tuple[str, str], dict[str, Any]] = {}
    for n, (line, row) in enumerate(rows):
        at = as_float(path, line, "Timestamp", row["Timestamp"], maximum=_MAX_S, unit="s")
        prompt = token_count(path, line, "Request tokens", row["Request tokens"])
        out = token_count(path, line, "Response tokens", row["Response tokens"])
        token_count(path, line, "Total tokens", row["Total tokens"])  # checked, not used
        bounds.check_round(path, line, prompt, out)
        name = _text(path, line, "Model", row["Model"])
        kind = _text(path, line, "Log Type", row["Log Type"])
        meta = _unit_meta(path, line, row, name, kind, shared)
        seen_models[name] = seen_kinds[kind] = None
        if want_model not in (None, name) or want_kind not in (None, kind):
            filtered += 1
            continue
        if out == 0 and failed == "skip":
            failures.append(line)
            continue
        if prompt == 0:
            empty.append(line)
            continue
        if out == 0:
            failures.append(line)
        kept.append((line, n, at, prompt, max(out, 1), meta))
    _check_filters(path, want_model, want_kind, seen_models, seen_kinds)
    if not kept:
        raise TraceFormatError(path, header_line + 1, (
            f"no row to replay: {filtered} left out by the model/log_type options, "
            f"{len(failures)} failed (Response tokens 0), {len(empty)} with an empty prompt "
            "(Request tokens 0)"))
    origin = min(at for _, _, at, _, _, _ in kept)
    requests = [Request(line, n, (at - origin) * 1000, prompt, out, meta)
                for line, n, at, prompt, out, meta in kept]
    wmeta: dict[str, Any] = {"arrival_origin_ms": origin * 1000, "failed": failed}
    if want_model is not None:
        wmeta["model"] = want_model
    if want_kind is not None:
        wmeta["log_type"] = want_kind
    what = "Response tokens 0 (a failed request)"
    if failed == "skip":
        note_rows(path, wmeta, "skipped_failed_requests", failures, what,
                  "skipped (--trace-option failed=keep replays its prompt with 1 output token)")
    else:
        note_rows(path, wmeta, "clamped_output_tokens", failures, what,
                  "each replayed as 1 output token (failed=keep)")
    return request_workload(path, "burstgpt", requests, wmeta, time_column="Timestamp",
                            prompt_column="Request tokens", empty=empty)


def _check_filters(path: Path, model: str | None, kind: str | None,
                   models: dict[str, None], kinds: dict[str, None]) -> None:
    """A filter no row matches is a typo, not an empty trace: named with the file's values."""
    for option, column, want, values in (("model", "Model", model, models),
                                         ("log_type", "Log Type", kind, kinds)):
        if want is not None and want not in values:
            shown = [repr(v) for v in list(values)[:_SHOWN_VALUES]]
            rest = len(values) - len(shown)
            more = f" and {rest:,} more" if rest else ""
            raise TraceFormatError(path, 0, (
                f"no row has {column} {want!r} (the {option} option); the file has "
                f"{', '.join(shown)}{more}"))

