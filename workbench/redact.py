"""Secrets never reach a file or a log: every registered secret (``register``,
``RunConfig.register_secrets``) and every key-shaped token reads ``[REDACTED]`` in what
``text`` (``obj``, ``line``) is applied to (docs/security.md).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, TextIO
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

import orjson

MARK = "[REDACTED]"
#: a header, query parameter or body field of this name carries a credential
CREDENTIAL_NAME = re.compile(
    r"auth|key|token|secret|passw|pwd|cookie|session|credential|signature|\bsig\b|jwt|"
    r"bearer|\bcode\b",
    re.IGNORECASE,
)
_QUERY_NAME = (
    r"[\w.~-]*(?:auth|key|token|secret|passw|pwd|session|credential|signature|sig|jwt|code)"
    r"[\w.~-]*"
)
_PATTERNS = re.compile(
    r"(?P<scheme>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{4,}"
    r"|\bsk-[A-Za-z0-9_-]{4,}"
    r"|(?P<url>\b[a-z][a-z0-9+.-]*://)[^/\s@'\"<>]+@"
    rf"|(?P<query>[?&;]{_QUERY_NAME}=)[^&;#\s'\"<>]+",
    re.IGNORECASE,
)
_MIN_SECRET = 4  # shorter strings would redact ordinary words
_MIN_UNNAMED = 8  # the same under another name (``x-priority: high`` is not a secret)
_secrets: set[str] = set()
_secret_bytes: list[bytes] = []


def register(*secrets: str | None) -> None:
    """Add secrets to redact from now on in this process (they are never removed), each
    also as a server's echo may spell it (``echoed_forms``)."""
    for s in secrets:
        if s and len(s) >= _MIN_SECRET and s not in _secrets:
            for form in echoed_forms(s):
                if form not in _secrets:
                    _secrets.add(form)
                    _secret_bytes.append(form.encode("utf-8", "surrogateescape"))


def echoed_forms(secret: str) -> list[str]:
    """``secret`` and how an echo of it may be encoded: inside a JSON string (``"`` and
    ``\\`` escaped, non-ASCII as ``\\uXXXX`` or not, ``/`` as ``\\/`` or not) and
    percent-encoded in a URL (docs/security.md: a key with such characters, echoed in a
    JSON error body, kept its tail past the first backslash)."""
    forms = [secret]
    for escaped in (json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]):
        forms += [escaped, escaped.replace("/", "\\/")]
    forms.append(quote(secret, safe=""))
    return list(dict.fromkeys(f for f in forms if len(f) >= _MIN_SECRET))


def register_sent(name: str, value: Any, *, named_only: bool = False) -> None:
    """Register a value sent under ``name`` (a header, a query parameter, a body field),
    and its parts (``Bearer <token>``: the token): from 4 characters under a credential
    name (``CREDENTIAL_NAME``), from 8 under another (``named_only``: never)."""
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return
    value = str(value)
    named = bool(CREDENTIAL_NAME.search(name))
    if not named and (named_only or len(value) < _MIN_UNNAMED):
        return
    register(value)
    for part in re.split(r"[\s;,=]+", value):
        if len(part) >= (_MIN_SECRET if named else _MIN_UNNAMED) and part.lower() not in (
            "bearer", "basic", "token",
        ):  # fmt: skip
            register(part)


def register_body(body: Any, name: str = "") -> None:
    """The values of credential-named fields of ``extra_body`` (any name on the path)."""
    if isinstance(body, Mapping):
        for key, value in body.items():
            register_body(value, f"{name}.{key}" if name else str(key))
    elif isinstance(body, list | tuple):
        for value in body:
            register_body(value, name)
    elif name:
        register_sent(name, body, named_only=True)


def register_url(url: str) -> None:
    """A target URL's user, password, Basic token and query values."""
    basic_authorization(url)
    _, user, password = url_credentials(url)
    if password is None:
        register(user)  # ``https://TOKEN@host``: the user is the token
    try:
        query = urlsplit(url if "://" in url else f"http://{url}").query
    except ValueError:
        return
    for name, value in parse_qsl(query, keep_blank_values=True):
        register_sent(name, value)


def _sub(m: re.Match[str]) -> str:
    head = m.group("scheme") or m.group("url") or m.group("query") or ""
    return head + MARK + ("@" if m.group("url") else "")


def text(s: str) -> str:
    """``s`` with every registered secret and every key-shaped token replaced."""
    for secret in _secrets:
        if secret in s:
            s = s.replace(secret, MARK)
    return _PATTERNS.sub(_sub, s) if _may_match(s) else s


def excerpt(s: str, limit: int) -> str:
    """The first ``limit`` characters of ``s`` redacted whole first (``text``): a secret a
    server echoed and an excerpt cut in two would no longer be recognised afterwards, and
    its first part would be written (docs/security.md)."""
    return text(s)[:limit]


def _may_match(s: str) -> bool:
    low = s.lower()
    return (
        "sk-" in low or "bearer" in low or "basic" in low or "@" in s
        or ("=" in s and ("?" in s or "&" in s or ";" in s))
    )  # fmt: skip


_NUMBER_BYTES = b"0123456789,[]"
_FOLD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
_SCAN_MAX = 32  # '-' or 'b' bytes looked at one by one before ``_named`` searches whole


def _named(low: bytes) -> bool:
    """``sk-``, ``bearer`` or ``basic`` in ``low``, found from each ``-`` and ``b`` (a record
    line has two of each): ~2x faster than three substring searches over it; past
    ``_SCAN_MAX`` of a byte, the searches."""
    i, seen = low.find(b"-", 2), 0
    while i >= 0 and seen < _SCAN_MAX:
        if low[i - 2 : i] == b"sk":
            return True
        i, seen = low.find(b"-", i + 1), seen + 1
    if i >= 0 and b"sk-" in low:
        return True
    i, seen = low.find(b"b"), 0
    while i >= 0 and seen < _SCAN_MAX:
        if low.startswith((b"bearer", b"basic"), i):
            return True
        i, seen = low.find(b"b", i + 1), seen + 1
    return i >= 0 and (b"bearer" in low or b"basic" in low)


def line(data: bytes) -> bytes:
    """``text`` over one serialized JSON line (not copied when clean; value by value when it
    holds a registered secret, so the JSON stays whole)."""
    registered = bool(_secret_bytes) and any(s in data for s in _secret_bytes)
    # the triggers looked for without the digits and number punctuation most of a record
    # line is (token times, hashes): deleting them can only join letters into a trigger,
    # never break one, so a line that passes here had none (~4x less time a line); the
    # same pass lowercases (ASCII, as ``bytes.lower``)
    low = data.translate(_FOLD, _NUMBER_BYTES)
    if not (
        registered or b"@" in low or (b"=" in low and (b"?" in low or b"&" in low or b";" in low))
        or _named(low)
    ):  # fmt: skip
        return data
    if registered:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
        else:
            return orjson.dumps(obj(doc), option=orjson.OPT_APPEND_NEWLINE)
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


def url_credentials(url: str) -> tuple[str, str | None, str | None]:
    """``(url without user:password@, user, password)``; unparsable URLs come back as-is;
    ``user:pw@host:port`` reads as ``http://...``."""
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
    """``url`` without its ``user:password@`` part."""
    clean, user, password = url_credentials(url)
    if user is None and password is None and "@" in url:
        return _PATTERNS.sub(_sub, url)  # unparsable: redact by pattern
    return clean


def safe_url(url: str) -> str:
    """``url`` as manifests and logs show it: no ``user:password@``, every query value
    ``[REDACTED]`` (``?api_key=[REDACTED]&api-version=[REDACTED]``)."""
    clean = strip_url_credentials(url)
    try:
        parts = urlsplit(clean)
    except ValueError:
        return text(clean)
    if not parts.query:
        return clean
    query = "&".join(
        f"{name}={MARK}" if sep else name
        for name, sep, _ in (item.partition("=") for item in parts.query.split("&"))
    )
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


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


class RedactingStream:
    """A text stream that writes ``text(s)`` to the stream it wraps (the CLI's)."""

    def __init__(self, stream: TextIO) -> None:
        self.wrapped = stream

    def write(self, s: str) -> int:
        self.wrapped.write(text(s) if isinstance(s, str) else s)
        return len(s)

    def writelines(self, lines: Iterable[str]) -> None:
        for item in lines:
            self.write(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


_installed = False
#: formats a log record's traceback to be redacted (``install_log_redaction``)
_TRACEBACKS = logging.Formatter()


def install_log_redaction() -> None:
    """Redact every log record of this process as it is created (idempotent): a record
    factory, so handlers attached later get the redacted text too."""
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: logging reports it itself
            return record
        clean = text(message)
        if clean != message:
            record.msg, record.args = clean, None
        # a traceback repeats the exception's text (a server's body, a URL): formatted
        # here, redacted, and kept where every Formatter takes it instead of formatting
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            record.exc_text = text(_TRACEBACKS.formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = text(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
