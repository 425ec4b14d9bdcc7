"""Type and range checks of configuration values, from dataclass annotations.

One mechanism for every configuration value: a field's *type* comes from its
annotation (``int | None``, ``float | Literal["auto"]``, ``dict[str, float]``,
``tuple[float, float, float]``, a ``Literal``), its *range* from the small
``RANGES`` table below, keyed by the field's path. ``check_dataclass`` walks
the fields of a spec and raises one ``ConfigError`` naming the first bad field::

    arrival.max_concurrency: expected a positive integer, got '16' (str)

Rules: an integer is an ``int`` (never a ``bool``, never ``16.0`` or ``'16'``);
a number is an ``int`` or ``float`` that is finite (NaN and infinity are
refused everywhere); ``bool`` is ``true``/``false`` only. The bounds and the
reasons for them are in ``docs/config-bounds.md``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from workbench.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Range:
    """``lo <= x <= hi`` (``lo < x`` when ``open_lo``); ``None`` leaves a side open."""

    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False

    def holds(self, x: float) -> bool:
        if self.lo is not None and (x <= self.lo if self.open_lo else x < self.lo):
            return False
        return self.hi is None or x <= self.hi


POSITIVE = Range(0, None, open_lo=True)
NON_NEGATIVE = Range(0, None)
#: no count of units, slots, sessions or requests a client on one host can handle is
#: above a million (docs/config-bounds.md)
MAX_COUNT = 1_000_000
#: the longest context any engine serves today is ~10M tokens; 2**24 leaves room
MAX_TOKENS = 2**24
#: a timeout, duration or interval longer than a week is a typo, not a setting
MAX_SECONDS = 7 * 24 * 3600.0
#: the slowest arrival rate: one unit every ~11.6 days (``--rate 1e-300`` is a typo)
MIN_RATE = 1e-6
#: tokens of one round's output (``output_len fixed:K``) and of a session's output budget
#: (``budget:T``): the per-round bound of docs/trace-bounds.md
MAX_OUTPUT_TOKENS = 10_000_000
#: nesting of a configuration value (a config file, ``extra_body``, ``--body-field``):
#: a config is a few levels deep; 3,000 levels would overflow Python's stack
MAX_DEPTH = 64
#: nodes of a configuration document, YAML aliases expanded (a billion-laughs bomb
#: of 907 bytes expands to ~10^9)
MAX_NODES = 1_000_000
#: RFC 9110 ``token``: the characters an HTTP header (field) name may hold
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

RANGES: dict[str, Range] = {
    "trace.max_items": Range(1, 10**9),
    "trace.offset": Range(0, 10**9),
    "context.max_model_len": Range(1, MAX_TOKENS),
    "context.major_compaction_min_drop_tokens": Range(0, MAX_TOKENS),
    "context.major_compaction_min_drop_ratio": Range(0, 1),
    "arrival.rate": Range(MIN_RATE, 1e6),
    "arrival.max_concurrency": Range(1, MAX_COUNT),
    "arrival.max_streams": Range(1, MAX_COUNT),
    "arrival.session_budget_s": Range(0, MAX_SECONDS, open_lo=True),
    "arrival.duration_s": Range(0, MAX_SECONDS, open_lo=True),
    "arrival.fuse_s": Range(0, MAX_SECONDS, open_lo=True),
    "arrival.warmup": Range(0, MAX_COUNT),
    "arrival.tool_wait_scale": Range(0, 1e6),
    "arrival.request_timeout_s": Range(0, MAX_SECONDS, open_lo=True),
    "arrival.stream_idle_timeout_s": Range(0, MAX_SECONDS, open_lo=True),
    "backend.scrape_interval_s": Range(0, 3600.0),
    "backend.options.temperature": Range(0, 100.0),
    "backend.options.initial_overhead_tokens": Range(0, MAX_TOKENS),
    "backend.options.turn_overhead_tokens": Range(0, MAX_TOKENS),
    "backend.options.max_sessions": Range(1, 10**8),
    "executor.workers": Range(1, 1024),
    "executor.record_flush_ms": Range(0, 60_000.0),
    "executor.pace_ms": Range(0, 1000.0),
    "seed": Range(0, 2**32 - 1),
    "slo": POSITIVE,  # every bound, in ms
    # the embedded engine (target.engine knobs: EngineConfig and Faults fields)
    "target.engine.block_size": Range(1, 4096),
    "target.engine.num_blocks": Range(1, 2**26),
    "target.engine.max_num_batched_tokens": Range(1, MAX_TOKENS),
    "target.engine.max_num_seqs": Range(1, MAX_COUNT),
    "target.engine.max_model_len": Range(1, MAX_TOKENS),
    "target.engine.speedup": Range(0, 1e9, open_lo=True),
    "target.engine.decode_floor_ms": Range(0, 1e6),
    "target.engine.request_overhead_ms": Range(0, 1e6),
    "target.engine.intake_ms": Range(0, 1e6),
    "target.engine.idle_wake_ms": Range(0, 1e6),
    "target.engine.decode_seq_ms": Range(0, 1e6),
    "target.engine.seed": Range(0, 2**32 - 1),
    "target.engine.error_rate": Range(0, 1),
    "target.engine.disconnect_after_tokens": Range(0, MAX_TOKENS),
    "target.engine.stall_after_tokens": Range(0, MAX_TOKENS),
    "target.engine.stall_s": Range(0, MAX_SECONDS),
    "target.engine.sglang_prompt_echo": Range(0, MAX_TOKENS),
    "target.engine.error_status": Range(200, 599),
}


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def _describe(alt: Any, rng: Range | None) -> str:
    if alt is type(None):
        return "null"
    if alt is bool:
        return "true or false"
    if alt is str:
        return "a string"
    if alt in (int, float):
        noun = "integer" if alt is int else "finite number"
        if rng is None:
            return f"an {noun}" if alt is int else f"a {noun}"
        if rng.hi is None and rng.lo == 0:
            return f"a positive {noun}" if rng.open_lo else f"a non-negative {noun}"
        if rng.hi is None and rng.lo == 1 and alt is int:
            return "a positive integer"
        lo = "(" if rng.open_lo else "["
        article = "an" if alt is int else "a"
        return f"{article} {noun} in {lo}{_fmt(rng.lo or 0)}, {_fmt(rng.hi or math.inf)}]"
    origin = typing.get_origin(alt)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(alt))
    if origin is dict or alt is dict:
        args = typing.get_args(alt)
        if len(args) == 2 and args[1] is not Any:
            return f"a mapping of names to {_describe(args[1], rng).removeprefix('a ')}s"
        return "a mapping"
    if origin is tuple:
        args = typing.get_args(alt)
        return f"a list of {len(args)} {_describe(args[0], None).removeprefix('a ')}s"
    if origin is list:
        return f"a list of {_describe(typing.get_args(alt)[0], None).removeprefix('a ')}s"
    return getattr(alt, "__name__", str(alt))


def _alternatives(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _matches(value: Any, alt: Any, rng: Range | None) -> bool:
    """``value`` is of type ``alt`` and, for numbers, inside ``rng``."""
    if alt is Any:
        return True
    if alt is type(None):
        return value is None
    if alt is bool:
        return type(value) is bool
    if alt is str:
        return isinstance(value, str)
    if alt is int:
        return (
            isinstance(value, int) and not isinstance(value, bool)
            and (rng is None or rng.holds(value))
        )  # fmt: skip
    if alt is float:
        return (
            isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and (rng is None or rng.holds(value))
        )  # fmt: skip
    origin = typing.get_origin(alt)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in typing.get_args(alt))
    if origin is dict or alt is dict:
        if not isinstance(value, Mapping):
            return False
        args = typing.get_args(alt) or (Any, Any)
        return all(
            _matches(k, args[0], None) and _matches(v, args[1], rng) for k, v in value.items()
        )
    if origin is tuple:
        args = typing.get_args(alt)
        return (
            isinstance(value, list | tuple) and len(value) == len(args)
            and all(_matches(v, a, rng) for v, a in zip(value, args, strict=True))
        )  # fmt: skip
    if origin is list:
        return isinstance(value, list | tuple) and all(
            _matches(v, typing.get_args(alt)[0], rng) for v in value
        )
    if isinstance(alt, type):
        try:
            return isinstance(value, alt)
        except TypeError:  # a Protocol that is not runtime-checkable: the consumer checks it
            return True
    return True  # a type this checker does not know (a Protocol): the consumer checks it


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_value(path: str, value: Any, tp: Any, rng: Range | None = None) -> None:
    """Raise ``ConfigError`` unless ``value`` fits the annotation ``tp`` (and ``rng``)."""
    rng = rng if rng is not None else RANGES.get(path)
    alts = _alternatives(tp)
    if any(_matches(value, alt, rng) for alt in alts):
        return
    expected = " or ".join(_describe(alt, rng) for alt in alts)
    raise ConfigError(f"{path}: expected {expected}, got {_show(value)} ({type(value).__name__})")


def hints_of(cls: type) -> dict[str, Any]:
    """The resolved annotations of a dataclass (or of a class's ``__init__``)."""
    target = cls if dataclasses.is_dataclass(cls) else cls.__init__  # type: ignore[misc]
    return typing.get_type_hints(target)


def check_dataclass(obj: Any, path: str = "") -> None:
    """Type- and range-check every field of the dataclass instance ``obj``."""
    hints = hints_of(type(obj))
    for f in dataclasses.fields(obj):
        check_value(f"{path}.{f.name}" if path else f.name, getattr(obj, f.name), hints[f.name])


def check_mapping(path: str, values: Mapping[str, Any], hints: Mapping[str, Any]) -> None:
    """Check the known names of ``values`` against ``hints`` (unknown names: the caller's)."""
    for name, value in values.items():
        if name in hints:
            check_value(f"{path}.{name}", value, hints[name])


# ------------------------------------------------------------------ values with a grammar
def check_url(path: str, url: str, hint: str | None = None) -> None:
    """``sim`` or ``http(s)://HOST[:PORT][/PATH]`` with a port in 1..65535.

    ``HOST:PORT`` without a scheme is read as ``http://HOST:PORT``, as the transport
    does (``normalize_base_url``). ``hint``: what the message suggests instead.
    """
    from workbench.redact import strip_url_credentials

    if url == "sim":
        return
    if "://" not in url:
        url = f"http://{url.strip()}"
    shown = strip_url_credentials(url)
    hint = hint or "use 'sim' (the embedded engine) or a server root such as http://127.0.0.1:8000"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{path}: {shown!r} is not a valid URL ({exc}); {hint}") from None
    if parts.scheme not in ("http", "https"):
        scheme = parts.scheme or "(none)"
        raise ConfigError(f"{path}: scheme {scheme!r} of {shown!r} is not http or https; {hint}")
    if not parts.hostname:
        raise ConfigError(f"{path}: {shown!r} has no host; {hint}")
    if parts.netloc.endswith(":") or port == 0:
        raise ConfigError(f"{path}: {shown!r} has an empty or zero port; {hint}")
    if parts.fragment:
        raise ConfigError(f"{path}: {shown!r} has a #fragment; {hint}")


METRICS_ENDPOINTS_MAX = 16
"""Further ``/metrics`` pages a run scrapes at each tick (each one a request per tick)."""
SERIES_PATTERN = re.compile(r"[A-Za-z_:*?\[\]!-][A-Za-z0-9_:*?\[\]!-]{0,199}")
"""A series glob: Prometheus name characters and ``* ? [ ] ! -``, at most 200."""


def check_metrics_scrape(path: str, urls: Sequence[str], patterns: Sequence[str]) -> None:
    """``metrics_urls``: http(s) pages, as the target's URL (``check_url``), at most
    ``METRICS_ENDPOINTS_MAX``; ``metrics_series``: globs of Prometheus names."""
    if len(urls) > METRICS_ENDPOINTS_MAX:
        raise ConfigError(f"{path}.metrics_urls: {len(urls)} endpoints, at most "
                          f"{METRICS_ENDPOINTS_MAX} are scraped at each tick")
    for i, url in enumerate(urls):
        where = f"{path}.metrics_urls[{i}]"
        hint = "give a Prometheus page's URL, e.g. http://127.0.0.1:9400/metrics"
        if url.strip() == "sim":
            raise ConfigError(f"{where}: 'sim' is a target, not a metrics page; {hint}")
        check_url(where, url, hint)
    for i, pattern in enumerate(patterns):
        if not SERIES_PATTERN.fullmatch(pattern):
            raise ConfigError(
                f"{path}.metrics_series[{i}]: {_show(pattern)} is not a series glob: 1-200 "
                "characters of a Prometheus name (letters, digits, '_', ':') and '*', '?', "
                "'[...]', e.g. 'DCGM_FI_DEV_*'"
            )


def check_run_id(path: str, run_id: str) -> None:
    """A run id names one directory: no path separators, no ``..``, no control characters."""
    bad = (
        not run_id or run_id in (".", "..") or ".." in run_id or "/" in run_id
        or "\\" in run_id or os.sep in run_id or any(ord(c) < 32 for c in run_id)
        or len(run_id) > 200
    )  # fmt: skip
    if bad:
        raise ConfigError(
            f"{path}: {_show(run_id)} cannot name a run directory: a run id is 1-200 characters "
            "without '/', '\\', '..' or control characters"
        )


def check_out_dir(path: str, out_dir: str) -> None:
    """``out_dir`` is (or can become) a writable directory."""
    p = Path(out_dir)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{path}: {out_dir!r} exists and is not a directory")
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"{path}: {out_dir!r} cannot be created: {str(probe)!r} is a file")
    if probe.exists():
        why = _not_writable(probe)
        if why:
            raise ConfigError(f"{path}: {str(probe)!r} is not writable ({why}), so "
                              f"{out_dir!r} cannot be used")


def _not_writable(directory: Path) -> str | None:
    """Why files cannot be created in ``directory`` (None: they can). A real probe: a
    temporary file made and removed, since ``os.access`` says yes to root even on a
    read-only mount or a directory root may not write (docs/config-bounds.md)."""
    import tempfile

    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "a read-only file system"
    except OSError:
        pass
    try:
        fd, tmp = tempfile.mkstemp(prefix=".workbench-probe-", dir=directory)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    os.close(fd)
    os.unlink(tmp)
    return None


# ------------------------------------------------------------------ size, depth, headers
def check_depth(path: str, value: Any, max_depth: int = MAX_DEPTH) -> None:
    """``value`` nests at most ``max_depth`` mappings/lists and holds at most ``MAX_NODES``
    values (checked without recursion, so a 3,000-deep value is one clear error)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ConfigError(f"{path}: more than {MAX_NODES:,} values; not a configuration")
        if isinstance(node, Mapping | list | tuple):
            if depth >= max_depth:
                raise ConfigError(f"{path}: nested deeper than {max_depth} levels")
            children = node.values() if isinstance(node, Mapping) else node
            stack.extend((child, depth + 1) for child in children)


def parse_json(path: str, text: str) -> Any:
    """``json.loads`` bounded like every config value: depth and size (``check_depth``)."""
    import json

    try:
        value = json.loads(text)
    except RecursionError:
        raise ConfigError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    check_depth(path, value)
    return value


def json_or_text(path: str, text: str) -> Any:
    """A command-line value: JSON when it parses (bounded: ``parse_json``), else the text."""
    try:
        return parse_json(path, text)
    except ValueError:
        return text


def load_yaml(path: str, text: str) -> Any:
    """``yaml.safe_load`` bounded before anything is built: nesting past ``MAX_DEPTH`` and a
    document past ``MAX_NODES`` nodes with its aliases expanded (a billion-laughs bomb) are
    one ``ConfigError`` each, found while composing, in bounded time and memory."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(f"{path}:{mark.line + 1}: nested deeper than {MAX_DEPTH} "
                                  "levels; not a configuration")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded(path, node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _check_expanded(path: str, root: Any) -> None:
    """The node count of a composed YAML graph with every alias expanded, computed once per
    shared node (memoized), so a bomb is measured without being expanded."""
    import yaml

    size: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:  # post-order without recursion (depth is bounded already)
        node, done = stack.pop()
        if id(node) in size:
            continue
        if isinstance(node, yaml.ScalarNode):
            size[id(node)] = 1
            continue
        children = [c for pair in node.value for c in pair] \
            if isinstance(node, yaml.MappingNode) else list(node.value)
        if done:
            total = 1 + sum(size[id(c)] for c in children)
            if total > MAX_NODES:
                mark = node.start_mark
                raise ConfigError(
                    f"{path}:{mark.line + 1}: the document expands to more than "
                    f"{MAX_NODES:,} values (YAML aliases *x repeat what they point to); "
                    "not a configuration"
                )
            size[id(node)] = total
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)


def check_header(path: str, name: Any, value: Any) -> None:
    """A request header: an RFC 9110 token as name; one line of text (no control
    characters but tab) as value, of a string or number."""
    if not isinstance(name, str) or not name or any(c not in _TCHAR for c in name):
        raise ConfigError(
            f"{path}: header name {_show(name)} is not an HTTP token (RFC 9110: letters, "
            "digits and !#$%&'*+-.^_`|~; no ':', space or control characters)"
        )
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{path}[{name!r}]: expected one line of text, got {_show(value)}")
    text = str(value)
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
        raise ConfigError(f"{path}[{name!r}]: a header value cannot hold CR, LF or other "
                          "control characters")
