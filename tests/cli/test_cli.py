import subprocess
import sys

import workbench


def test_python_m_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: workbench" in out


def test_import_is_lazy():
    code = "import sys, workbench; print('aiohttp' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert "load_trace" in dir(workbench)
