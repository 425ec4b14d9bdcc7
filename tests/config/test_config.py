"""RunConfig construction and every cross-axis rejection of docs/axes.md."""

import json

import pytest

from workbench.config import RunConfig, available
from workbench.errors import ConfigError
from workbench.records import Round, Unit, Workload


def _cfg(**d):
    return RunConfig.from_dict({"trace": "t.csv", **d})


def test_from_dict_accepts_strings_and_mappings_and_round_trips():
    cfg = RunConfig.from_dict(
        {"trace": {"path": "t.csv", "max_items": 3}, "context": "monotonic",
         "arrival": {"mode": "saturated", "max_concurrency": 4}, "backend": "vllm-tokens",
         "target": "http://127.0.0.1:1", "seed": 7}
    )
    assert cfg.trace.max_items == 3 and cfg.context.policy_name == "prefix-preserving"
    assert cfg.arrival.max_concurrency == 4 and cfg.backend.name == "vllm-tokens"
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


def test_from_file_json_and_yaml(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"trace": "x.csv", "arrival": "saturated"}))
    (tmp_path / "c.yaml").write_text("trace: x.csv\narrival:\n  mode: saturated\n")
    assert RunConfig.from_file(tmp_path / "c.json") == RunConfig.from_file(tmp_path / "c.yaml")


@pytest.mark.parametrize(
    ("d", "message"),
    [
        ({"arrival": {"mode": "saturated", "rate": 2}}, "cannot be used with mode 'saturated'"),
        ({"arrival": {"mode": "closed-loop", "rate": 2, "max_concurrency": 2}},
         "cannot be used with mode 'closed-loop'"),
        ({"arrival": {"max_concurrency": 0}},
         r"arrival.max_concurrency: expected an integer in \[1, "),
        ({"context": "prefix-preserving", "backend": "openai-chat"},
         "cannot return"),
        ({"arrival": "warp"}, "arrival.mode 'warp' is unknown"),
        ({"backend": "grpc"}, "unknown backend 'grpc'"),
        ({"context": "lru"}, "unknown context policy 'lru'"),
        ({"arrival": {"mode": "closed-loop"}}, "needs max_concurrency"),
        ({"arrival": {"output_len": "fixed:0"}}, "output_len"),
        ({"bogus": 1}, "unknown config key"),
        ({"arrival": {"speed": 1}}, "unknown arrival option"),
    ],
)
def test_rejections_say_what_to_change(d, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(**d)


def _workload(kind, hash_ids=None):
    r = Round("r", "u", 0, 0.0, 0, 10, 5, hash_ids=hash_ids)
    return Workload((Unit("u", kind, 0.0, (r,)),), fmt="x")


def test_policy_rejected_for_independent_and_hash_id_traces():
    cfg = _cfg(context="trace-reported")
    with pytest.raises(ConfigError, match="only independent requests"):
        cfg.check_workload(_workload("independent"))
    with pytest.raises(ConfigError, match="block hash ids"):
        cfg.check_workload(_workload("session", hash_ids=(1,)))
    _cfg().check_workload(_workload("independent"))  # no policy given: fine


def test_available_lists_every_axis():
    names = available()
    assert "prefix-preserving" in names["context_policies"]
    assert names["arrival_modes"] == ["trace-timed", "saturated", "closed-loop", "poisson",
                                      "gamma", "constant"]


def test_replace_dotted():
    cfg = _cfg().replace(**{"arrival.rate": 2.0})
    assert cfg.arrival.rate == 2.0


def test_records_are_not_batched_by_default():
    """docs/run-directory.md: a record is flushed when its request ends; batching is an opt-in
    speed knob."""
    assert RunConfig.from_dict({"trace": "x"}).executor.record_flush_ms is None
