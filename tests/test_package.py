"""The package as users get it: ``python -m build`` makes an sdist and a wheel, the wheel
goes into a fresh venv outside the repository, and from a folder of its own the command
and the API run: ``workbench demo``, ``workbench report`` on that run, ``render_report``
on every bundled notebook, ``workbench sim serve`` and a replay against it. Every file
they write is under the folder each was told, nothing lands in the working folder, and
nothing is written inside site-packages (issue 26)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import workbench

REPO = Path(__file__).resolve().parents[1]
DIST = "workbench_replay"  # pyproject's [project].name, normalized
SHIPPED = (
    "workbench/py.typed",
    "workbench/sweeps/__init__.py",
    "workbench/data/PROVENANCE.md",
    "workbench/data/tracelab/multi_session_example.csv",
    "workbench/data/mooncake/conversation_trace_head600.jsonl",
    *(f"workbench/notebooks/{n}.ipynb" for n in ("replay", "compare", "trace_explorer", "sweep")),
)
# each notebook headless, small: (name, parameters)
NOTEBOOKS = (
    ("replay", {"max_items": 2}),
    ("compare", {"n_boot": 50}),
    ("trace_explorer", {"max_items": 2}),
    ("sweep", {"max_items": 6, "values": [1, 2]}),
)
NOT_SOURCES = (".git", ".venv*", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis",
               ".ipynb_checkpoints")
TOP_OUTPUTS = {"build", "dist", "reports", "sweeps"}  # at the root only: workbench/sweeps is code
STEP_S = 600  # each subprocess: a bound, not an expectation


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=STEP_S, check=False)  # fmt: skip
    assert done.returncode == 0, f"{cmd} exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _files(root: Path) -> set[str]:
    """Every file under ``root`` (relative), byte-compiled caches left out: Python itself
    writes those next to a module it imports, whoever installed it."""
    return {
        str(p.relative_to(root)) for p in root.rglob("*")
        if not p.is_dir() and "__pycache__" not in p.parts
    }  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``python -m build`` of the repository: (sdist, wheel); the wheel is built from the
    sdist, so whatever the wheel carries the sdist carries too."""
    out = tmp_path_factory.mktemp("dist")
    # from a copy: the build's own files (egg-info, build/) stay out of the repository
    src = tmp_path_factory.mktemp("src") / "workbench"
    patterns = shutil.ignore_patterns(*NOT_SOURCES)

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = TOP_OUTPUTS.intersection(names) if Path(folder) == REPO else set()
        return set(patterns(folder, names)) | top

    shutil.copytree(REPO, src, symlinks=True, ignore=ignore)
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(src)], out, dict(os.environ))
    version = workbench.__version__
    # the wheel is this interpreter's and platform's: it carries the compiled KV index
    wheels = list(out.glob(f"{DIST}-{version}-cp3*-cp3*-linux_*.whl"))
    sdist = out / f"{DIST}-{version}.tar.gz"
    assert sdist.exists() and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return sdist, wheels[0]


@pytest.mark.slow
def test_the_sdist_and_the_wheel_carry_notebooks_traces_provenance_and_py_typed(built):
    sdist, wheel = built
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(SHIPPED) <= names
    with tarfile.open(sdist) as tar:
        inside = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert set(SHIPPED) <= inside
    # the C sources (and what builds them) in the sdist, their modules in the wheel
    assert {"setup.py", "workbench/sim/kvcache.c", "workbench/sim/decoders.c",
            "workbench/kernels.c"} <= inside
    for module in ("workbench/sim/_kvcache.", "workbench/sim/_decoders.", "workbench/_kernels."):
        assert any(n.startswith(module) and n.endswith(".so") for n in names), module
    meta = zipfile.ZipFile(wheel).read(f"{DIST}-{workbench.__version__}.dist-info/METADATA")
    text = meta.decode()
    assert "Name: workbench-replay" in text and "Requires-Python: <3.14,>=3.11" in text
    entry = zipfile.ZipFile(wheel).read(
        f"{DIST}-{workbench.__version__}.dist-info/entry_points.txt"
    ).decode()
    assert "workbench = workbench.cli:main" in entry


@pytest.mark.slow
def test_the_wheel_in_a_fresh_venv_runs_demo_report_notebooks_and_a_replay_outside_the_repo(
    built, tmp_path: Path
):
    _, wheel = built
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, dict(os.environ))
    py, wb = venv / "bin" / "python", venv / "bin" / "workbench"
    env = {  # the user's environment, minus anything that points at this repository
        k: v for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("PYTEST")
    }  # fmt: skip
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", HOME=str(tmp_path / "home"),
               MPLBACKEND="Agg")  # fmt: skip
    (tmp_path / "home").mkdir()
    _run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
          str(wheel)], tmp_path, env)  # fmt: skip
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     tmp_path, env).strip())  # fmt: skip
    where = _run([str(py), "-c", "import workbench; print(workbench.__file__)"], tmp_path, env)
    assert Path(where.strip()).is_relative_to(site), f"imported {where} instead of the wheel"
    assert not Path(where.strip()).is_relative_to(REPO)
    compiled = _run([str(py), "-c", "from workbench.sim import kvindex; from workbench import "
                     "kernels; print(kvindex.COMPILED, kernels.native is not None)"],
                    tmp_path, env)  # fmt: skip
    assert compiled.split() == ["True", "True"]
    before = _files(site)
    cwd, told = tmp_path / "cwd", tmp_path / "told"
    cwd.mkdir()

    _run([str(wb), "demo", "-o", str(told / "demo"), "--max-items", "2", "--no-progress"],
         cwd, env)  # fmt: skip
    run_dir = told / "demo" / "demo"
    assert (run_dir / "records.jsonl").exists() and (run_dir / "report.html").exists()
    _run([str(wb), "report", str(run_dir), "-o", str(told / "report")], cwd, env)
    assert list((told / "report").glob("*/report.html"))

    script = (
        "import json, sys, workbench as wb\n"
        "for name, params in json.loads(sys.argv[1]):\n"
        "    wb.render_report(name, params, sys.argv[2] + '/' + name)\n"
    )
    _run([str(py), "-c", script, json.dumps(NOTEBOOKS), str(told / "notebooks")], cwd, env)
    for name, _ in NOTEBOOKS:
        html = list((told / "notebooks" / name).glob("*/report.html"))
        assert html, f"{name}: no report under {told / 'notebooks' / name}"
        assert "Traceback" not in html[0].read_text(), f"{name}: a cell failed"

    serve = [str(wb), "sim", "serve", "--speedup", "50"]
    server = subprocess.Popen(serve, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # "embedded engine on http://127.0.0.1:PORT"
        assert line.startswith("embedded engine on http://127.0.0.1:"), line
        url = line.split()[-1]
        trace = site / "workbench" / "data" / "tracelab" / "multi_session_example.csv"
        _run([str(wb), "replay", "--trace", str(trace), "--target", url, "--max-items", "2",
              "--metrics-url", f"{url}/simulated-gpu/metrics", "-o", str(told / "runs"),
              "--run-id", "live"], cwd, env)  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
    summary = json.loads((told / "runs" / "live" / "summary.json").read_text())
    assert summary["ok"] > 0 and "DCGM_FI_DEV_FB_USED" in summary["server"]["series"]

    assert _files(cwd) == set(), "something was written in the working folder"
    assert _files(site) == before, "something was written inside site-packages"
    assert sorted(p.name for p in told.iterdir()) == ["demo", "notebooks", "report", "runs"]
