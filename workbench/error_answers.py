"""What a server's JSON error answer says: the one reading of an error object, for the
client that meets it in an answer (``backends.base``) and for the report that explains a
stored error (``metrics.deviations``). The shapes: docs/reports.md, "Errors"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["answer_message", "error_message"]


def error_message(obj: Any) -> Any:
    """The message of a server's error object, None when ``obj`` is none: OpenAI, vLLM,
    SGLang and llama.cpp's ``{"error": {"message": ...}}`` (or ``{"error": "..."}``), vLLM's
    older ``{"object": "error", "message": ...}``; the error itself when it has no
    message."""
    if not isinstance(obj, Mapping) or ("error" not in obj and obj.get("object") != "error"):
        return None
    err = obj.get("error", obj)
    return err.get("message", err) if isinstance(err, Mapping) else err


def answer_message(obj: Any) -> str | None:
    """The message of an answer the server refused (HTTP 4xx/5xx): ``error_message``, else
    a top-level ``message`` or FastAPI's ``detail``; None when it says no text."""
    said = error_message(obj)
    if not (isinstance(said, str) and said.strip()) and isinstance(obj, Mapping):
        said = obj.get("message") or obj.get("detail")
    return said if isinstance(said, str) and said.strip() else None
