"""What a server says it serves: the context length in its ``GET /v1/models`` answer
(docs/real-engines.md, "Prompts longer than the server's context")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.sim_card import SIM_CARD_KEY, SIM_OWNER

__all__ = ["SIM_CARD_KEY", "SIM_OWNER", "ServedContext", "listed_models", "served_context",
           "simulated_engine"]


#: where each engine puts a model's context length in its ``/v1/models`` entry:
#: vLLM and SGLang ``max_model_len``; llama.cpp ``meta.n_ctx`` (a slot's context)
CONTEXT_FIELDS: tuple[tuple[str, ...], ...] = (("max_model_len",), ("meta", "n_ctx"))


@dataclass(frozen=True)
class ServedContext:
    """A served model's context length (tokens) and the field it was read from."""

    model: str
    tokens: int
    field: str

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "max_model_len": self.tokens, "field": self.field}


def _dig(entry: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = entry
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _names(entry: Mapping[str, Any]) -> set[str]:
    aliases = entry.get("aliases")
    more = [a for a in aliases if isinstance(a, str)] if isinstance(aliases, list) else []
    return {str(entry.get("id")), *more}


def _entries(body: bytes) -> list[Mapping[str, Any]]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return []
    data = doc.get("data") if isinstance(doc, Mapping) else None
    return [e for e in data if isinstance(e, Mapping)] if isinstance(data, list) else []


def listed_models(body: bytes) -> list[str]:
    """The model ids (and aliases) a ``/v1/models`` answer lists; empty when none."""
    names: list[str] = []
    for entry in _entries(body):
        names += sorted(_names(entry) - set(names))
    return names


def served_context(body: bytes, model: str | None) -> ServedContext | None:
    """The context length of ``model`` (or of the one model served, when ``model`` is
    None or not listed) from a ``/v1/models`` answer; None when the answer does not say."""
    entries = _entries(body)
    named = [e for e in entries if model is not None and model in _names(e)]
    pick = named[0] if named else entries[0] if len(entries) == 1 else None
    if pick is None:
        return None
    for path in CONTEXT_FIELDS:
        value = _dig(pick, path)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return ServedContext(str(pick.get("id")), value, ".".join(path))
    return None


def simulated_engine(body: bytes) -> dict[str, Any] | None:
    """What a ``/v1/models`` answer says it simulates, ``{"version": ..., "engine": {...}}``,
    when a card is owned by ``workbench sim serve`` (``SIM_OWNER``) and says so
    (``SIM_CARD_KEY``); None for any other server (a real vLLM, SGLang, llama.cpp)."""
    for entry in _entries(body):
        card = entry.get(SIM_CARD_KEY)
        if entry.get("owned_by") == SIM_OWNER and isinstance(card, Mapping):
            engine = card.get("engine")
            return {"server": SIM_OWNER, "version": str(card.get("version")),
                    "engine": dict(engine) if isinstance(engine, Mapping) else {}}
    return None
