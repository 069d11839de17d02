"""The loop's profile window: armed by a running-request count, a fixed number of turns, then
an op table and a Chrome trace on disk, once."""

import gzip
import json

import pytest
import torch

from engine.config import EngineConfig
from engine.profile_window import TURNS, ProfileWindow
from engine.request import ConfigError


def test_profiles_a_window_of_turns_once_enough_requests_run(tmp_path):
    window = ProfileWindow(str(tmp_path / "prof"), at_streams=3, device=torch.device("cpu"))
    x = torch.randn(64, 64)
    for running in (0, 1, 2):  # below the threshold: nothing starts
        window.turn(running)
        assert not (tmp_path / "prof").exists()
    for _ in range(TURNS + 1):
        window.turn(3)
        torch.mm(x, x)
    assert window.done
    ops = (tmp_path / "prof" / "ops.txt").read_text()
    assert "aten::mm" in ops
    with gzip.open(tmp_path / "prof" / "trace.json.gz", "rt") as f:
        trace = json.load(f)
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "aten::mm" in names
    before = (tmp_path / "prof" / "ops.txt").stat().st_mtime_ns
    for _ in range(TURNS + 1):  # once per server
        window.turn(10)
    assert (tmp_path / "prof" / "ops.txt").stat().st_mtime_ns == before


def test_a_delayed_window_starts_after_its_seconds_and_keeps_its_arming(tmp_path):
    """--profile-after-s: the window starts that long after at_streams first ran, even if the
    count dipped meanwhile (streams finishing at a point's end), and not before."""
    now = [0.0]
    window = ProfileWindow(
        str(tmp_path / "prof"), 3, torch.device("cpu"), after_s=15.0, clock=lambda: now[0]
    )
    window.turn(3)  # armed at 0 s
    for t, running in ((5.0, 2), (14.9, 3)):
        now[0] = t
        window.turn(running)
        assert window._profiler is None
    now[0] = 15.0
    window.turn(1)
    assert window._profiler is not None
    for _ in range(TURNS):
        window.turn(1)
    assert window.done and (tmp_path / "prof" / "ops.txt").exists()


@pytest.mark.parametrize("bad", [{"profile_at_streams": 0}, {"profile_after_s": -1.0}])
def test_the_profile_settings_are_checked(bad):
    with pytest.raises(ConfigError, match="profile_"):
        EngineConfig(**bad)
