"""Secrets never reach a file or a log: redaction of keys, bearer tokens, URL credentials.

What is removed (``docs/security.md``):

- every secret *registered* for the run (the API key read from
  ``backend.api_key_env``, the password of a target URL), wherever it appears;
- any ``Bearer <token>`` / ``Basic <token>`` value and any ``sk-...`` key,
  registered or not (an error body that echoes the request's headers);
- the ``user:password@`` part of any URL in a text.

``text`` is the one function every writer applies (records' server-given
strings, lifecycle rows, manifest, metrics timeline, summary, log records);
``obj`` applies it to every string of a JSON-like value. Redacted parts read
``[REDACTED]``.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

MARK = "[REDACTED]"
_PATTERNS = re.compile(
    r"(?P<scheme>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{4,}"
    r"|\bsk-[A-Za-z0-9_-]{4,}"
    r"|(?P<url>\b[a-z][a-z0-9+.-]*://)[^/\s@'\"<>]+@",
    re.IGNORECASE,
)
_MIN_SECRET = 4  # shorter strings would redact ordinary words
_secrets: set[str] = set()


def register(*secrets: str | None) -> None:
    """Add secrets to redact from now on in this process (they are never removed)."""
    for s in secrets:
        if s and len(s) >= _MIN_SECRET:
            _secrets.add(s)


def _sub(m: re.Match[str]) -> str:
    if m.group("scheme"):
        return m.group("scheme") + MARK
    if m.group("url"):
        return m.group("url") + MARK + "@"
    return MARK


def text(s: str) -> str:
    """``s`` with every registered secret and every key-shaped token replaced."""
    for secret in _secrets:
        if secret in s:
            s = s.replace(secret, MARK)
    return _PATTERNS.sub(_sub, s) if _may_match(s) else s


def _may_match(s: str) -> bool:
    low = s.lower()
    return "sk-" in low or "bearer" in low or "basic" in low or "@" in s


def line(data: bytes) -> bytes:
    """``text`` over one serialized JSON line; a clean line (the usual one) is not copied."""
    low = data.lower()
    if not (
        b"sk-" in low or b"bearer" in low or b"basic" in low or b"@" in data
        or any(s.encode() in data for s in _secrets)
    ):  # fmt: skip
        return data
    return text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def obj(value: Any) -> Any:
    """A copy of a JSON-like value with ``text`` applied to every string (keys too)."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {obj(k) if isinstance(k, str) else k: obj(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [obj(v) for v in value]
    return value


# ------------------------------------------------------------------------- URLs
def url_credentials(url: str) -> tuple[str, str | None, str | None]:
    """``(url without user:password@, user, password)``; unparsable URLs come back as-is.

    ``user:pw@host:port`` without a scheme is read as ``http://...`` (as the transport does).
    """
    if "://" not in url and "@" in url:
        url = f"http://{url.strip()}"
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
        host = parts.hostname
        port = parts.port
    except ValueError:
        return url, None, None
    if user is None and password is None:
        return url, None, None
    netloc = host or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if port is not None:
        netloc += f":{port}"
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return clean, unquote(user) if user else user, unquote(password) if password else password


def strip_url_credentials(url: str) -> str:
    """``url`` without its ``user:password@`` part (what manifests and logs show)."""
    clean, user, password = url_credentials(url)
    if user is None and password is None and "@" in url:
        return _PATTERNS.sub(_sub, url)  # unparsable: redact by pattern
    return clean


def basic_authorization(url: str) -> str | None:
    """The ``Authorization: Basic ...`` value for a URL's credentials, if it has any."""
    import base64

    _, user, password = url_credentials(url)
    if user is None and password is None:
        return None
    register(password)
    token = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode()
    register(token)
    return f"Basic {token}"


# ------------------------------------------------------------------------- logs
class RedactingFilter(logging.Filter):
    """Redacts a log record's message in place (attach to a handler)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: logging reports it itself
            return True
        clean = text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_installed = False


def install_log_redaction() -> None:
    """Redact every log record of this process as it is created (idempotent).

    A record factory (not a handler filter) so that whatever handlers a notebook
    or an application attached later still get the redacted text.
    """
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()
    redactor = RedactingFilter()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        redactor.filter(record)
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
