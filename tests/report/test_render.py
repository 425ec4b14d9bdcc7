"""render_report on a tiny notebook (real kernel), its exports and index; the report CLI."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import nbformat
import pytest
from public_data import REPO

from workbench.errors import ConfigError
from workbench.report import render


def tiny_notebook(path: Path, body: str = "") -> Path:
    nb = nbformat.v4.new_notebook(metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    })
    params = nbformat.v4.new_code_cell('scale = 1.0\nrun_id = None\nout_dir = "x"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Tiny report\n\nA check of the render pipeline."),
        params,
        nbformat.v4.new_code_cell(
            "import pandas as pd\n"
            "from workbench.report import tables\n"
            "from workbench.report.plots import ReportFigure\n"
            "df = pd.DataFrame({'p50': [1.23456 * scale]}, index=['ttft_ms'])\n"
            "tables.show(df, 'latency')"
        ),
        nbformat.v4.new_code_cell(
            "fig = ReportFigure()\nfig.add_subplot().plot([0, 1], [0, scale])\n"
            "fig.set_label('line')\nfig"
        ),
        nbformat.v4.new_code_cell(body or "print('done')"),
    ]
    nbformat.write(nb, path)
    return path


def text_of(html: str) -> str:
    """The visible text of an HTML page (tags dropped, entities decoded)."""
    import html as html_mod
    import re

    return html_mod.unescape(re.sub(r"<[^>]+>", "", html))


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return tiny_notebook(tmp_path / "tiny.ipynb")


def test_render_writes_html_notebook_figures_tables_and_index(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    html_path = render.render_report(tiny, {"scale": 2.0, "run_id": "r1"}, out)
    assert html_path == out / "r1" / "report.html"
    html = html_path.read_text()
    assert "2.469" in html  # the table, 3 decimals
    assert "data:image/png;base64," in html  # the figure, embedded
    assert "import pandas" not in text_of(html)  # code hidden by default
    assert "Report parameters" in html and "2.0" in text_of(html)
    executed = nbformat.read(out / "r1" / "tiny.ipynb", as_version=4)
    assert executed.metadata.papermill.parameters["scale"] == 2.0
    png = (out / "r1" / "figures" / "01-line.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    csv = (out / "r1" / "tables" / "latency.csv").read_text()
    assert csv.splitlines()[1].startswith("ttft_ms,2.46912")
    payload = json.loads((out / "r1" / "tables" / "latency.json").read_text())
    assert payload["data"] == [[pytest.approx(2.46912)]]
    meta = json.loads((out / "r1" / "report.json").read_text())
    assert meta["title"] == "Tiny report" and meta["status"] == "ok"
    assert meta["parameters"]["out_dir"] == str(out)  # filled in: a run saves beside its report
    index = (out / "index.html").read_text()
    assert 'href="r1/report.html"' in index and "Tiny report" in index


def test_show_code_and_index_lists_every_report(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    render.render_report(tiny, {"run_id": "a"}, out)
    html = render.render_report(tiny, {"run_id": "b", "scale": 3.0}, out, show_code=True)
    assert "import pandas" in text_of(html.read_text())  # code cells are visible
    index = (out / "index.html").read_text()
    assert 'href="a/report.html"' in index and 'href="b/report.html"' in index


def test_defaults_fill_run_id_and_out_dir(tiny: Path, tmp_path: Path) -> None:
    params = render.check_parameters(tiny, {}, tmp_path)
    assert params["run_id"].endswith("-tiny") and params["out_dir"] == str(tmp_path)


def test_unknown_parameters_are_rejected_with_the_declared_names(tiny: Path) -> None:
    with pytest.raises(ConfigError, match=r"no parameter scael; its parameters: scale, run_id"):
        render.check_parameters(tiny, {"scael": 2}, Path("."))


def test_a_failing_cell_still_writes_the_report_with_code(tmp_path: Path) -> None:
    from papermill import PapermillExecutionError

    nb = tiny_notebook(tmp_path / "bad.ipynb", "raise RuntimeError('boom')")
    with pytest.raises(PapermillExecutionError):
        render.render_report(nb, {"run_id": "bad"}, tmp_path / "out")
    html = text_of((tmp_path / "out" / "bad" / "report.html").read_text())
    assert "boom" in html and "raise RuntimeError" in html
    assert json.loads((tmp_path / "out" / "bad" / "report.json").read_text())["status"] == "failed"


def test_bundled_notebooks_resolve_by_name_and_the_repo_dir_is_the_package_dir() -> None:
    assert render.bundled_notebooks() == [
        "compare", "parity", "plan", "replay", "sweep", "trace_explorer"]
    for name in render.bundled_notebooks():
        assert render.notebook_path(name).is_file()
    # one copy: the repository's notebooks/ is a relative symlink to the package data
    link = REPO / "notebooks"
    assert link.is_symlink() and str(link.readlink()) == "workbench/notebooks"
    assert link.resolve() == render.notebook_path("replay").parent.resolve()
    with pytest.raises(ConfigError,
                       match="compare, parity, plan, replay, sweep, trace_explorer"):
        render.notebook_path("nope")


def test_the_python3_kernel_is_this_interpreter() -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] in ("python", "python3", sys.executable)
    render.check_kernel("python3")
    with pytest.raises(ConfigError, match="ipykernel install"):
        render.check_kernel("no-such-kernel")


def test_export_names_figures_from_their_tag(tmp_path: Path) -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    nb.cells[0].outputs = [
        nbformat.v4.new_output("display_data", {"image/png": png},
                               metadata={"workbench": {"figure": "cdf"}}),
        nbformat.v4.new_output("display_data", {"image/png": png}),
    ]
    arts = render.export_artifacts(nb, tmp_path)
    assert arts.figures == ["figures/01-cdf.png", "figures/02-figure.png"]


def test_report_cli_picks_the_notebook_from_the_number_of_runs(tmp_path: Path) -> None:
    from workbench.cli import build_parser
    from workbench.commands.report import build_params

    for name in ("r1", "r2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text("{}")
    parser = build_parser()
    one = parser.parse_args(["report", str(tmp_path / "r1"), "-o", str(tmp_path)])
    assert build_params(one) == ("replay", {"run_dir": str(tmp_path / "r1"), "run_id": "r1"})
    two = parser.parse_args(["report", str(tmp_path / "r1"), str(tmp_path / "r2"),
                             "--param", "n_boot=50"])
    nb, params = build_params(two)
    assert nb == "compare"
    assert params == {"run_dirs": [str(tmp_path / "r1"), str(tmp_path / "r2")], "n_boot": 50}


def test_two_reports_at_once_from_one_folder_get_their_own_kernel_sockets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jupyter_client's default IPC sockets are ``kernel-ipc-N`` in the current folder,
    N the first free number: two kernels starting together there could bind the same
    sockets ("Invalid Signature", a kernel that never answers). Each report's sockets
    live in a private folder instead, and nothing is left in the current one."""
    from concurrent.futures import ThreadPoolExecutor

    body = ("import json, ipykernel.connect\n"
            "info = ipykernel.connect.get_connection_info(unpack=True)\n"
            "keep = {k: info[k] for k in ('ip', 'transport')}\n"
            "open(f'{out_dir}/{run_id}.ipc.json', 'w').write(json.dumps(keep))")  # fmt: skip
    nb = tiny_notebook(tmp_path / "ipc.ipynb", body)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    out = tmp_path / "out"
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda rid: render.render_report(nb, {"run_id": rid}, out),
                             ["a", "b"]))  # fmt: skip
    assert [p.name for p in done] == ["report.html", "report.html"]
    infos = [json.loads((out / f"{rid}.ipc.json").read_text()) for rid in ("a", "b")]
    assert {i["transport"] for i in infos} == {"ipc"}
    ips = [Path(i["ip"]) for i in infos]
    assert ips[0].parent != ips[1].parent  # one private folder per report
    assert all(ip.is_absolute() and work not in ip.parents for ip in ips)
    assert not any(ip.parent.exists() for ip in ips)  # removed afterwards
    assert list(work.iterdir()) == []


def test_the_index_counts_its_reports_in_words(tmp_path: Path) -> None:
    """``1 report in``, ``2 reports in``: never the ``report(s)`` of a form letter."""
    def say(n: int) -> str:
        for i in range(n):
            d = tmp_path / f"r{i}"
            d.mkdir(exist_ok=True)
            (d / "report.json").write_text(json.dumps({"run_id": f"r{i}", "created": str(i)}))
        return render.write_index(tmp_path).read_text()

    assert "<p>1 report in <code>" in say(1)
    assert "<p>2 reports in <code>" in say(2)
