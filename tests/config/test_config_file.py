"""QA: ``--config FILE`` is opened like a trace: a FIFO, a device, binary data are one error.

Found by the independent check (issue 13 class 2, "every entry point gives one clear
error"): ``replay --config FIFO`` blocked forever, ``--config`` a link to
``/dev/zero`` read without bound, and a gzip file ended in a UnicodeDecodeError
traceback.
"""

import gzip
import os
import subprocess
import sys

import pytest

from workbench.config import RunConfig
from workbench.errors import ConfigError


def _kinds(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    gz = tmp_path / "c.json"
    gz.write_bytes(gzip.compress(b'{"trace": "x.csv"}'))
    return {"FIFO": fifo, "character device": zero, "UTF-8": gz}


def test_config_files_that_are_not_regular_text_are_one_config_error(tmp_path):
    for what, path in _kinds(tmp_path).items():
        with pytest.raises(ConfigError, match=what):
            RunConfig.from_file(path)


def test_the_cli_gives_one_line_and_does_not_block(tmp_path):
    for path in _kinds(tmp_path).values():
        try:
            out = subprocess.run(
                [sys.executable, "-m", "workbench", "replay", "--config", str(path), "--dry-run"],
                capture_output=True, text=True, timeout=60,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"--config {path.name} blocked")
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and str(path) in out.stderr
