"""Files that are not a readable trace: one clear error at every entry point, never a hang.

Missing, a directory, a symlink loop, a FIFO, a link to /dev/zero, an unreadable
file, one past the size bound: ``load_trace`` (and ``detect_format``,
``tracegen``) raise one ``TraceFormatError`` naming the path; the CLI
(``stats``, ``replay``, ``tracegen``) prints one line and exits 2 without a
traceback; ``report`` does the same for run directories (docs/trace-bounds.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from public_data import REPO

from workbench import load_trace, tracegen
from workbench.errors import TraceFormatError, WorkbenchError
from workbench.storage.rundir import RunDirError, load, resolve_run_dir
from workbench.traces import bounds
from workbench.traces._io import WINDOW_HINT
from workbench.traces.load import detect_format

ROOT = REPO
VALID = "id,arrival_time,input_len,output_len\na,0,5,1\n"
SESSION = "session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\ns,0,0,5,1,0\n"
# root reads a mode-000 file anyway: drop the two capabilities that let it
SETPRIV = shutil.which("setpriv")
AS_USER = (
    [SETPRIV, "--bounding-set=-dac_override,-dac_read_search"]
    if os.geteuid() == 0 and SETPRIV else []
)


def _make(kind: str, tmp: Path) -> tuple[Path, str]:
    """A path of the given kind and the words its error must contain."""
    p = tmp / kind
    if kind == "missing":
        return p, "no such file"
    if kind == "directory":
        p.mkdir()
        return p, "not a regular file: a directory"
    if kind == "symlink-loop":
        (tmp / "loop-b").symlink_to(p)
        p.symlink_to(tmp / "loop-b")
        return p, "symlink loop"
    if kind == "fifo":
        os.mkfifo(p)
        return p, "not a regular file: a FIFO"
    if kind == "dev-zero":
        p.symlink_to("/dev/zero")
        return p, "not a regular file: a character device"
    if kind == "unreadable":
        p.write_text(VALID)
        p.chmod(0)
        return p, "Permission denied"
    raise AssertionError(kind)


KINDS = ["missing", "directory", "symlink-loop", "fifo", "dev-zero"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", ["auto", "independent", "mooncake", "session-execution-v2"])
def test_load_trace_gives_one_trace_format_error(tmp_path, kind, fmt):
    path, words = _make(kind, tmp_path)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path, fmt=fmt)
    assert exc.value.path == str(path) and exc.value.line == 0
    assert words in exc.value.rule


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_detect_format_and_tracegen_give_the_same_error(tmp_path, kind):
    path, words = _make(kind, tmp_path)
    with pytest.raises(TraceFormatError, match=words):
        detect_format(path)
    with pytest.raises(TraceFormatError, match=words):
        tracegen(path, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()


def test_a_file_past_the_size_bound_is_refused_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "big.csv"
    path.write_text(VALID + "".join(f"b{i},0,5,1\n" for i in range(100)))
    monkeypatch.setattr(bounds, "MAX_TRACE_BYTES", 256)
    with pytest.raises(TraceFormatError, match="larger than the bound of 256 bytes"):
        load_trace(path)
    monkeypatch.setattr(bounds, "MAX_TRACE_BYTES", 1 << 20)
    assert len(load_trace(path).units) == 101


@pytest.mark.parametrize("fmt", ["independent", "mooncake"])
def test_a_file_past_the_line_bound_is_refused_before_its_rows_are_read(fmt, tmp_path,
                                                                        monkeypatch):  # fmt: skip
    if fmt == "independent":
        text = VALID + "".join(f"b{i},0,5,1\n" for i in range(20))
    else:
        text = "".join(f'{{"timestamp": {i}, "input_length": 5, "output_length": 1, '
                       f'"hash_ids": [{i}]}}\n' for i in range(21))  # fmt: skip
    path = tmp_path / f"long.{'csv' if fmt == 'independent' else 'jsonl'}"
    path.write_text(text)
    lines = text.count("\n")
    monkeypatch.setattr(bounds, "MAX_TRACE_LINES", lines - 1)
    with pytest.raises(TraceFormatError) as err:
        load_trace(path, fmt=fmt)
    assert str(err.value) == (
        f"{path}:{lines}: file has {lines:,} lines, past the bound of {lines - 1:,} lines "
        "per trace (docs/trace-bounds.md): split it and replay the parts" + WINDOW_HINT
    )
    monkeypatch.setattr(bounds, "MAX_TRACE_LINES", lines)
    assert len(load_trace(path, fmt=fmt).units) >= 20


def test_the_line_bound_is_a_header_and_ten_million_rows():
    assert bounds.MAX_TRACE_LINES == 10_000_001  # tracegen writes at most 10M rounds


def test_a_special_file_reporting_size_zero_is_read_only_up_to_the_bound(monkeypatch):
    """/proc files say size 0 and may be endless: the read stops at the bound."""
    monkeypatch.setattr(bounds, "MAX_TRACE_BYTES", 64)
    with pytest.raises(TraceFormatError, match="larger than the bound"):
        load_trace("/proc/self/maps", fmt="independent")


def _cli(*args: str, cwd: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "workbench", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def _one_line_error(proc: subprocess.CompletedProcess, words: str, code: int = 3) -> None:
    """One line on stderr, no traceback; ``code``: ExitCode.TRACE_ERROR unless told."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_cli_stats_replay_tracegen_print_one_line(tmp_path, kind):
    path, words = _make(kind, tmp_path)
    for args in (
        ("stats", str(path)),
        ("stats", str(path), "--format", "mooncake"),
        ("replay", "--trace", str(path), "--target", "sim", "-o", str(tmp_path / "runs")),
        ("replay", "--trace", str(path), "--dry-run"),
        ("tracegen", str(path), "-o", str(tmp_path / "out.csv")),
    ):
        _one_line_error(_cli(*args, cwd=tmp_path), words)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.skipif(os.geteuid() == 0 and not SETPRIV, reason="root without setpriv reads all")
def test_an_unreadable_file_is_one_error_via_api_and_cli(tmp_path):
    path, words = _make("unreadable", tmp_path)
    api = (
        "import sys\nfrom workbench import load_trace\nfrom workbench.errors import "
        "TraceFormatError\ntry:\n    load_trace(sys.argv[1])\nexcept TraceFormatError as e:\n"
        "    print(e.line, e.rule)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([*AS_USER, sys.executable, "-c", api, str(path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "0 cannot open file: Permission denied", proc.stderr
    for args in (("stats", str(path)), ("tracegen", str(path), "-o", "o.csv"),
                 ("replay", "--trace", str(path), "--dry-run")):
        _one_line_error(_cli(*args, cwd=tmp_path, prefix=AS_USER), words)


def test_a_bom_and_crlf_csv_is_detected(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + VALID.replace("\n", "\r\n").encode())
    w = load_trace(path)
    assert w.fmt == "independent" and w.units[0].unit_id == "independent_a"
    path.write_bytes(b"\xef\xbb\xbf" + SESSION.encode())
    assert load_trace(path).fmt == "session"


def test_tracegen_output_that_cannot_be_written_is_one_config_error(tmp_path):
    src = tmp_path / "s.csv"
    src.write_text(SESSION)
    (tmp_path / "taken").mkdir()
    with pytest.raises(WorkbenchError, match="tracegen cannot write"):
        tracegen(src, tmp_path / "taken")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = _cli("tracegen", str(src), "-o", str(blocker / "out.csv"), cwd=tmp_path)
    _one_line_error(proc, "tracegen cannot write", code=2)  # ExitCode.CONFIG_ERROR


@pytest.mark.timeout(60)
def test_report_on_a_path_that_is_not_a_run_is_one_error(tmp_path):
    cases = {}
    cases["missing"] = (tmp_path / "nope", "no such directory")
    (tmp_path / "afile").write_text("x")
    cases["file"] = (tmp_path / "afile", "not a directory")
    (tmp_path / "empty").mkdir()
    cases["empty"] = (tmp_path / "empty", "is not a run directory")
    fifo_run = tmp_path / "fiforun"
    fifo_run.mkdir()
    os.mkfifo(fifo_run / "records.jsonl")
    cases["fifo-records"] = (fifo_run, "is not a regular file")
    for name, (path, words) in cases.items():
        with pytest.raises(RunDirError, match=words):
            resolve_run_dir(path)
        with pytest.raises(FileNotFoundError, match=words):  # still what callers caught
            load(path)
        proc = _cli("report", str(path), "-o", str(tmp_path / "reports"), cwd=tmp_path)
        _one_line_error(proc, words, code=2)  # a command-line error: ExitCode.CONFIG_ERROR
        assert name and not (tmp_path / "reports").exists()


def test_a_gzip_trace_reads_as_its_content_within_the_bound(tmp_path, monkeypatch):
    """Any format: a ``.gz`` file is read decompressed (TraceLab and AIPerf ship
    ``.jsonl.gz``); decompressing past ``MAX_TRACE_BYTES`` stops at the bound."""
    import gzip

    from workbench.data import path as data_path
    from workbench.traces import bounds

    src = Path(data_path("mooncake/conversation_trace_head600.jsonl"))
    packed = tmp_path / "m.jsonl.gz"
    packed.write_bytes(gzip.compress(src.read_bytes()))
    assert load_trace(packed).units == load_trace(src).units
    assert load_trace(packed).fmt == "mooncake"
    monkeypatch.setattr(bounds, "MAX_TRACE_BYTES", 50_000)  # the .gz is ~44 KB, its text 148 KB
    with pytest.raises(TraceFormatError, match="decompressed, file is larger than the bound"):
        load_trace(packed, fmt="mooncake")


CSV = b"id,arrival_time,input_len,output_len\nr1,0,100,4\nr2,10,120,4\n"


@pytest.mark.parametrize(("name", "data", "rule"), [
    ("t.csv.bz2", b"BZh91AY&SY" + b"\x00" * 20, "compressed with bzip2"),
    ("t.csv.xz", b"\xfd7zXZ\x00" + b"\x00" * 20, "compressed with xz"),
    ("t.csv.zst", b"\x28\xb5\x2f\xfd" + b"\x00" * 20, "compressed with zstd"),
    ("t.zip", b"PK\x03\x04" + b"\x00" * 20, "a zip archive"),
    ("t.csv", "\ufeff".encode("utf-16-le") + CSV.decode().encode("utf-16-le"), "UTF-16 text"),
], ids=["bzip2", "xz", "zstd", "zip", "utf16"])
@pytest.mark.parametrize("fmt", ["auto", "independent"])
def test_a_compressed_or_utf16_file_says_so(tmp_path, name, data, rule, fmt):
    """Auto-detection said "cannot tell the trace format; name it (--format ...)" of a
    bzip2/xz/zstd/zip file or UTF-16 text, and naming it said "binary data (NUL byte)":
    neither says what to do. Only gzip is read; traces are UTF-8."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, fmt=fmt)
    assert (info.value.path, info.value.line) == (str(path), 1)
    assert info.value.rule.startswith(rule), info.value.rule
