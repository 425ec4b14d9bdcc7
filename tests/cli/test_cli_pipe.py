"""QA: ``workbench stats T | head -1`` ends quietly, without a BrokenPipeError traceback."""

import os
import subprocess
import sys

from workbench.data import path as data_path


def test_stdout_closed_by_the_reader_is_not_a_traceback():
    read, write = os.pipe()
    os.close(read)  # the reader went away (head -1 after its line): every write is EPIPE
    try:
        out = subprocess.run(
            [sys.executable, "-m", "workbench", "stats",
             str(data_path("tracelab/multi_session_example.csv"))],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
        )
    finally:
        os.close(write)
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 141  # 128 + SIGPIPE, what a shell reports for a killed writer
