"""Write only what we create (docs/security.md, "Run ids and paths"): a link planted where
workbench writes a file — a run's temporary, a report's files, a sweep's manifest, an
export's temporary — is refused by name, exit 2, and its target outside the folder is
left as it was. One helper writes every file: ``workbench.safe_write``.

Before: ``records.parquet.tmp`` was followed (a file outside ``out_dir`` overwritten with
Parquet bytes, ``records.parquet`` left a link to it), and ``workbench report -o OUT
--run-id rep`` wrote ``report.html`` and ``replay.ipynb`` through links in ``OUT/rep``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import safe_write
from workbench.data import path as data_path
from workbench.errors import ExitCode

SMALL = str(data_path("tracelab/multi_session_example.csv"))
REPO = Path(__file__).resolve().parents[2]
SECRET = b"outside: must not change\n"


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def _victim(tmp_path: Path, name: str = "victim") -> Path:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    v = outside / name
    v.write_bytes(SECRET)
    return v


def _refused(done: subprocess.CompletedProcess, link: Path, *victims: Path) -> None:
    assert done.returncode == ExitCode.CONFIG_ERROR, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr
    assert str(link) in done.stderr and "link" in done.stderr, done.stderr
    for v in victims:
        assert v.read_bytes() == SECRET, v


def test_a_run_temporary_planted_as_a_link_is_refused(tmp_path):
    victim = _victim(tmp_path)
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    link = run / "records.parquet.tmp"
    link.symlink_to(victim)
    done = _cli("simulate", "--trace", SMALL, "--max-items", "2", "-o",
                str(tmp_path / "runs"), "--run-id", "r")
    _refused(done, link, victim)
    assert not (run / "manifest.json").exists()  # refused before the run


def test_report_files_planted_as_links_are_refused(tmp_path):
    assert _cli("simulate", "--trace", SMALL, "--max-items", "2", "-o",
                str(tmp_path / "runs"), "--run-id", "r").returncode == 0
    victims = [_victim(tmp_path, "a"), _victim(tmp_path, "b")]
    rep = tmp_path / "out" / "rep"
    rep.mkdir(parents=True)
    (rep / "report.html").symlink_to(victims[0])
    (rep / "replay.ipynb").symlink_to(victims[1])
    done = _cli("report", str(tmp_path / "runs" / "r"), "-o", str(tmp_path / "out"),
                "--run-id", "rep")
    _refused(done, rep / "replay.ipynb", *victims)


def test_a_sweep_manifest_temporary_planted_as_a_link_is_refused(tmp_path):
    victim = _victim(tmp_path)
    sweep = tmp_path / "out" / "w"
    sweep.mkdir(parents=True)
    link = sweep / "sweep.json.tmp"
    link.symlink_to(victim)
    done = _cli("sweep", "--trace", SMALL, "--virtual", "--max-items", "2", "--over",
                "arrival.max_concurrency=1,2", "-o", str(tmp_path / "out"), "--sweep-id", "w")
    _refused(done, link, victim)


def test_an_export_temporary_planted_as_a_link_is_refused(tmp_path):
    victim = _victim(tmp_path)
    out = tmp_path / "trace.csv"
    link = tmp_path / "trace.csv.tmp"
    link.symlink_to(victim)
    done = _cli("tracegen", SMALL, "-o", str(out))
    _refused(done, link, victim)


# -- the helper itself ------------------------------------------------------------------
def test_the_helper_refuses_symlinks_and_hard_links_and_replaces_its_own_files(tmp_path):
    victim = _victim(tmp_path)
    sym = tmp_path / "sym"
    sym.symlink_to(victim)
    hard = tmp_path / "hard"
    os.link(victim, hard)
    for link in (sym, hard):
        with pytest.raises(safe_write.LinkRefused, match=str(link)):
            safe_write.write_file(link, b"x", atomic=False)
    with pytest.raises(safe_write.LinkRefused, match="sym"):
        safe_write.write_file(sym, b"x")  # atomic: the rename target is a link
    assert not (tmp_path / "sym.tmp").exists()  # the temporary is removed
    with pytest.raises(safe_write.LinkRefused), safe_write.open_file(hard, "ab"):
        pass
    linked_dir = tmp_path / "figures"
    linked_dir.symlink_to(tmp_path / "outside")
    with pytest.raises(safe_write.LinkRefused, match="folder"):
        safe_write.make_dir(linked_dir)
    assert victim.read_bytes() == SECRET
    own = tmp_path / "own.json"
    safe_write.write_file(own, "1")
    safe_write.write_file(own, "2")  # a file of ours is replaced, not truncated through
    assert own.read_text() == "2"


def test_write_atomic_is_one_call_whole_or_nothing(tmp_path):
    """``safe_write.write_atomic`` (a run's JSON files: ``storage.write_json``): the whole
    file renamed into place, links refused by name, and a write that fails part-way (a file
    size limit: EFBIG) an ``OutputWriteError`` naming the temporary, which is removed, the
    file before it left as it was."""
    import resource
    import signal

    from workbench.errors import OutputWriteError

    own = tmp_path / "manifest.json"
    assert safe_write.write_atomic(own, b"1") == own
    safe_write.write_atomic(own, b"2")  # a file of ours is replaced
    assert own.read_bytes() == b"2" and not safe_write.temp_of(own).exists()
    victim = _victim(tmp_path)
    sym, hard, tmp_sym = tmp_path / "sym", tmp_path / "hard", tmp_path / "t.json.tmp"
    sym.symlink_to(victim)
    os.link(victim, hard)
    tmp_sym.symlink_to(victim)
    with pytest.raises(safe_write.LinkRefused, match=str(sym)):
        safe_write.write_atomic(sym, b"x")  # the rename target is a link
    assert not safe_write.temp_of(sym).exists()
    with pytest.raises(safe_write.LinkRefused, match=str(tmp_sym)):
        safe_write.write_atomic(tmp_path / "t.json", b"x")  # its temporary is a link
    safe_write.write_atomic(hard, b"x")  # replaced by a new file, never written through
    assert hard.read_bytes() == b"x" and victim.read_bytes() == SECRET

    soft, hard_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (4, hard_limit))
    try:
        with pytest.raises(OutputWriteError, match="EFBIG") as err:
            safe_write.write_atomic(own, b"longer than four bytes")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard_limit))
        signal.signal(signal.SIGXFSZ, old)
    assert err.value.path == str(safe_write.temp_of(own))
    assert not safe_write.temp_of(own).exists() and own.read_bytes() == b"2"
