"""A run never reports ``completed`` with planned rounds missing.

Rounds the context guard skips, rounds after it (the session ends), rounds a
session never reached after an error, and a round whose request could not even
be built are all visible: as records (``skipped`` / ``error``) and in the
manifest (``status: partial`` and a ``completion`` block with the counts).
"""

from __future__ import annotations

import orjson
import pytest

from workbench.data import path as data_path
from workbench.executors.dispatch import run
from workbench.executors.virtual import simulate
from workbench.replay.rounds import RoundMaker

SMALL = str(data_path("tracelab/multi_session_example.csv"))  # 3 sessions, 8 rounds


def _measured(result):
    return [r for r in result.records if not r.warmup]


def test_a_run_that_sent_every_round_is_completed():
    result = simulate({"trace": SMALL})
    c = result.manifest.completion
    assert result.manifest.status == "completed"
    assert c == {"status": "completed", "planned_rounds": 8, "recorded_rounds": 8,
                 "skipped_rounds": 0, "not_sent_rounds": 0}


def test_context_guard_skips_make_the_run_partial_with_counts():
    result = simulate({"trace": SMALL, "context": {"max_model_len": 800}})
    recs = _measured(result)
    skipped = [r for r in recs if r.status == "skipped"]
    c = result.manifest.completion
    assert result.manifest.status == "partial" and c["status"] == "partial"
    assert skipped and c["skipped_rounds"] == len(skipped)
    assert c["recorded_rounds"] == len(recs)
    # the rounds after a guard are never sent: counted, so the numbers add up
    assert c["not_sent_rounds"] == 8 - len(recs) > 0
    life = {d["unit_id"]: d for d in result.lifecycle}
    assert sum(d["rounds_total"] - d["rounds_done"] for d in life.values()) == (
        c["skipped_rounds"] + c["not_sent_rounds"])


def test_live_replay_writes_partial_into_the_manifest_on_disk(tmp_path):
    result = run({"trace": SMALL, "target": "sim", "context": {"max_model_len": 800},
                  "out_dir": str(tmp_path)})
    manifest = orjson.loads((tmp_path / result.run_id / "manifest.json").read_bytes())
    assert manifest["status"] == "partial"
    assert manifest["completion"]["skipped_rounds"] >= 1
    assert not result.cancelled


def test_a_round_that_cannot_be_built_is_an_error_record_not_a_lost_round(monkeypatch):
    real = RoundMaker.prompt

    def prompt(self, run_, k, rp, rec):
        if rp.round.request_id == "session_0_round_000001":
            raise MemoryError("cannot allocate the prompt")
        return real(self, run_, k, rp, rec)

    monkeypatch.setattr(RoundMaker, "prompt", prompt)
    result = simulate({"trace": SMALL})
    by_id = {r.request_id: r for r in _measured(result)}
    bad = by_id["session_0_round_000001"]
    assert bad.status == "error" and "request not built: MemoryError" in bad.error
    assert result.manifest.status == "partial"
    c = result.manifest.completion
    assert c["not_sent_rounds"] == 8 - len(by_id) >= 1  # the rest of session 0
    assert all(r.status == "ok" for rid, r in by_id.items() if rid != bad.request_id)


@pytest.mark.parametrize("stop", [True, False])
def test_rounds_a_session_never_reached_after_an_error_make_the_run_partial(stop, tmp_path):
    cfg = {"trace": SMALL, "target": {"url": "sim", "engine": {"error_rate": 0.5, "seed": 3}},
           "arrival": {"stop_session_on_error": stop}, "out_dir": str(tmp_path)}
    result = run(cfg)
    recs = _measured(result)
    assert any(r.status == "error" for r in recs)
    c = result.manifest.completion
    if stop:
        assert c["not_sent_rounds"] == 8 - len(recs) > 0 and c["status"] == "partial"
    else:  # every round was attempted: errors are recorded, the run is complete
        assert c["not_sent_rounds"] == 0 and c["status"] == "completed"
