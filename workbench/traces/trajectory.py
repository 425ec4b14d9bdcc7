"""batchbench v1 replay manifests (JSONL, one trajectory a line) → sessions arriving at 0.

Fields, the growth rule (request k+1 appends to request k's conversation unless it
says ``reset_before``) and ids: docs/trace-formats.md, "trajectory".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.errors import TraceFormatError
from workbench.plurals import noun
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds
from workbench.traces.formats import register_format
from workbench.traces.json_io import (
    first_json_object,
    json_int,
    json_number,
    json_tokens,
    unit_per_line,
)

_TOP_FIELDS = frozenset(("schema_version", "trajectory_id", "requests"))
_REQUEST_FIELDS = frozenset(("prompt_tokens", "output_tokens", "delay_after_ms", "reset_before"))
_REQUIRED_REQUEST = frozenset(("prompt_tokens", "output_tokens"))


def _check_fields(
    path: Path,
    line: int,
    obj: dict[str, Any],
    allowed: frozenset[str],
    required: frozenset[str],
    where: str,
) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise TraceFormatError(
            path, line, f"unknown {noun(len(unknown), 'field')} {', '.join(unknown)} {where}")
    missing = sorted(required - obj.keys())
    if missing:
        raise TraceFormatError(
            path, line, f"missing {noun(len(missing), 'field')} {', '.join(missing)} {where}")


def _request(path: Path, line: int, k: int, req: Any) -> tuple[int, int, float, bool]:
    """``(prompt, output, delay_after_ms, reset_before)`` of request ``k``."""
    where = f"in requests[{k}]"
    if not isinstance(req, dict):
        raise TraceFormatError(path, line, f"requests[{k}] must be an object")
    _check_fields(path, line, req, _REQUEST_FIELDS, _REQUIRED_REQUEST, where)
    prompt = json_tokens(path, line, f"requests[{k}].prompt_tokens", req["prompt_tokens"],
                         minimum=1)
    output = json_tokens(path, line, f"requests[{k}].output_tokens", req["output_tokens"],
                         minimum=1)
    bounds.check_round(path, line, prompt, output, f"requests[{k}]")
    delay = req.get("delay_after_ms", 0)
    delay_ms = json_number(path, line, f"requests[{k}].delay_after_ms", delay,
                           maximum=bounds.MAX_WAIT_MS)
    reset = req.get("reset_before", False)
    if not isinstance(reset, bool):
        raise TraceFormatError(
            path, line, f"requests[{k}].reset_before must be true or false, "
                        f"got {bounds.shown(reset)}"
        )
    return prompt, output, delay_ms, reset


def _trajectory(path: Path, line: int, obj: dict[str, Any]) -> Unit:
    _check_fields(path, line, obj, _TOP_FIELDS, _TOP_FIELDS, "in trajectory")
    version = obj["schema_version"]
    try:  # an integer as every reader reads one (1.0 too)
        number: int | None = json_int(path, line, "schema_version", version, minimum=None)
    except TraceFormatError:
        number = None
    if number != 1:
        raise TraceFormatError(
            path, line, f"schema_version must be 1 (only v1 is supported), "
                        f"got {bounds.shown(version)}"
        )
    tid = obj["trajectory_id"]
    if not isinstance(tid, str) or not tid.strip():
        raise TraceFormatError(path, line, f"trajectory_id must be a non-empty string, "
                                           f"got {bounds.shown(tid)}")
    bounds.check_id(path, line, "trajectory_id", tid)
    requests = obj["requests"]
    if not isinstance(requests, list) or not requests:
        raise TraceFormatError(path, line, "requests must be a non-empty list")
    rounds: list[Round] = []
    prev: tuple[int, int] | None = None
    for k, req in enumerate(requests):
        prompt, output, delay, reset = _request(path, line, k, req)
        if prev is None or reset:
            prefix = 0
        else:
            prefix = prev[0] + prev[1]
            if prompt < prefix:
                raise TraceFormatError(
                    path,
                    line,
                    f"requests[{k}].prompt_tokens {prompt} < previous prompt + output {prefix} "
                    "(negative growth) without reset_before",
                )
        rounds.append(
            Round(
                f"{tid}_request_{k}",
                tid,
                k,
                0.0,
                prefix,
                prompt - prefix,
                output,
                delay,
                None,
                reset,
            )
        )
        prev = (prompt, output)
    return Unit(tid, "session", 0.0, tuple(rounds))


def _sniff(lines: list[str]) -> bool:
    obj = first_json_object(lines)
    return obj is not None and "schema_version" in obj and "trajectory_id" in obj


@register_format(
    "trajectory",
    sniff=_sniff,
    description="batchbench v1 replay manifest JSONL: one trajectory of requests a line",
)
def read_trajectory(path: Path) -> Workload:
    """Load a batchbench v1 manifest: each trajectory a session, all arriving at 0."""
    return unit_per_line(Path(path), "trajectory", _trajectory, "trajectory_id")
