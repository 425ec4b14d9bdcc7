"""JupyterLab on 127.0.0.1 and headless Chromium, as plain context managers: the browser
tests' fixtures (``conftest.py``) and ``bench/bench_panel_live.py`` start them the same way.

``running_lab(root)`` starts ``jupyter lab`` (token auth, ``--allow-root``,
``--no-browser``) on a free loopback port over a copy of ``notebooks/`` in ``root``, and
stops it (SIGTERM, then SIGKILL) on the way out. ``chromium()`` is Debian's
``/usr/bin/chromium`` driven by Playwright's Python client (``playwright install`` is
never used). ``missing()`` says what is not installed, if anything.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
READY_S = 120.0


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    out: Path  # screenshots

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"


def missing_lab() -> str | None:
    """Why JupyterLab cannot start here (None: it can)."""
    if shutil.which("jupyter-lab", path=str(Path(sys.executable).parent)) is None:
        return "jupyterlab is not installed (pip install -e '.[browser]')"
    return None


def missing_browser() -> str | None:
    """Why Chromium cannot be driven here (None: it can)."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (apt-get install chromium chromium-driver)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[browser]')"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_lab(root: Path) -> Iterator[Lab]:
    """``jupyter lab`` over a copy of ``notebooks/`` in ``root`` (an empty directory)."""
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(nb, root / nb.name)
    settings = root / ".settings"  # every cell in the DOM (no windowing), no news pop-up
    for ext, body in (("notebook-extension/tracker", '{"windowingMode": "none"}'),
                      ("apputils-extension/notification", '{"fetchNews": "false"}')):
        f = settings / "@jupyterlab" / f"{ext}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(body)
    port, token = _free_port(), secrets.token_hex(16)
    log = (root / "jupyter.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_PLATFORM_DIRS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
         "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
         f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={root / '.ws'}",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        for _ in range(1000):  # readiness probe of the server, bounded in count and time
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {(root / 'jupyter.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("jupyter lab did not answer /api/status") from None
                time.sleep(0.2)
        out = root / "screenshots"
        out.mkdir()
        yield Lab(url, token, root, out)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
        log.close()


@contextlib.contextmanager
def chromium() -> Iterator[object]:
    """Headless Chromium (``CHROMIUM``), closed on the way out."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@contextlib.contextmanager
def new_page(browser: object) -> Iterator[object]:
    """A page of its own context (1400 × 1000), closed on the way out."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    p = context.new_page()
    p.set_default_timeout(60_000)
    try:
        yield p
    finally:
        context.close()
