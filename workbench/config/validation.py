"""Checks of configuration values that a type cannot say (types and ranges are
``workbench.ranges``'s): URLs, run ids, output directories, metrics pages, headers, and
the bounded JSON and YAML readers behind ``read_config_file``. The bounds and their
reasons: docs/config-bounds.md.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from workbench.errors import ConfigError, TraceFormatError
from workbench.ranges import MAX_DEPTH, MAX_NODES, show
from workbench.redact import strip_url_credentials
from workbench.traces._io import open_trace

CONFIG_MAX_BYTES = 16 << 20  # a configuration file (docs/config-bounds.md)

#: request headers the client writes itself, which frame the message or route it
#: (RFC 9110/9112): one given again is refused by name (docs/config-bounds.md)
FRAMING_HEADERS = frozenset((
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
    "te", "trailer", "proxy-connection", "expect", "content-encoding", "content-type",
    "x-request-id",
))
#: RFC 9110 ``token``: the characters an HTTP header (field) name may hold
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def check_url(path: str, url: str, hint: str | None = None) -> None:
    """``sim`` or ``http(s)://HOST[:PORT][/PATH]`` with a port in 1..65535 (``HOST:PORT``
    reads as ``http://HOST:PORT``); ``hint``: what the message suggests instead."""
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
        raise ConfigError(f"{path}: {shown!r} is not a valid URL ({exc}); {hint}",
                          field=path) from None
    if parts.scheme not in ("http", "https"):
        scheme = parts.scheme or "(none)"
        raise ConfigError(f"{path}: scheme {scheme!r} of {shown!r} is not http or https; {hint}",
                          field=path)
    if not parts.hostname:
        raise ConfigError(f"{path}: {shown!r} has no host; {hint}", field=path)
    if parts.netloc.endswith(":") or port == 0:
        raise ConfigError(f"{path}: {shown!r} has an empty or zero port; {hint}", field=path)
    if parts.fragment:
        raise ConfigError(f"{path}: {shown!r} has a #fragment; {hint}", field=path)


METRICS_ENDPOINTS_MAX = 16  # further ``/metrics`` pages, each one a request per tick
#: a series glob: Prometheus name characters and ``* ? [ ] ! -``, at most 200
SERIES_PATTERN = re.compile(r"[A-Za-z_:*?\[\]!-][A-Za-z0-9_:*?\[\]!-]{0,199}")


def check_metrics_scrape(path: str, urls: Sequence[str], patterns: Sequence[str]) -> None:
    """``metrics_urls`` (http(s) pages) and ``metrics_series`` (Prometheus name globs)."""
    if len(urls) > METRICS_ENDPOINTS_MAX:
        raise ConfigError(f"{path}.metrics_urls: {len(urls)} endpoints, at most "
                          f"{METRICS_ENDPOINTS_MAX} are scraped at each tick",
                          field=f"{path}.metrics_urls")
    for i, url in enumerate(urls):
        where = f"{path}.metrics_urls[{i}]"
        hint = "give a Prometheus page's URL, e.g. http://127.0.0.1:9400/metrics"
        if url.strip() == "sim":
            raise ConfigError(f"{where}: 'sim' is a target, not a metrics page; {hint}",
                              field=where)
        check_url(where, url, hint)
    for i, pattern in enumerate(patterns):
        if not SERIES_PATTERN.fullmatch(pattern):
            raise ConfigError(
                f"{path}.metrics_series[{i}]: {show(pattern)} is not a series glob: 1-200 "
                "characters of a Prometheus name (letters, digits, '_', ':') and '*', '?', "
                "'[...]', e.g. 'DCGM_FI_DEV_*'", field=f"{path}.metrics_series[{i}]")


def check_run_id(path: str, run_id: str) -> None:
    """A run id names one directory: no path separators, no ``..``, no control characters."""
    bad = (
        not run_id or run_id in (".", "..") or ".." in run_id or "/" in run_id
        or "\\" in run_id or os.sep in run_id or any(ord(c) < 32 for c in run_id)
        or len(run_id) > 200
    )  # fmt: skip
    if bad:
        raise ConfigError(
            f"{path}: {show(run_id)} cannot name a run directory: a run id is 1-200 characters "
            "without '/', '\\', '..' or control characters", field=path)


def check_out_dir(path: str, out_dir: str) -> None:
    """``out_dir`` is (or can become) a writable directory."""
    p = Path(out_dir)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{path}: {out_dir!r} exists and is not a directory", field=path)
    probe = p
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"{path}: {out_dir!r} cannot be created: {str(probe)!r} is a file",
                          field=path)
    if probe.exists():
        why = _not_writable(probe)
        if why:
            raise ConfigError(f"{path}: {str(probe)!r} is not writable ({why}), so "
                              f"{out_dir!r} cannot be used", field=path)


def _not_writable(directory: Path) -> str | None:
    """Why files cannot be created in ``directory`` (None: they can), by a real probe
    (``os.access`` says yes to root on a read-only mount: docs/config-bounds.md)."""
    import tempfile  # here, not at every CLI start (bench/README.md, "CLI start-up")

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


def check_depth(path: str, value: Any, max_depth: int = MAX_DEPTH) -> None:
    """At most ``max_depth`` levels and ``MAX_NODES`` values, checked without recursion."""
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
    try:
        value = json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(path, text, pairs))
    except RecursionError:
        raise ConfigError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    check_depth(path, value)
    return value


def _unique_keys(path: str, text: str, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different; ``json`` keeps the last of two equal
    keys silently (docs/config-bounds.md, "Size and depth")."""
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    seen: set[str] = set()
    key = ""
    for key, _ in pairs:
        if key in seen:
            break
        seen.add(key)
    # the decoder does not say where an object is: the line when the key is written twice
    # in the whole text, as here (a key common to several objects: the file alone)
    spots = [m.start() for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)]
    where = f"{path}:{text.count(chr(10), 0, spots[1]) + 1}" if len(spots) == 2 else path
    raise ConfigError(f"{where}: key {key!r} is given twice in one object; JSON would keep "
                      "the last silently: say it once")


def json_or_text(path: str, text: str) -> Any:
    """A command-line value: JSON when it parses (bounded: ``parse_json``), else the text."""
    try:
        return parse_json(path, text)
    except ValueError:
        return text


def read_config_file(path: str | Path, what: str = "config", *,
                     always_yaml: bool = False) -> tuple[Any, str]:
    """A configuration file's data and text, read under the bounds of docs/config-bounds.md
    ("Size and depth"): YAML (``.yaml``/``.yml`` or ``always_yaml``) or JSON; ``what`` names
    the file's role in the one-line ``ConfigError`` messages."""
    p = Path(path)
    try:
        raw = open_trace(p, CONFIG_MAX_BYTES + 1, inflate=False)
    except TraceFormatError as exc:
        raise ConfigError(f"{p}: cannot read {what}: {exc.rule}") from None
    if len(raw) > CONFIG_MAX_BYTES:
        raise ConfigError(f"{p}: {what} file larger than the bound of {CONFIG_MAX_BYTES:,} "
                          "bytes (docs/config-bounds.md)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{p}:{line}: {what} file is not UTF-8 text (YAML or JSON): byte "
                          f"{raw[exc.start]:#04x} at offset {exc.start}") from None
    if always_yaml or p.suffix in (".yaml", ".yml"):
        return load_yaml(str(p), text), text
    try:
        return parse_json(str(p), text), text
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}:{exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})"
                          ) from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion bound
        raise ConfigError(f"{p}: invalid JSON: {exc}") from None


def load_yaml(path: str, text: str) -> Any:
    """``yaml.safe_load`` bounded while composing: nesting past ``MAX_DEPTH`` and more than
    ``MAX_NODES`` nodes with aliases expanded are one ``ConfigError`` each."""
    import yaml  # here, not at every CLI start (bench/README.md, "CLI start-up")

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

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            _unique_yaml_keys(path, self, node)
            return super().construct_mapping(node, deep)

    loader = None
    try:
        loader = BoundedLoader(text)  # refuses a NUL or other non-printable character
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded(path, node)
        _yaml_1_2_readings(path, loader, node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error(path, text, exc)) from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion bound
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _unique_yaml_keys(path: str, loader: Any, node: Any) -> None:
    """A mapping whose keys are all different; PyYAML keeps the last of two equal keys
    silently. A merge (``<<: *base``) is not a key: what follows it overrides the base."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return  # PyYAML's own error
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            line = first.get(key)
        except TypeError:  # an unhashable key: PyYAML's own error
            continue
        if line is not None:
            raise ConfigError(
                f"{path}:{key_node.start_mark.line + 1}: key {key!r} is given twice in one "
                f"mapping (first on line {line}); YAML would keep the last silently: say it once"
            )
        first[key] = key_node.start_mark.line + 1


def _yaml_error(path: str, text: str, exc: Any) -> str:
    """One line: ``path:line: invalid YAML: rule (column c)`` (PyYAML's spans several)."""
    import yaml

    if isinstance(exc, yaml.reader.ReaderError):  # a character no YAML text may hold
        line = text.count("\n", 0, exc.position) + 1
        char = exc.character
        shown = f"#x{char:04x}" if isinstance(char, int) else repr(char)
        return f"{path}:{line}: invalid YAML: character {shown}: {exc.reason}"
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    rule = ": ".join(str(part) for part in (getattr(exc, "context", None),
                                           getattr(exc, "problem", None)) if part)
    rule = rule or type(exc).__name__
    if mark is None:
        return f"{path}: invalid YAML: {rule}"
    return f"{path}:{mark.line + 1}: invalid YAML: {rule} (column {mark.column + 1})"


#: YAML 1.2's core schema for plain scalars (bool, int, float); null is read alike
_BOOL_1_2 = {"true": True, "True": True, "TRUE": True,
             "false": False, "False": False, "FALSE": False}
_INT_1_2 = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT_1_2 = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
                        r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")
_TAG = "tag:yaml.org,2002:"


def _read_1_2(text: str) -> Any:
    """A plain scalar as YAML 1.2's core schema (and, for numbers, JSON) reads it."""
    if text in _BOOL_1_2:
        return _BOOL_1_2[text]
    if _INT_1_2.fullmatch(text):
        return int(text, 0) if text[:2] in ("0o", "0x") else int(text)
    if _FLOAT_1_2.fullmatch(text):  # Python spells .inf and .nan without the dot
        return float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))
    return text


def _yaml_1_2_readings(path: str, loader: Any, root: Any) -> None:
    """Plain scalars that YAML 1.1 (PyYAML) and YAML 1.2 (and JSON) read differently:
    ``yes``/``on`` (true), ``010`` (8), ``1:30`` (90), ``1_000``, ``0b1``, dates are
    refused naming the file, line and field; numbers PyYAML leaves as text (``1e3``,
    ``0o17``) are read as YAML 1.2 and JSON read them (docs/config-bounds.md,
    "YAML 1.1 and 1.2")."""
    import math

    import yaml

    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, field = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                stack.append((value, f"{field}.{name}" if field else str(name)))
                stack.append((key, f"{field} (a key)" if field else "a key"))
            continue
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{field}[{i}]") for i, item in enumerate(node.value))
            continue
        if node.style is not None or not node.tag.startswith(_TAG):
            continue  # quoted or block text, or an explicit tag: read as written
        kind, text = node.tag[len(_TAG):], node.value
        read = _read_1_2(text)
        where = f"{path}:{node.start_mark.line + 1}: {field}: "
        if kind == "str":
            if isinstance(read, int | float) and not isinstance(read, bool):
                node.tag, node.value = _TAG + type(read).__name__, repr(read)
            continue
        if kind == "bool":
            if text not in _BOOL_1_2:
                raise ConfigError(
                    f"{where}{text} is {str(loader.construct_yaml_bool(node)).lower()} in "
                    f"YAML 1.1 but the text {text!r} in YAML 1.2 and JSON: write true or "
                    "false, or quote it for the text")
        elif kind in ("int", "float"):
            old = getattr(loader, f"construct_yaml_{kind}")(node)
            same = type(read) is type(old) and (
                read == old or (isinstance(old, float) and math.isnan(old) and read != read))
            if not same:
                now = f"the text {read!r}" if isinstance(read, str) else repr(read)
                raise ConfigError(
                    f"{where}{text} is {old!r} in YAML 1.1 but {now} in YAML 1.2 and JSON: "
                    "write the number in decimal, or quote it for the text")
        elif kind == "timestamp":
            raise ConfigError(f"{where}{text} is a date in YAML 1.1 but the text {text!r} in "
                              "YAML 1.2 and JSON: quote it")


def field_lines(text: str) -> dict[str, int]:
    """Each field's line (``"arrival.rate": 4``) in a config's text, YAML or JSON (JSON is
    YAML here, for its marks); empty when the text does not compose so. For naming the
    line of a field a later check refuses (``in_file``)."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, field = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    name = f"{field}.{key.value}" if field else str(key.value)
                    lines.setdefault(name, key.start_mark.line + 1)
                    stack.append((value, name))
    return lines


_UNKNOWN = re.compile(r"unknown (?:config )?(?:(\w+) )?(?:keys?|options?|knobs?) \['([^']+)'")


def message_field(message: str) -> str:
    """The field a check's message names when its error carries none: the field it starts
    with (``arrival.rate: ...``) or the unknown key it names."""
    unknown = _UNKNOWN.match(message)
    if unknown:
        section, key = unknown.groups()
        return f"{section}.{key}" if section else key
    return re.match(r"[\w.-]*", message).group()  # type: ignore[union-attr]


def in_file(path: str | Path, text: str, message: str,
            rename: Mapping[str, str] | None = None, field: str | None = None) -> str:
    """``message`` of a check of a config file's data, with the file and that field's line:
    ``field``, the refused value's (``ConfigError.field``), or else the field the message
    starts with (``arrival.rate: ...``) or the unknown key it names (an engine's own
    ``ValueError``, which carries no field); ``rename``: a field's prefix and where that
    lives in the file (the first that matches; ``{"target.engine.": ""}`` for an engine
    file of bare knobs)."""
    lines = field_lines(text)
    if field is None:
        field = message_field(message)
    for was, now in (rename or {}).items():
        if field.startswith(was):
            field = now + field[len(was):]
            break
    line = lines.get(field) or lines.get(field.split(".", 1)[0])
    return f"{path}:{line}: {message}" if line else f"{path}: {message}"


def _check_expanded(path: str, root: Any) -> None:
    """The node count of a composed YAML graph with every alias expanded, memoized per
    shared node so a bomb is measured without being expanded."""
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
    """A request header: an RFC 9110 token as name, one line of text as value."""
    if not isinstance(name, str) or not name or any(c not in _TCHAR for c in name):
        raise ConfigError(
            f"{path}: header name {show(name)} is not an HTTP token (RFC 9110: letters, "
            "digits and !#$%&'*+-.^_`|~; no ':', space or control characters)"
        )
    if name.lower() in FRAMING_HEADERS:
        raise ConfigError(
            f"{path}: header {name!r} frames or routes the request itself (the client "
            "sets it; a second one is a request-smuggling shape): refused, as are "
            f"{', '.join(sorted(FRAMING_HEADERS))}"
        )
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{path}[{name!r}]: expected one line of text, got {show(value)}")
    text = str(value)
    _check_header_value(f"{path}[{name!r}]", text, shown=True)
    if text.startswith("$") and (env := os.environ.get(text[1:])) is not None:
        # read from the environment when the run starts: checked now, never shown
        _check_header_value(f"{path}[{name!r}] (from ${text[1:]})", env, shown=False)


def _check_header_value(where: str, text: str, *, shown: bool) -> None:
    """One line of visible ASCII, spaces and tabs (RFC 9110, 5.5: obs-text is obsolete)."""
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
        raise ConfigError(f"{where}: a header value cannot hold CR, LF or other "
                          "control characters")
    at = next((i for i, c in enumerate(text) if ord(c) > 126), None)
    if at is not None:
        got = f"{text[at]!r} at character {at + 1}" if shown else f"character {at + 1}"
        raise ConfigError(
            f"{where}: a header value is ASCII text in HTTP/1.1 (RFC 9110 field values; "
            f"bytes past ASCII are obsolete and each client encodes them differently), "
            f"got {got}"
        )
