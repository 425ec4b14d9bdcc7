"""Every RunConfig field is type- and range-checked up front, the message naming its path.

The property test throws random values of the wrong type or out of range at random
fields: the only thing that may come out is a ``ConfigError`` naming that field.
"""

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.config import _SECTIONS, RunConfig
from workbench.errors import ConfigError
from workbench.ranges import RANGES
from workbench.replay.prepare import coerce_config


@pytest.mark.parametrize(("d", "message"), [
    ({"arrival": {"max_concurrency": "16"}},
     "arrival.max_concurrency: expected an integer in [1, 1000000] or null, got '16' (str)"),
    ({"arrival": {"max_concurrency": 1.5}}, "arrival.max_concurrency: expected an integer"),
    ({"arrival": {"max_concurrency": 1e20}}, "got 1e+20 (float)"),
    ({"arrival": {"max_concurrency": True}}, "got True (bool)"),
    ({"arrival": {"max_concurrency": 10**20}}, "got 100000000000000000000 (int)"),
    ({"arrival": {"rate": math.nan}}, "arrival.rate: expected a finite number"),
    ({"arrival": {"rate": math.inf}}, "arrival.rate: expected a finite number"),
    ({"arrival": {"tool_wait_scale": math.nan}}, "arrival.tool_wait_scale"),
    ({"arrival": {"request_timeout_s": -1}}, "arrival.request_timeout_s"),
    ({"arrival": {"stream_idle_timeout_s": 0}}, "arrival.stream_idle_timeout_s"),
    ({"arrival": {"warmup": "3"}}, "arrival.warmup"),
    ({"context": {"max_model_len": 0}}, "context.max_model_len"),
    ({"context": {"max_model_len": -4096}}, "context.max_model_len"),
    ({"target": "ftp://host:8000"}, "target.url: scheme 'ftp'"),
    ({"target": "http://[::1"}, "target.url: 'http://[::1' is not a valid URL"),
    ({"target": "http://127.0.0.1:99999"}, "Port out of range"),
    ({"target": "http://127.0.0.1:"}, "empty or zero port"),
    ({"target": "http://:8000"}, "has no host"),
    ({"target": {"url": "sim", "engine": {"block_size": "16"}}}, "target.engine.block_size"),
    ({"target": {"url": "sim", "engine": {"error_rate": 1.5}}}, "target.engine.error_rate"),
    ({"target": {"url": "sim", "engine": {"zero_cost": "yes"}}}, "target.engine.zero_cost"),
    ({"target": {"url": "sim", "engine": {"nope": 1}}}, "target.engine: unknown engine knob"),
    ({"backend": {"name": "openai", "options": {"temperature": "hot"}}},
     "backend.options.temperature"),
    ({"slo": {"ttft_ms": -5}}, "slo: expected a mapping of names to positive"),
    ({"slo": {"ttft_ms": math.nan}}, "slo: expected"),
    ({"slo": {"ttfb_ms": 100}}, "slo: unknown metric ['ttfb_ms']"),
    ({"executor": {"workers": 0}}, "executor.workers"),
    ({"seed": "0"}, "seed: expected an integer"),
    ({"dry_run": "no"}, "dry_run: expected true or false"),
    ({"run_id": "../../../../x"}, "run_id: '../../../../x' cannot name a run directory"),
    ({"run_id": "a/b"}, "cannot name a run directory"),
    ({"run_id": ".."}, "cannot name a run directory"),
])
def test_each_bad_value_names_its_field(d, message):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"trace": "t.csv", **d})
    assert message in str(info.value)


def test_credentials_in_a_bad_url_are_not_echoed():
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"target": "http://user:s3cretkey@host:99999"})
    assert "s3cretkey" not in str(info.value)


def test_out_dir_that_is_a_file_or_under_a_file_is_refused_before_the_run(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for out in (f, f / "sub"):
        with pytest.raises(ConfigError, match="out_dir"):
            coerce_config({"trace": "t.csv", "out_dir": str(out)})
    coerce_config({"trace": "t.csv", "out_dir": str(tmp_path / "new" / "dir")})  # creatable


def test_good_values_pass():
    cfg = RunConfig.from_dict({
        "trace": "t.csv", "arrival": {"max_concurrency": 16, "rate": 2, "request_timeout_s": 30},
        "context": {"max_model_len": 4096}, "target": "https://h.example:8443/root",
        "slo": {"ttft_ms": 200, "tpot_ms": 50.5}, "seed": 7,
        "executor": {"keep_records": "auto", "pace_ms": 0},
    })
    assert cfg.arrival.max_concurrency == 16


# ------------------------------------------------------------------ property test
def _fields() -> list[tuple[str, str]]:
    out = [(key, f.name) for key, (cls, _) in _SECTIONS.items() for f in dataclasses.fields(cls)]
    return out + [("", name) for name in ("seed", "slo", "dry_run", "run_id", "out_dir")]


BAD_VALUES = st.one_of(
    st.text(max_size=12), st.booleans(), st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10**30, max_value=10**30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(_fields()), value=BAD_VALUES)
def test_random_values_raise_config_error_or_are_valid(field, value):
    section, name = field
    d: dict = {"trace": "t.csv"}
    if section:
        d[section] = {**({"path": "t.csv"} if section == "trace" else {}), name: value}
    else:
        d[name] = value
    path = f"{section}.{name}" if section else name
    try:
        cfg = RunConfig.from_dict(d)
    except ConfigError as exc:  # the only failure allowed; it names the field's section
        assert (section or name) in str(exc), (path, value, str(exc))
        return
    except Exception as exc:
        raise AssertionError(f"{path}={value!r} raised {type(exc).__name__}: {exc}") from exc
    # accepted: then it is of the field's type and inside its documented range
    got = getattr(getattr(cfg, section), name) if section else getattr(cfg, name)
    rng = RANGES.get(path)
    if rng is not None and isinstance(got, int | float) and not isinstance(got, bool):
        assert math.isfinite(got) and rng.holds(got), (path, got)
    if isinstance(got, float):
        assert math.isfinite(got), (path, got)


def test_the_bounds_are_documented():
    doc = (Path(__file__).parents[2] / "docs" / "config-bounds.md").read_text()
    for path in RANGES:
        assert f"`{path}`" in doc, path
