"""The qualification report: the parity notebook rendered over a stored campaign."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from parity_specs import row, spec_data

from workbench.qualify import parity


def _text(page: str) -> str:
    page = re.sub(r"<style.*?</style>", " ", page, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


def test_workbench_report_renders_a_campaign_with_rows_evidence_and_differences(
        write_spec, tmp_path):
    data = spec_data([row("roomy")], max_items=30,
                     candidate={"engine": {"max_num_batched_tokens": 2048}, "label": "cand"})
    camp = tmp_path / "camp"
    result = parity(write_spec(data), camp)
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "workbench", "report", str(camp), "-o", str(out),
                           "--run-id", "parity-test"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = out / "parity-test"
    page = _text((report / "report.html").read_text())
    assert "NOT QUALIFIED (WARNING): 0 of 1 rows qualified · base → cand" in page
    r = result["rows"][0]
    first = r["first_difference"]["request"]
    assert r["baseline"]["digest"][:16] in page and r["candidate"]["digest"][:16] in page
    assert f"{first['request_id']} (#{first['index']})" in page
    evidence = (report / "tables" / "evidence.csv").read_text().splitlines()
    assert len(evidence) == 1 + 2 * 6  # both sides, six checks each
    assert any(",roomy,baseline,preemptions,fail,0," in line and "not exercised" in line
               for line in evidence)
    excluded = json.loads((report / "tables" / "excluded.json").read_text())
    assert "manifest.run_id" in excluded["index"]
    assert json.loads((report / "report.json").read_text())["notebook"].endswith("parity.ipynb")


def test_the_notebook_given_no_campaign_runs_the_bundled_example():
    """parity.ipynb with `parity_dir` empty (Run All in JupyterLab): `load_result()` runs
    the bundled example spec now. Its single row sits at its capacity edge on the
    baseline (1-3 preemptions), `roomy` is refused as unexercised, and the candidate's
    changed prefill budget is found at the first request."""
    from workbench.qualify import EXAMPLE_SPEC, load_result

    assert EXAMPLE_SPEC.is_file()
    result = load_result()
    assert result["spec"]["name"] == "example" and not result["qualified"]
    rows = {r["name"]: r for r in result["rows"]}
    assert set(rows) == {"single", "roomy"}
    single = rows["single"]["baseline"]["evidence"]["checks"]["preemptions"]
    roomy = rows["roomy"]["baseline"]["evidence"]["checks"]["preemptions"]
    assert single["status"] == "pass" and 1 <= single["figure"] <= 3, single
    assert roomy["status"] == "fail" and roomy["figure"] == 0, roomy
    for r in rows.values():
        assert r["baseline"]["stable"] and r["candidate"]["stable"] and not r["equal"]
        assert r["first_difference"]["request"]["index"] == 0
