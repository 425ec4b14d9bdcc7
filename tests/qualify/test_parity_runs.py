"""Parity campaigns on a short contiguous window: processes, digests, differences, evidence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from parity_specs import MOON, canonical_report, report_digest, row, spec_data

from workbench.executors.virtual import simulate
from workbench.qualify import UNSTABLE, apply_capacity, load_spec, parity, propose_capacity
from workbench.qualify.diff import first_path
from workbench.qualify.runner import cores, judge_row, judge_side, stop_after
from workbench.qualify.sides import repo_root


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(repo_root()), *args], capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()


def test_the_helper_finds_the_edge_and_a_roomy_row_is_refused_as_unexercised(write_spec, tmp_path):
    """The capacity helper finds num_blocks with 1-3 preemptions for the single engine and
    an attention-DP row; written into the spec (both sides alike) those rows qualify: each
    side stable over two processes, equal, every check passed. The same engine with room to
    spare has equal digests too, and is refused: zero preemptions, the edge not exercised."""
    data = spec_data([row("single"), row("dp2", workers=2, dp=2, dp_placement="round-robin"),
                      row("roomy")])
    spec = load_spec(write_spec(data))
    for name in ("single", "dp2"):
        found = propose_capacity(spec, name)
        assert found["to"] is not None and found["to"] < found["from"], found
        assert 1 <= found["preemptions"] <= 3
        assert len(found["probes"]) <= 24
        data = apply_capacity(data, name, "num_blocks", found["to"])
    result = parity(write_spec(data, "edge.json"), tmp_path / "out")
    rows = {r["name"]: r for r in result["rows"]}
    for name in ("single", "dp2"):
        r = rows[name]
        assert r["qualified"], r["verdict"]
        assert r["baseline"]["stable"] and r["candidate"]["stable"] and r["equal"]
        pre = r["baseline"]["evidence"]["checks"]["preemptions"]
        assert pre["status"] == "pass" and 1 <= pre["figure"] <= 3
    spread = rows["dp2"]["baseline"]["evidence"]["checks"]["spread"]
    assert spread["status"] == "pass" and sorted(spread["figure"]) == ["0.0", "0.1", "1.0", "1.1"]
    roomy = rows["roomy"]
    assert roomy["equal"] and not roomy["qualified"]
    check = roomy["baseline"]["evidence"]["checks"]["preemptions"]
    assert check["figure"] == 0 and "not exercised" in check["rule"]
    assert "evidence fails (preemptions)" in roomy["verdict"]
    assert not result["qualified"]
    # four runs per row, each its own process; pairs on disjoint cores where there are two
    for r in result["rows"]:
        runs = r["baseline"]["runs"] + r["candidate"]["runs"]
        assert len({x["pid"] for x in runs}) == 4
        if len(cores()) >= 2:
            assert {x["affinity"][0] for x in r["baseline"]["runs"]} == set(cores()[:2])
            for k in range(2):
                assert r["baseline"]["runs"][k]["affinity"] != r["candidate"]["runs"][k]["affinity"]
    stored = json.loads((tmp_path / "out" / "parity.json").read_text())
    assert stored["rows"][0]["name"] == "single" and stored["excluded"]["manifest.run_id"]


def test_a_changed_engine_knob_is_found_at_the_first_differing_request(write_spec, tmp_path):
    data = spec_data([row("single", {"num_blocks": 20000})],
                     candidate={"engine": {"max_num_batched_tokens": 2048}, "label": "cand"})
    out = tmp_path / "out"
    result = parity(write_spec(data), out, keep_runs=True)
    r = result["rows"][0]
    assert r["baseline"]["stable"] and r["candidate"]["stable"] and r["equal"] is False
    assert not r["qualified"] and "digests differ at request" in r["verdict"]
    first = r["first_difference"]["request"]
    assert "manifest.engine.max_num_batched_tokens" in r["first_difference"]["sections"]["manifest"]
    base = orjson.loads((out / "runs" / "single.baseline.1.report.json").read_bytes())
    cand = orjson.loads((out / "runs" / "single.candidate.1.report.json").read_bytes())
    order = sorted(base["records"], key=lambda x: (x["dispatch_ns"], x["request_id"]))
    by_id = {x["request_id"]: x for x in cand["records"]}
    for earlier in order[: first["index"]]:  # every request before it is the same
        assert earlier == by_id[earlier["request_id"]]
    rec = order[first["index"]]
    assert rec["request_id"] == first["request_id"]
    found = first_path(rec, by_id[rec["request_id"]])
    assert found is not None and found[0] == first["field"]


def test_two_revisions_of_this_project_each_in_its_own_checkout(write_spec, tmp_path):
    """The last two commits, each checked out by git into a folder of its own: the
    revision is read back from the checkout, each side is stable over two processes, the
    children imported their own tree, and the candidate (HEAD) gives this tree's digest
    when the tree is HEAD."""
    try:
        head, prev = _git("rev-parse", "HEAD"), _git("rev-parse", "HEAD~1")
    except subprocess.CalledProcessError:
        pytest.skip("no HEAD~1 (a shallow clone)")
    data = spec_data([row("single", {"num_blocks": 20000})], baseline={"revision": "HEAD~1"},
                     candidate={"revision": "HEAD"}, max_items=60)
    before = _git("worktree", "list")
    result = parity(write_spec(data), tmp_path / "out")
    assert _git("worktree", "list") == before  # the checkouts are gone
    sides = result["sides"]
    assert (sides["baseline"]["commit"], sides["candidate"]["commit"]) == (prev, head)
    assert sides["baseline"]["checkout"] == "git worktree (temporary)"
    r = result["rows"][0]
    assert r["baseline"]["stable"] and r["candidate"]["stable"]
    assert r["baseline"]["evidence"]["checks"]["virtual_time"]["status"] == "pass"
    if not _git("status", "--porcelain", "--untracked-files=no"):
        spec = load_spec(write_spec(data))
        cfg = spec.run_config(spec.rows[0], spec.candidate)
        assert r["candidate"]["digest"] == report_digest(canonical_report(simulate(cfg)))


def test_a_side_whose_two_runs_differ_is_unstable_and_says_where():
    """Two real runs that differ (a per-run token salt, which salts every prompt): the side
    is 'unstable: stop', no digest, and the difference is located."""
    cfg = {"trace": {"path": str(MOON), "offset": 100, "max_items": 20},
           "backend": {"token_salt": "run"}}
    reports = [canonical_report(simulate(cfg)) for _ in range(2)]
    metas = [{"digest": report_digest(rep), "pid": i} for i, rep in enumerate(reports)]
    assert metas[0]["digest"] != metas[1]["digest"]
    side = judge_side(metas, reports, (1, 3))
    assert side["stable"] is False and side["digest"] == UNSTABLE
    assert side["run_difference"]["request"]["index"] == 0
    stable = judge_side([metas[0], metas[0]], [reports[0], reports[0]], (1, 3))
    row = judge_row({"name": "salted", "baseline": stable, "candidate": side},
                    {"baseline": reports[0], "candidate": reports[0]})
    assert row["equal"] is None and not row["qualified"]
    assert row["verdict"] == "not qualified: the candidate is unstable: stop (its two runs differ)"
    assert stop_after(row, ["next"]) == {"after": "salted", "unstable": ["candidate"],
                                         "not_run": ["next"]}
    assert stop_after({"name": "x", "baseline": stable, "candidate": stable}, []) is None


def test_the_command_runs_a_spec_and_exits_1_when_a_row_is_not_qualified(write_spec, tmp_path):
    path = write_spec(spec_data([row("roomy")], max_items=30))
    out = tmp_path / "p"
    proc = subprocess.run([sys.executable, "-m", "workbench", "parity", str(path), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert ("roomy: not qualified: equal digests, but the evidence fails (preemptions)"
            in proc.stdout)
    assert "evidence (baseline): preemptions fail (0)" in proc.stdout
    assert "the digest leaves out exactly" in proc.stdout and "manifest.run_id" in proc.stdout
    assert Path(out / "parity.json").is_file()


def test_an_unknown_revision_is_refused_before_any_process(write_spec, tmp_path):
    from workbench.errors import ConfigError

    data = spec_data([row("single")], baseline={"revision": "no-such-revision-xyz"},
                     candidate={"revision": "HEAD"})
    before = _git("worktree", "list")
    with pytest.raises(ConfigError, match="no-such-revision-xyz"):
        parity(write_spec(data), tmp_path / "out")
    assert _git("worktree", "list") == before
    assert not (tmp_path / "out" / "parity.json").exists()


def test_the_helper_grows_a_flooded_row_to_its_calm_edge(write_spec):
    """20,000 blocks flood this window with preemptions (a request preempted several
    times): the helper doubles, then bisects to the smallest calm value, and says so."""
    spec = load_spec(write_spec(spec_data([row("tight", {"num_blocks": 20000})], max_items=200)))
    found = propose_capacity(spec, "tight")
    first = found["probes"][0]
    assert first["value"] == 20000 and first["preemptions"] > 3 and first["most_per_request"] > 1
    assert found["to"] is not None and found["to"] > 20000 and found["change"] > 0
    at = next(p for p in found["probes"] if p["value"] == found["to"])
    assert 1 <= at["preemptions"] <= 3 and at["most_per_request"] == 1 and at["not_ok"] == 0


def test_an_output_folder_that_cannot_be_made_fails_before_any_process(write_spec, tmp_path):
    from workbench.errors import OutputWriteError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputWriteError, match="cannot write"):
        parity(write_spec(spec_data([row("single")])), blocker / "out")


def test_links_planted_in_the_output_are_refused_before_any_process(write_spec, tmp_path):
    """`parity -o OUT` with OUT/parity.json a link to a file outside OUT, and `--write` a
    link: refused by name before any run (issue 43's rule, docs/security.md), the outside
    file untouched; a linked OUT/runs (keep_runs) the same."""
    from workbench.safe_write import LinkRefused

    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / "parity.json").symlink_to(outside)
    spec = write_spec(spec_data([row("single")]))
    with pytest.raises(LinkRefused, match=r"parity\.json"):
        parity(spec, out)
    (out / "parity.json").unlink()
    (out / "runs").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(LinkRefused, match="runs"):
        parity(spec, out, keep_runs=True)
    link = tmp_path / "new.json"
    link.symlink_to(outside)
    proc = subprocess.run([sys.executable, "-m", "workbench", "parity", str(spec),
                           "--propose-capacity", "single", "--write", str(link)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "new.json" in proc.stderr and "Traceback" not in proc.stderr
    assert outside.read_text() == "keep me"
