"""``parity``: a frozen spec on a baseline and a candidate, twice each, in separate processes.

Each run is a child process (``child.py``) on its side's tree, bounded in memory and
time, the two sides' runs pinned to disjoint cores where there are two; an unstable side
stops the campaign. A row is **qualified** when both sides are stable, equal and pass
their evidence (docs/parity.md, "Runs, digests and differences").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import ConfigError, OutputWriteError
from workbench.qualify.diff import first_difference
from workbench.qualify.evidence import evidence
from workbench.qualify.sides import Tree, checkout, this_tree
from workbench.qualify.spec import RUNS, ParitySpec, Row, Side, load_spec
from workbench.safe_write import LinkRefused, make_dir, open_fd, write_file

UNSTABLE = "unstable: stop"
RESULT_FILE = "parity.json"
RUNS_DIR = "runs"
CHILD = Path(__file__).with_name("child.py")  # run as a script on the side's tree

# the parity notebook's example (this tree against itself, one knob changed)
EXAMPLE_SPEC = Path(__file__).resolve().parents[1] / "data" / "parity" / "example.yaml"


class RunFailed(Exception):
    """A child process failed, timed out or imported the wrong tree."""


def cores() -> list[int]:
    """The cores this process may run on (``os.sched_getaffinity``), sorted."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return []


def _launch(tree: Tree, config: dict[str, Any], work: Path, tag: str, core: int | None,
            spec: ParitySpec) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:  # fmt: skip
    job = {"config": config, "core": core, "memory_mb": spec.memory_mb,
           "report": str(work / f"{tag}.report.json"), "meta": str(work / f"{tag}.meta.json")}
    job_path = work / f"{tag}.job.json"
    write_file(job_path, json.dumps(job))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(tree.root)
    env["PYTHONHASHSEED"] = str(zlib.crc32(tag.encode()) % 4096)  # differs by run and side
    err = os.fdopen(open_fd(work / f"{tag}.stderr"), "wb")
    proc = subprocess.Popen(  # -P: the script's folder is not on sys.path; -s: no user site
        [sys.executable, "-P", "-s", str(CHILD), str(job_path)],
        cwd=str(work), env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    err.close()
    return proc, job


def _finish(proc: subprocess.Popen[bytes], job: dict[str, Any], tree: Tree, tag: str,
            deadline: float, work: Path) -> dict[str, Any]:  # fmt: skip
    try:
        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise RunFailed(f"{tag}: over the spec's timeout; killed") from None
    if proc.returncode:
        tail = (work / f"{tag}.stderr").read_text(errors="replace").strip().splitlines()[-5:]
        raise RunFailed(f"{tag}: exit {proc.returncode}: {' | '.join(tail)}")
    meta: dict[str, Any] = json.loads(Path(job["meta"]).read_text())
    imported = Path(meta["workbench_file"]).resolve()
    if tree.root.resolve() not in imported.parents:
        raise RunFailed(f"{tag}: imported {imported}, not the side's tree {tree.root}")
    meta["report_path"] = job["report"]
    return meta


def run_row(spec: ParitySpec, row: Row, trees: dict[str, Tree], work: Path,
            sides: dict[str, Side]) -> dict[str, Any]:  # fmt: skip
    """Both sides of one row, ``RUNS`` times each (module doc)."""
    avail = cores()
    pinned = len(avail) >= 2
    metas: dict[str, list[dict[str, Any]]] = {"baseline": [], "candidate": []}
    errors: dict[str, str] = {}
    for k in range(RUNS):
        deadline = time.monotonic() + spec.timeout_s  # each pair of runs
        order = ["baseline", "candidate"]
        procs = []
        for i, name in enumerate(order):
            core = avail[(i + k) % 2] if pinned else None  # swapped on the second pair
            tag = f"{row.name}.{name}.{k + 1}"
            config = spec.run_config(row, sides[name])
            procs.append((name, tag, *_launch(trees[name], config, work, tag, core, spec)))
        for name, tag, proc, job in procs:
            try:
                meta = _finish(proc, job, trees[name], tag, deadline, work)
                meta["core"] = job["core"]
                metas[name].append(meta)
            except RunFailed as exc:
                errors.setdefault(name, str(exc))
    out: dict[str, Any] = {"name": row.name, "knobs": row.knobs(), "bounds": list(row.preemptions),
                           "pinned": pinned}
    reports: dict[str, dict[str, Any]] = {}
    for name in ("baseline", "candidate"):
        runs = metas[name]
        loaded = [] if name in errors else [
            orjson.loads(Path(m["report_path"]).read_bytes()) for m in runs]
        out[name] = judge_side(runs, loaded, row.preemptions, errors.get(name))
        if loaded:
            reports[name] = loaded[0]
    return judge_row(out, reports)


RUN_FIELDS = ("digest", "cpu_s", "wall_s", "max_rss_mb", "core", "affinity", "requests", "pid")


def judge_side(runs: list[dict[str, Any]], reports: list[dict[str, Any]],
               bounds: tuple[int, int], error: str | None = None) -> dict[str, Any]:  # fmt: skip
    """One side of a row from its runs' metas and canonical reports: its digest (or
    ``UNSTABLE`` and where its runs differ) and the first run's evidence."""
    side: dict[str, Any] = {"runs": [{k: m.get(k) for k in RUN_FIELDS} for m in runs]}
    if runs:
        side["excluded"] = runs[0].get("excluded")
    if error is not None or len(reports) < RUNS:
        side.update(digest=None, stable=False, error=error or "a run is missing")
        return side
    stable = len({m["digest"] for m in runs}) == 1
    side.update(digest=runs[0]["digest"] if stable else UNSTABLE, stable=stable)
    side["evidence"] = evidence(reports[0], bounds)
    if not stable:
        side["run_difference"] = first_difference(reports[0], reports[1])
    return side


def judge_row(out: dict[str, Any], reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Equal or not, where first different, evidence, qualified, the verdict."""
    b, c = out["baseline"], out["candidate"]
    both = b.get("stable") and c.get("stable")
    out["equal"] = (b["digest"] == c["digest"]) if both else None
    out["first_difference"] = (first_difference(reports["baseline"], reports["candidate"])
                               if both and not out["equal"] else None)
    passed = all(s.get("evidence", {}).get("passed") for s in (b, c))
    out["evidence_passed"] = passed
    out["qualified"] = bool(both and out["equal"] and passed)
    out["verdict"] = _verdict(out)
    return out


def stop_after(row: dict[str, Any], rest: list[str]) -> dict[str, Any] | None:
    """The campaign's stop after ``row`` when a side of it is unstable (``rest``: the rows
    not run then), else None."""
    unstable = [n for n in ("baseline", "candidate") if row[n].get("digest") == UNSTABLE]
    return {"after": row["name"], "unstable": unstable, "not_run": rest} if unstable else None


def _verdict(row: dict[str, Any]) -> str:
    b, c = row["baseline"], row["candidate"]
    for name, side in (("baseline", b), ("candidate", c)):
        if side.get("error"):
            return f"not qualified: the {name} did not run ({side['error']})"
        if not side["stable"]:
            return f"not qualified: the {name} is {UNSTABLE} (its two runs differ)"
    if not row["equal"]:
        diff = row["first_difference"] or {}
        first = diff.get("request")
        if first:
            where = f" at request {first['request_id']} (#{first['index']}), field {first['field']}"
        else:  # every record the same: the manifest (a knob), the summary or the timeline
            sections = diff.get("sections") or {}
            paths = [p for part in sections.values() for p in part[:1]]
            where = f": no record differs; first {', '.join(paths)}" if paths else ""
        return f"not qualified: the digests differ{where}"
    if not row["evidence_passed"]:
        failed = sorted(set(b["evidence"]["failed"]) | set(c["evidence"]["failed"]))
        return f"not qualified: equal digests, but the evidence fails ({', '.join(failed)})"
    return "qualified: stable, equal, every path exercised"


def parity(spec: ParitySpec | str | Path, out_dir: str | Path | None = None, *,
           keep_runs: bool = False, build_python: str | None = None,
           progress: Callable[[str], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Run a parity campaign, written to ``out_dir/parity.json`` when given (``keep_runs``:
    every run's files under ``out_dir/runs/``); ``build_python``: ``sides.checkout``. Bad
    specs raise ``ConfigError`` before any process starts."""
    if not isinstance(spec, ParitySpec):
        spec = load_spec(spec)
    if keep_runs and out_dir is None:
        raise ConfigError("keep_runs needs an out_dir")
    if out_dir is not None:  # before any process: a folder that cannot be made fails now
        try:
            make_dir(out_dir, parents=True)
        except OSError as exc:
            raise OutputWriteError(out_dir, exc) from None
        if (Path(out_dir) / RESULT_FILE).is_symlink():  # refused now, not after the runs
            raise LinkRefused(Path(out_dir) / RESULT_FILE)
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    trees: dict[str, Tree] = {}
    sides = {"baseline": spec.baseline, "candidate": spec.candidate}
    with tempfile.TemporaryDirectory(prefix="wb-parity-") as tmp:
        work = Path(tmp)
        if keep_runs:
            work = make_dir(Path(out_dir or tmp) / RUNS_DIR)
        try:
            for name, side in sides.items():
                trees[name] = (checkout(side.label, side.revision, build_python)
                               if side.revision is not None else this_tree(side.label))
                say(f"{name}: {trees[name].commit[:12]} ({trees[name].root})")
            rows: list[dict[str, Any]] = []
            stopped = None
            for row in spec.rows:
                rows.append(run_row(spec, row, trees, work, sides))
                say(f"{row.name}: {rows[-1]['verdict']}")
                stopped = stop_after(rows[-1], [r.name for r in spec.rows[len(rows):]])
                if stopped:  # a side that is not deterministic: nothing further can qualify
                    say(f"stopped: {', '.join(stopped['unstable'])} {UNSTABLE} on {row.name}")
                    break
        finally:
            for tree in trees.values():
                tree.release()
    result = {
        "spec": spec.to_dict(),
        "sides": {n: {**trees[n].to_dict(), "side": {"kind": s.kind, "revision": s.revision,
                                                      "engine": s.engine}}
                  for n, s in sides.items()},
        "excluded": next((r[n]["excluded"] for r in rows for n in ("baseline", "candidate")
                          if r[n].get("excluded")), None),
        "rows": rows,
        "qualified": stopped is None and all(r["qualified"] for r in rows),
        "stopped": stopped,
        "wall_s": round(time.monotonic() - t0, 3),
        "cores": cores(),
    }  # fmt: skip
    if out_dir is not None:
        out = Path(out_dir)
        try:
            make_dir(out, parents=True)
            write_file(out / RESULT_FILE, orjson.dumps(result, option=orjson.OPT_INDENT_2))
        except OSError as exc:
            raise OutputWriteError(out / RESULT_FILE, exc) from None
    return result


def load_result(path: str | Path | None = None) -> dict[str, Any]:
    """A stored campaign (``DIR`` or ``DIR/parity.json``); without a path, the bundled
    example campaign run now (what the parity notebook shows by default)."""
    if not path:
        return parity(EXAMPLE_SPEC)
    p = Path(path)
    if p.is_dir():
        p = p / RESULT_FILE
    if not p.is_file():
        raise ConfigError(f"{p}: no parity result ({RESULT_FILE}, from workbench parity)")
    loaded: dict[str, Any] = orjson.loads(p.read_bytes())
    return loaded
