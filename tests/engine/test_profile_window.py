"""The loop's profile window: armed by a running-request count, a fixed number of turns, then
an op table and a Chrome trace on disk, once."""

import gzip
import json

import torch

from engine.profile_window import TURNS, ProfileWindow


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
