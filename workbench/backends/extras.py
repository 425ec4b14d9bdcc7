"""What a user adds to every request: headers, body fields, and the unit's routing slot
(``backend.options`` ``headers``, ``extra_body``, ``routing_header``, ``routing_field``;
docs/sweeps.md, "Command line: run knobs and request extras").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench import redact
from workbench.errors import ConfigError

if TYPE_CHECKING:  # annotations only: base builds codecs with these extras (make_codec)
    from workbench.backends.base import Codec, WireRequest

EXTRA_KEYS = ("headers", "extra_body", "routing_header", "routing_field")


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def resolve_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """Header values as sent (``$NAME`` from the environment), registered for redaction."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        text = str(value)
        if text.startswith("$"):
            env = os.environ.get(text[1:])
            if env is None:
                raise ConfigError(f"backend.options.headers[{name!r}] reads ${text[1:]}, "
                                  "which is not set in the environment")
            text = env
            redact.register(text)  # read from the environment: a secret by intent
        out[str(name)] = text
        redact.register_sent(str(name), text)
    return out


@dataclass(frozen=True)
class RequestExtras:
    """A protocol codec plus fixed headers, body fields and the routing slot."""

    inner: Codec
    headers: dict[str, str] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    routing_header: str | None = None
    routing_field: str | None = None

    @classmethod
    def wrap(cls, inner: Codec, extras: Mapping[str, Any]) -> Codec:
        if not extras:
            return inner
        headers = extras.get("headers") or {}
        body = extras.get("extra_body") or {}
        if not isinstance(headers, Mapping) or not isinstance(body, Mapping):
            raise ConfigError("backend.options.headers and extra_body must be mappings")
        redact.register_body(body)
        return cls(inner, resolve_headers(headers), dict(body), extras.get("routing_header"),
                   extras.get("routing_field"))

    def body(self, req: WireRequest) -> dict[str, Any]:
        body = self.inner.body(req)
        if self.extra_body:
            _merge(body, self.extra_body)
        if self.routing_field and req.routing_slot is not None:
            *parents, leaf = self.routing_field.split(".")
            node = body
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = req.routing_slot
        return body

    def request_headers(self, req: WireRequest) -> dict[str, str] | None:
        """Headers of this request beyond the transport's own (None: none)."""
        if self.routing_header and req.routing_slot is not None:
            return {**self.headers, self.routing_header: str(req.routing_slot)}
        return self.headers or None

    def __getattr__(self, name: str) -> Any:  # the codec's own: url, parser, state
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
