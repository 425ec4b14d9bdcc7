"""Children started by spawn do not run the calling script again (docs/sweeps.md,
"parallel-points"): a script without a main guard, or read from stdin, sweeps in
parallel; the main module's file and spec are back once the children have started."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.cores import usable_cores
from workbench.data import path as data_path
from workbench.registry import Registry, registered_in_main
from workbench.spawning import children_start

MOONCAKE = data_path("mooncake/conversation_trace_head600.jsonl")


def _script(out: Path) -> str:
    # no ``if __name__ == "__main__":`` guard, on purpose: a spawned child that ran this
    # module again would start the sweep again (and multiprocessing breaks the pool)
    return textwrap.dedent(f"""
        import json, os, workbench as wb
        s = wb.sweep({{"trace": {{"path": {str(MOONCAKE)!r}, "max_items": 30}}}},
                     {{"arrival.rate": [1, 2]}}, virtual=True, parallel=2,
                     out_dir={str(out)!r}, sweep_id="s")
        print(json.dumps({{"requests": s.frame["requests"].tolist(), "pid": os.getpid()}}))
    """)


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_parallel_sweep_from_an_unguarded_script_or_stdin(tmp_path: Path, how: str) -> None:
    if usable_cores() < 2:
        pytest.skip("one core: the sweep would not start processes")
    text = _script(tmp_path / "out")
    if how == "file":
        (tmp_path / "script.py").write_text(text)
        argv, stdin = [sys.executable, str(tmp_path / "script.py")], None
    else:
        argv, stdin = [sys.executable, "-"], text
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, proc.stdout  # the children did not print (run the script)
    assert json.loads(lines[0])["requests"] == [30.0, 30.0]
    runs = sorted((tmp_path / "out" / "s" / "runs").iterdir())
    assert len(runs) == 2


def test_children_start_hides_then_restores_the_main_module() -> None:
    main = sys.modules["__main__"]
    had_file, file = hasattr(main, "__file__"), getattr(main, "__file__", None)
    spec = getattr(main, "__spec__", None)
    with children_start():
        assert not hasattr(main, "__file__")
        assert main.__spec__ is None
    assert hasattr(main, "__file__") == had_file
    assert getattr(main, "__file__", None) == file
    assert getattr(main, "__spec__", None) is spec


def test_a_script_with_an_axis_value_of_its_own_keeps_its_main_for_the_children() -> None:
    """Its children look that value up by name: they must run the script again."""
    reg: Registry[type] = Registry("test axis")

    class Mine:
        pass

    Mine.__module__ = "__main__"
    main = sys.modules["__main__"]
    file = getattr(main, "__file__", None)
    with reg.added("mine", Mine):
        assert "test axis mine" in registered_in_main()
        with children_start():
            assert getattr(main, "__file__", None) == file
    assert "test axis mine" not in registered_in_main()
    with children_start():
        assert not hasattr(main, "__file__")
