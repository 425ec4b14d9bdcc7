"""QA: a field-level mutation generator over the 8 formats (independent of tests/corruption.py).

Not byte flips: each case rewrites one field of a real sample with a hostile value
(``-0``, ``+5``, ``0x10``, `` 5 ``, ``Infinity``, ``1_28``, full-width digits, nested
arrays where ints belong, 2**64, 1e308, bools, nulls, empty strings), deletes a field,
adds a duplicate JSON key or swaps two lines; and every sample also goes through
whole-file variants (CRLF, CR, BOM, UTF-16, NUL bytes, empty, whitespace only,
header only, cut inside a UTF-8 sequence, gzip, a 3 MiB line, tabs, duplicated,
reversed, mixed with every other format). The rule: a ``Workload`` inside the
documented bounds whose statistics and plan build, or one ``TraceFormatError`` with
the path, a line and a rule (a ``ConfigError`` for a reader option). Seeded.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from workbench.errors import ConfigError, TraceFormatError
from workbench.traces.bounds import MAX_ARRIVAL_MS, MAX_ROUND_TOKENS, MAX_WAIT_MS
from workbench.traces.load import load_trace

R = Path(__file__).resolve().parents[2]
SAMPLES = {
    "session": R / "workbench/data/tracelab/multi_session_example.csv",
    "session-rounds": R / "workbench/data/request-factory/session_rounds_v2_example.csv",
    "independent": R / "tests/fixtures/independent_requests.csv",
    "azure": R / "tests/fixtures/serving-traces/azure_2024_notebook.csv",
    "burstgpt": R / "tests/fixtures/serving-traces/burstgpt_constructed.csv",
    "mooncake": R / "tests/fixtures/mooncake_sessions.jsonl",
    "tracelab": R / "workbench/data/tracelab/round_trace.sanitized.jsonl",
    "trajectory": R / "workbench/data/batchbench/trajectories_v1.jsonl",
    "abench": R / "tests/fixtures/abench_sessions.jsonl",
    "dynamo": R / "tests/fixtures/dynamo_trace.jsonl",
}
MUTATIONS = 40


@pytest.fixture(scope="module")
def canonical_sample(tmp_path_factory):
    from workbench.workloads.materialize import tracegen

    out = tmp_path_factory.mktemp("canon") / "canonical.csv"
    tracegen(R / "workbench/data/tracelab/session_workload_example.csv", out)
    return out


WEIRD_TEXT = ["-0", "+5", "0x10", " 5 ", "Infinity", "-Infinity", "NaN", "1e309", "1_28",
              "１２", "5.", ".5", "5.0", "5e0", "1e7", "10000001", "-1", "", " ", "\t7\t",
              "٣", "5\u00a0", "0b1", "1,000", "true", "null", "[1]", "1e-400", "9" * 400,
              "0.0000001", "4.9999999999999999", "0005", "+0", "--5", "5-", "e5", "1e", "inf"]
WEIRD_JSON = [-0.0, 0, -1, 5.5, 1e308, 1e30, 10**19, 10**30, 2**63, -(2**63), 2**64,
              True, False, None, "5", "-0", "+5", "0x10", " 5 ", "Infinity", "NaN", "1_28", "１２",
              [5], [[5]], {"a": 5}, [], {}, "", 1e-300, 10000001, 604800001, 4.5, 1e15,
              float(2**53), 31622400001, -1e-9, "1e400"]


def check_loaded(path, w, fmt):
    from workbench.config import RunConfig
    from workbench.replay.plan import build_plan
    from workbench.workloads.trace_stats import trace_stats
    for u in w.units:
        assert 0 <= u.arrival_ms <= MAX_ARRIVAL_MS, ("arrival", u.arrival_ms)
        for r in u.rounds:
            assert r.prompt_len + r.output_len <= MAX_ROUND_TOKENS
            assert 0 <= r.tool_wait_after_ms <= MAX_WAIT_MS
            assert r.output_len >= 1
    trace_stats(w)
    cfg = RunConfig.from_dict({"trace": str(path), "target": "sim"})
    try:
        cfg.check_workload(w)
    except ConfigError:
        return
    build_plan(cfg, w)


def json_paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*prefix, k)
            yield from json_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield (*prefix, i)
            yield from json_paths(v, (*prefix, i))


def set_path(obj, path, value):
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value


def del_path(obj, path):
    for p in path[:-1]:
        obj = obj[p]
    if isinstance(obj, dict):
        del obj[path[-1]]
    else:
        obj.pop(path[-1])


def mutate_jsonl(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = [ln for ln in data.decode().split("\n") if ln.strip()]
    k = rng.randrange(len(lines))
    obj = json.loads(lines[k])
    paths = list(json_paths(obj))
    p = rng.choice(paths)
    op = rng.random()
    if op < 0.6:
        v = rng.choice(WEIRD_JSON)
        set_path(obj, p, v)
        desc = f"line{k+1} {p}={v!r}"
    elif op < 0.75:
        del_path(obj, p)
        desc = f"line{k+1} del {p}"
    elif op < 0.85:
        # duplicate key: write raw with a dup key at top level
        key = rng.choice(list(obj))
        s = json.dumps(obj)
        s = s[:-1] + f', "{key}": {json.dumps(rng.choice(WEIRD_JSON))}' + "}"
        lines[k] = s
        return "\n".join(lines).encode() + b"\n", f"line{k+1} dupkey {key}"
    else:
        # move line elsewhere / swap lines
        j = rng.randrange(len(lines))
        lines[k], lines[j] = lines[j], lines[k]
        return "\n".join(lines).encode() + b"\n", f"swap {k} {j}"
    try:
        lines[k] = json.dumps(obj, allow_nan=True)
    except (ValueError, OverflowError):
        lines[k] = repr(obj)
    return "\n".join(lines).encode() + b"\n", desc


def mutate_csv(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = data.decode().split("\n")
    lines = [ln for ln in lines if ln]
    k = rng.randrange(1, len(lines))
    cells = lines[k].split(",")
    c = rng.randrange(len(cells))
    op = rng.random()
    if op < 0.7:
        cells[c] = rng.choice(WEIRD_TEXT)
        if "," in cells[c]:
            cells[c] = '"' + cells[c] + '"'
        desc = f"line{k+1} col{c}={cells[c]!r}"
    elif op < 0.8:
        cells[c] = rng.choice(["10000000", "604800001", "31622400001", "9999999", "0"])
        desc = f"line{k+1} col{c}={cells[c]!r}"
    else:
        j = rng.randrange(1, len(lines))
        lines[k], lines[j] = lines[j], lines[k]
        return ("\n".join(lines) + "\n").encode(), f"swap {k} {j}"
    lines[k] = ",".join(cells)
    return ("\n".join(lines) + "\n").encode(), desc


def whole_file_variants(data: bytes):
    yield "crlf", data.replace(b"\n", b"\r\n")
    yield "cr", data.replace(b"\n", b"\r")
    yield "bom", b"\xef\xbb\xbf" + data
    yield "bom-crlf", b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n")
    yield "utf16", data.decode().encode("utf-16")
    yield "nul-mid", data[: len(data) // 2] + b"\x00" + data[len(data) // 2:]
    yield "nul-end", data + b"\x00"
    yield "empty", b""
    yield "ws", b"  \n\t\n \r\n"
    yield "header-only", data.split(b"\n")[0] + b"\n"
    yield "first-line", data.split(b"\n")[0]
    yield "no-trailing-nl", data.rstrip(b"\n")
    yield "double-nl", data.replace(b"\n", b"\n\n")
    for cut in (1, 2, 3):
        # truncate mid UTF-8: insert multibyte char and cut inside it
        s = data + "é中😀".encode()
        yield f"trunc-utf8-{cut}", s[:-cut]
    yield "gz", __import__("gzip").compress(data)
    yield "huge-line", data + b"x" * (3 << 20) + b"\n"
    yield "leading-ws", b"   " + data
    yield "tabs", data.replace(b",", b"\t")
    yield "semicolon", data.replace(b",", b";")
    yield "dup-all", data + data
    yield "reversed", b"\n".join(reversed(data.rstrip(b"\n").split(b"\n"))) + b"\n"
    yield "latin1", data + "é\n".encode("latin-1")
    yield "u2028", data.replace(b"\n", "\u2028".encode(), 1)




def _attempt(tmp_path: Path, data: bytes, suffix: str, label: str) -> None:
    path = tmp_path / f"t{suffix}"
    path.write_bytes(data)
    try:
        w = load_trace(path)
    except TraceFormatError as exc:
        assert exc.line >= 0 and exc.rule and str(path) in str(exc), (label, str(exc))
        return
    except ConfigError:
        return
    check_loaded(path, w, None)


def _cases(path: Path, seed: int):
    data = path.read_bytes()
    yield from whole_file_variants(data)
    for other in SAMPLES.values():
        if other != path:
            yield f"+{other.name}", data + other.read_bytes()
    rng = random.Random(seed)
    for _ in range(MUTATIONS):
        mutated, desc = (mutate_csv if path.suffix == ".csv" else mutate_jsonl)(data, rng)
        yield desc, mutated


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_field_mutations_load_in_bounds_or_raise_one_format_error(tmp_path, name):
    path = SAMPLES[name]
    for label, data in _cases(path, seed=sum(map(ord, name))):
        _attempt(tmp_path, data, path.suffix, f"{name}: {label}")


def test_field_mutations_of_a_canonical_file(tmp_path, canonical_sample):
    for label, data in _cases(canonical_sample, seed=2):
        _attempt(tmp_path, data, ".csv", f"canonical: {label}")
