"""ControlConfig takes a gain table (or predictor, or the path of one) and a domain key."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from closedloop.agent import ControlConfig
from closedloop.agent._control import ControllerBank
from closedloop.control import GainPredictor, Gains, GainTable
from closedloop.feedback import MemoryStore

FAST = Gains(kp=1.6, ki=0.2, kd=0.0, eso_window=6, eso_min_samples=3)
TABLE = GainTable({"default": Gains(), "flight": FAST}, created_at=1000.0)


def test_the_domain_row_replaces_the_gains_and_the_eso_bandwidth() -> None:
    config = ControlConfig(gains=TABLE, gain_key="flight", gain_clock=lambda: 1001.0)
    assert (config.kp, config.ki, config.kd) == (1.6, 0.2, 0.0)
    assert (config.eso_window, config.eso_min_samples) == (6, 3)
    assert config.gain_source == "table:flight" and config.gain_warning is None
    assert config.fixed_gains == Gains()
    assert config.new_pid().tunings == (1.6, 0.2, 0.0)


async def test_the_bank_runs_the_table_gains() -> None:
    config = ControlConfig(gains=TABLE, gain_key="flight", warm_start=False)
    bank = ControllerBank(config, MemoryStore())
    _u, (p, i, _d) = await bank.update("search_flights", 0.5)
    assert p == pytest.approx(1.6 * 0.5) and i == pytest.approx(0.2 * 0.5)


def test_an_unknown_domain_gets_the_default_row() -> None:
    config = ControlConfig(kp=0.1, gains=TABLE, gain_key="weather")
    assert config.kp == 0.8 and config.gain_source == "table:default"


def test_a_table_read_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "gains.json"
    path.write_text(TABLE.to_json(), encoding="utf-8")
    config = ControlConfig(gains=path, gain_key="flight")
    assert config.kp == 1.6 and config.gain_warning is None


def test_a_missing_file_falls_back_to_the_fixed_gains_with_a_warning(tmp_path: Path) -> None:
    config = ControlConfig(kp=0.5, gains=tmp_path / "nope.json", gain_key="flight")
    assert (config.kp, config.eso_window) == (0.5, 15)
    assert config.gain_source == "fixed"
    assert config.gain_warning is not None and "nope.json" in config.gain_warning


def test_an_out_of_range_file_falls_back_with_a_warning(tmp_path: Path) -> None:
    data = json.loads(TABLE.to_json())
    data["rows"]["flight"]["ki"] = 7.0
    path = tmp_path / "gains.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    config = ControlConfig(kp=0.5, gains=path, gain_key="flight")
    assert config.kp == 0.5 and config.gain_source == "fixed"
    assert config.gain_warning is not None and "ki" in config.gain_warning


def test_a_stale_table_falls_back_with_a_warning() -> None:
    config = ControlConfig(
        kp=0.5, gains=TABLE, gain_key="flight", gain_max_age_s=60.0, gain_clock=lambda: 2000.0
    )
    assert config.kp == 0.5 and config.gain_warning is not None
    assert "stale" in config.gain_warning


def test_replace_keeps_the_fixed_gains_as_the_fallback() -> None:
    config = ControlConfig(kp=0.5, gains=TABLE, gain_key="flight", gain_clock=lambda: 1001.0)
    assert config.kp == 1.6
    stale = dataclasses.replace(config, gain_max_age_s=1.0, gain_clock=lambda: 5000.0)
    assert stale.kp == 0.5 and stale.gain_source == "fixed"


def test_a_predictor_file_answers_by_features(tmp_path: Path) -> None:
    predictor = GainPredictor(
        (Gains(), FAST), ((0.0,), (1.0,)), ((1.0, 0.0), (0.0, 1.0)), Gains(), 0.0, k=1
    )
    path = tmp_path / "predictor.json"
    path.write_text(predictor.to_json(), encoding="utf-8")
    near_fast = ControlConfig(gains=path, gain_features=(0.9,))
    near_fixed = ControlConfig(gains=path, gain_features=(0.1,))
    assert near_fast.kp == 1.6 and near_fast.gain_source == "predictor"
    assert near_fixed.kp == 0.8


def test_a_prior_must_be_a_unit_value() -> None:
    from closedloop import ConfigurationError

    with pytest.raises(ConfigurationError, match="prior_f_est"):
        ControlConfig(prior_f_est=1.5)
