"""A test file's expression evaluated in a fresh interpreter with the compiled parts on or
off (``WORKBENCH_COMPILED``, read at import, set exactly as a user sets it): how the tests
run the Python twins against the compiled engine (docs/virtual-time.md, "Compiled
kernels")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]  # the checkout: ``tests`` importable there


def in_child(path: str, expr: str, compiled: bool) -> Any:
    """``expr`` evaluated in the namespace of the file at ``path``, run anew in a child
    interpreter, as JSON."""
    code = (f"import json, runpy; m = runpy.run_path({path!r}); "
            f"print(json.dumps(eval({expr!r}, m)))")  # fmt: skip
    env = {**os.environ, "WORKBENCH_COMPILED": "1" if compiled else "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600, check=False, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def patched_in_python(path: str, expr: str, namespace: dict[str, Any]) -> Any:
    """``expr``, of a test that patches a method of the mypyc-compiled set, as JSON: the
    compiled set's callers call its methods natively and never see a patch, so where the
    set runs compiled here it is evaluated in a child running the Python twin
    (``WORKBENCH_COMPILED=0``), and here otherwise (docs/virtual-time.md, "Compiled step
    loop (mypyc)")."""
    from workbench.kernels import compiled

    if compiled():
        return in_child(path, expr, compiled=False)
    return json.loads(json.dumps(eval(expr, namespace)))
