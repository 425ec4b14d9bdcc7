"""``render_report``: execute a notebook headlessly (papermill) and publish it (nbconvert).

What a report directory holds, the standalone HTML, the index, and the kernel's IPC
folder: docs/reports.md."""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import logging
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import nbformat

from workbench import safe_write as safe
from workbench.config.validation import check_run_id
from workbench.errors import WRITE_ERRNOS, ConfigError, OutputWriteError
from workbench.plurals import counted, noun
from workbench.storage.rundir import contained_dir

log = logging.getLogger(__name__)

NOTEBOOK_PACKAGE_DIR = "notebooks"
NOTEBOOK_ONLY = "notebook-only"  # cell tag: shown in JupyterLab, left out of report.html
#: lab's template without the blocks that load scripts from a CDN: no JavaScript
REPORT_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
REPORT_CSS = """
<style>
  .wb-table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 0.5em 0; }
  .wb-table th, .wb-table td { padding: 0.25em 0.8em; border-bottom: 1px solid #ddd; }
  .wb-table td { text-align: right; }
  .wb-table caption { caption-side: top; text-align: left; font-weight: 600; }
  .jp-OutputArea-output img { max-width: 100%; height: auto; }
  .wb-params { font-size: 0.9em; color: #444; }
</style>
"""


@dataclass
class Artifacts:
    """Files exported from one executed notebook (paths relative to the report dir)."""

    figures: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)


# -- notebooks --------------------------------------------------------------------------
def bundled_notebooks() -> list[str]:
    """Names of the notebooks shipped inside the package."""
    root = resources.files("workbench") / NOTEBOOK_PACKAGE_DIR
    return sorted(p.name[: -len(".ipynb")] for p in root.iterdir() if p.name.endswith(".ipynb"))


def notebook_path(notebook: str | Path) -> Path:
    """An existing ``.ipynb`` path, or a bundled notebook by name (``"replay"``)."""
    p = Path(notebook)
    if p.suffix == ".ipynb" and p.exists():
        return p
    name = p.name[: -len(".ipynb")] if p.name.endswith(".ipynb") else p.name
    bundled = resources.files("workbench") / NOTEBOOK_PACKAGE_DIR / f"{name}.ipynb"
    if str(notebook) in (name, f"{name}.ipynb") and bundled.is_file():
        return Path(str(bundled))
    raise ConfigError(
        f"notebook {str(notebook)!r} not found; give a .ipynb path or one of the bundled "
        f"notebooks: {', '.join(bundled_notebooks())}"
    )


def check_parameters(nb: Path, params: Mapping[str, Any] | None, out: Path) -> dict[str, Any]:
    """Reject names the parameters cell does not declare; fill ``run_id``/``out_dir``."""
    import papermill

    declared = papermill.inspect_notebook(str(nb))
    given = dict(params or {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ConfigError(
            f"{nb.name} has no {noun(len(unknown), 'parameter')} "
            f"{', '.join(unknown)}; its parameters: {', '.join(declared)}"
        )
    if given.get("interactive"):
        raise ConfigError("interactive=True needs a live kernel with widgets; papermill has none")
    if "interactive" in declared:
        given["interactive"] = False
    if "run_id" in declared and not given.get("run_id"):
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        given["run_id"] = f"{stamp}-{nb.stem}"
    if "out_dir" in declared and not given.get("out_dir"):
        given["out_dir"] = str(out)
    return given


def check_kernel(kernel_name: str = "python3") -> None:
    """Warn when ``kernel_name`` would start an interpreter other than this one."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(kernel_name)
    except NoSuchKernel:
        raise ConfigError(
            f"no Jupyter kernel {kernel_name!r}; install one into this environment with "
            f"`{sys.executable} -m ipykernel install --sys-prefix`"
        ) from None
    exe = spec.argv[0] if spec.argv else ""
    if exe not in ("python", "python3", sys.executable):
        log.warning(
            "kernel %r runs %s, not %s (a user-level kernelspec shadows this environment's); "
            "it may not import workbench", kernel_name, exe, sys.executable,
        )


# -- exports ------------------------------------------------------------------------------
def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "item"


def _unique(name: str, seen: dict[str, int]) -> str:
    seen[name] = seen.get(name, 0) + 1
    return name if seen[name] == 1 else f"{name}-{seen[name]}"


def export_artifacts(nb: Any, report_dir: Path) -> Artifacts:
    """Write every displayed PNG to ``figures/`` and every shown table to ``tables/``;
    collect the headline lines the notebook displayed (``Headline``)."""
    from workbench.report.headline import HEADLINE_MIME
    from workbench.report.plots import FIGURE_META
    from workbench.report.tables import TABLE_MIME, frame_from_payload

    arts = Artifacts()
    seen: dict[str, int] = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if HEADLINE_MIME in data:
                arts.headline += list(data[HEADLINE_MIME].get("lines") or [])
            if "image/png" in data:
                kind = output.get("metadata", {}).get(FIGURE_META, {}).get("figure") or "figure"
                rel = f"figures/{len(arts.figures) + 1:02d}-{_slug(kind)}.png"
                safe.make_dir(report_dir / "figures")
                safe.write_file(report_dir / rel, base64.b64decode(data["image/png"]))
                arts.figures.append(rel)
            if TABLE_MIME in data:
                payload = data[TABLE_MIME]
                stem = "tables/" + _unique(_slug(payload.get("name", "table")), seen)
                safe.make_dir(report_dir / "tables")
                with safe.open_file(report_dir / f"{stem}.csv", "w", atomic=True) as fh:
                    frame_from_payload(payload).to_csv(fh)
                safe.write_file(report_dir / f"{stem}.json", json.dumps(payload, indent=1))
                arts.tables += [f"{stem}.csv", f"{stem}.json"]
    return arts


def notebook_title(nb: Any, default: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return default


def _params_cell(params: Mapping[str, Any]) -> Any:
    items = "".join(
        f"<li><code>{html.escape(k)}</code> = <code>{html.escape(repr(v))}</code></li>"
        for k, v in params.items()
    )
    return nbformat.v4.new_markdown_cell(
        f'<details class="wb-params"><summary>Report parameters</summary><ul>{items}</ul>'
        "</details>"
    )


def _alt_text(nb: Any) -> None:
    """Each PNG output becomes an ``<img>`` with alt text (the figure's own description,
    ``ReportFigure.alt_text``), so the HTML report is readable without the pictures."""
    from workbench.report.plots import FIGURE_META

    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" not in data or "text/html" in data:
                continue
            meta = output.get("metadata", {}).get(FIGURE_META, {})
            alt = meta.get("alt") or f"figure: {meta.get('figure') or 'untitled'}"
            data["text/html"] = (f'<img alt="{html.escape(alt)}" '
                                 f'src="data:image/png;base64,{data.pop("image/png")}">')


def export_html(nb: Any, path: Path, *, show_code: bool, params: Mapping[str, Any],
                title: str = "") -> Path:
    """``report.html`` (lab template, no external scripts): code hidden unless
    ``show_code``; PNGs inline; ``notebook-only`` cells left out; ``<title>`` ``title``."""
    import jinja2
    from nbconvert import HTMLExporter

    nb = nbformat.from_dict(json.loads(json.dumps(nb)))  # a copy to annotate
    _alt_text(nb)
    nb.cells = [c for c in nb.cells if NOTEBOOK_ONLY not in c.get("metadata", {}).get("tags", [])]
    if not show_code:  # a hidden cell without output would only leave a gap
        nb.cells = [c for c in nb.cells if c.cell_type != "code" or c.get("outputs")]
    nb.cells.append(_params_cell(params))  # collapsed, below the report: the top is its answer
    if title:
        nb.metadata["title"] = title
    exporter = HTMLExporter(
        template_name="lab",
        template_file="workbench_report.html.j2",
        extra_loaders=[jinja2.DictLoader({"workbench_report.html.j2": REPORT_TEMPLATE})],
        exclude_input=not show_code,
        exclude_input_prompt=not show_code,
        exclude_output_prompt=True,
        embed_images=True,
    )
    body, _ = exporter.from_notebook_node(nb)
    safe.write_file(path, body.replace("</head>", REPORT_CSS + "</head>", 1))
    return path


# -- index ----------------------------------------------------------------------------------
INDEX_ROW = (
    '<tr><td><a href="{href}">{title}</a><div class="hl">{headline}</div></td><td>{run_id}</td>'
    "<td>{notebook}</td><td>{created}</td><td>{status}</td></tr>"
)


def write_index(out: Path) -> Path:
    """(Re)write ``out/index.html``: one row per ``*/report.json``, newest first."""
    metas = []
    for meta_path in out.glob("*/report.json"):
        try:
            metas.append(json.loads(meta_path.read_text()))
        except (OSError, ValueError) as exc:
            log.warning("skipping %s in the index: %s", meta_path, exc)
    metas.sort(key=lambda m: str(m.get("created", "")), reverse=True)
    rows = "\n".join(
        INDEX_ROW.format(
            href=html.escape(f"{m['run_id']}/report.html"),
            headline="<br>".join(html.escape(str(line)) for line in m.get("headline") or []),
            **{k: html.escape(str(m.get(k, ""))) for k in
               ("title", "run_id", "notebook", "created", "status")},
        )
        for m in metas
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>workbench reports</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left;"
        "vertical-align:top}.hl{font-size:.85em;color:#333;max-width:60em}</style>"
        "</head><body><h1>workbench reports</h1>"
        f"<p>{counted(len(metas), 'report')} in <code>{html.escape(str(out.resolve()))}</code></p>"
        "<table><tr><th>report</th><th>run id</th><th>notebook</th><th>created (UTC)</th>"
        f"<th>status</th></tr>\n{rows}\n</table></body></html>\n"
    )
    index = out / "index.html"
    safe.write_file(index, page)
    return index


def report_headline(html_path: str | Path) -> list[str]:
    """The headline lines a rendered report displayed (from its ``report.json``)."""
    try:
        meta = json.loads((Path(html_path).parent / "report.json").read_text())
    except (OSError, ValueError):
        return []
    return [str(line) for line in meta.get("headline") or []]


# -- the verb -------------------------------------------------------------------------------
def render_report(
    notebook: str | Path,
    params: Mapping[str, Any] | None = None,
    out: str | Path = "reports",
    *,
    show_code: bool = False,
    kernel_name: str = "python3",
    timeout_s: float | None = 1800,
    progress: bool = False,
) -> Path:
    """Execute ``notebook`` with ``params``, publish it under ``out/<run_id>/`` and return
    the path of ``report.html`` (docs/reports.md). A failed cell still gets its HTML, then
    papermill's ``PapermillExecutionError`` is raised again; ``progress``: a bar over the
    cells on stderr."""
    import papermill
    from traitlets.config import Config

    out = Path(out)
    nb_path = notebook_path(notebook)
    given = check_parameters(nb_path, params, out)
    run_id = str(given.get("run_id") or given.get("label") or f"report-{nb_path.stem}")
    check_run_id("run_id", run_id)  # one directory under out, never a path out of it
    report_dir = contained_dir(out, run_id)  # never a symlink out of ``out``
    safe.make_dir(report_dir)
    executed = report_dir / f"{nb_path.stem}.ipynb"
    for name in (executed.name, "report.html", "report.json"):  # before the kernel runs
        for where in (report_dir / name, safe.temp_of(report_dir / name)):
            if where.is_symlink():
                raise safe.LinkRefused(where)
    check_kernel(kernel_name)
    status = "failed"
    # a private folder (mode 0700, removed after) for the kernel's IPC sockets: docs/reports.md
    with tempfile.TemporaryDirectory(prefix="wb-kernel-", ignore_cleanup_errors=True) as tmp:
        ipc = Path(tmp)
        scratch = ipc / executed.name
        try:
            papermill.execute_notebook(
                str(nb_path), str(scratch), parameters=given, kernel_name=kernel_name,
                progress_bar=progress, request_save_on_cell_execute=False,
                execution_timeout=timeout_s,
                config=Config({"KernelManager": {"transport": "ipc", "ip": str(ipc / "k")}}),
                shutdown_kernel="immediate",  # not graceful: no spurious KeyboardInterrupt
            )
            status = "ok"
        except OSError as exc:
            if exc.errno not in WRITE_ERRNOS:
                raise
            status = "unwritten"  # a torn notebook: nothing to publish from it
            raise OutputWriteError(exc.filename or executed, exc) from None
        finally:
            if scratch.exists() and status != "unwritten":
                try:
                    safe.write_file(executed, scratch.read_bytes())
                    _publish(executed, report_dir, given, show_code or status != "ok",
                             status, nb_path)
                    write_index(out)
                except OSError as exc:  # disk full, file too large: one line, no traceback
                    raise OutputWriteError(exc.filename or report_dir, exc) from None
    return report_dir / "report.html"


def _publish(executed: Path, report_dir: Path, params: Mapping[str, Any], show_code: bool,
             status: str, source: Path) -> None:
    nb = nbformat.read(executed, as_version=4)
    arts = export_artifacts(nb, report_dir)
    title = notebook_title(nb, source.stem)
    export_html(nb, report_dir / "report.html", show_code=show_code, params=params,
                title=f"{title}: {report_dir.name}")
    meta = {
        "run_id": report_dir.name,
        "title": title,
        "headline": arts.headline,
        "notebook": source.name,
        "parameters": dict(params),
        "created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "status": status,
        "show_code": show_code,
        "files": {"html": "report.html", "notebook": executed.name,
                  "figures": arts.figures, "tables": arts.tables},
    }
    safe.write_file(report_dir / "report.json", json.dumps(meta, indent=2, default=str))
