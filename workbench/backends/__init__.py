"""Axis 4 — backends: one codec per wire protocol, one transport that owns HTTP and time.
Importing this package registers the four codecs in ``BACKENDS``."""

from __future__ import annotations

from workbench.backends import openai, openai_chat, sglang_tokens, vllm_tokens  # noqa: F401
from workbench.backends.base import (
    BACKENDS,
    BackendError,
    Codec,
    StreamOutcome,
    StreamParser,
    WireRequest,
    make_codec,
)

__all__ = [
    "BACKENDS",
    "BackendError",
    "Codec",
    "StreamOutcome",
    "StreamParser",
    "WireRequest",
    "make_codec",
]
