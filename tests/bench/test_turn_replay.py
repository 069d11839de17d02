"""voxbench/turn_accuracy.py and bench/turn_replay.py: the turn cost model replayed over a
trace's measured turns, its predictions set against the turns that came."""

import sys
from pathlib import Path

import numpy as np
import pytest

from engine import turn_cost
from engine.request_trace import TraceWriter, TurnLog, read_turns

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from turn_replay import main  # noqa: E402

from voxbench.turn_accuracy import accuracy, by_second, replay  # noqa: E402

PAGE_S = 0.3e-6


def steady_turn(rows: int, pages: int) -> float:
    return 0.003 + 5e-6 * rows + PAGE_S * pages


def write_run(path: Path, dearer_first_s: float = 0.0, seconds: int = 20) -> None:
    """A traced run: the warm-up's figures on the steady line, then 100 turns a second of
    120-200 rows whose pages grow, all on the steady line but those of the first
    `dearer_first_s` seconds, which cost 50 % more (a ramp's crowded turns)."""
    writer = TraceWriter(path)
    writer.write_turn_model({8: 0.003 + 5e-6 * 8, 64: 0.003 + 5e-6 * 64}, PAGE_S, True)
    rng = np.random.default_rng(0)
    for i in range(100 * seconds):
        t = 10.0 + i / 100
        rows = int(rng.integers(120, 201))
        pages = int(rows * (20 + 5 * (t - 10)))
        cost = steady_turn(rows, pages) * (1.5 if t - 10 < dearer_first_s else 1.0)
        writer.write_turn(t, rows, pages, cost * float(rng.normal(1.0, 0.01)))
    writer.close()


def test_turns_and_the_warm_ups_figures_round_trip(tmp_path):
    path = tmp_path / "run.trace.jsonl"
    write_run(path, seconds=3)
    log = read_turns(path)
    assert log.model == {
        "seeds": [[8, pytest.approx(0.00304)], [64, pytest.approx(0.00332)]],
        "page_s": PAGE_S,
        "slope_bound_by_bursts": True,
    }
    assert len(log.turns) == 300  # the last partial line written at close
    times = [t for t, _, _, _ in log.turns]
    assert times == sorted(times) and all(120 <= r <= 200 for _, r, _, _ in log.turns)


def test_a_model_on_the_turns_line_predicts_them(tmp_path):
    path = tmp_path / "run.trace.jsonl"
    write_run(path)
    log = read_turns(path)
    lines = by_second(log, replay(log), [1.0, 5.0])
    late = [line for line in lines if line["second"] >= 6]
    for line in late:
        assert line["at_1s"] == pytest.approx(1.0, abs=0.04)
        assert line["at_5s"] == pytest.approx(1.0, abs=0.04)


def test_a_ramps_dear_turns_show_as_a_pessimistic_model_afterwards(tmp_path):
    """Turns 50 % dearer for the first 5 s: predictions made then, for the steady turns that
    followed, come out dearer than what came; a second later the window has forgotten."""
    path = tmp_path / "run.trace.jsonl"
    write_run(path, dearer_first_s=5.0)
    log = read_turns(path)
    lines = {line["second"]: line for line in by_second(log, replay(log), [1.0, 5.0])}
    assert lines[8]["at_5s"] > 1.3  # predicted at 3 s, inside the dear stretch
    assert lines[12]["at_1s"] == pytest.approx(1.0, abs=0.05)


def test_what_ifs_and_a_trace_without_turns(tmp_path, capsys, monkeypatch):
    path = tmp_path / "run.trace.jsonl"
    write_run(path, seconds=8)
    monkeypatch.setattr(turn_cost, "FLOOR_SAMPLES", turn_cost.FLOOR_SAMPLES)  # restored after
    assert main([str(path), "--horizons", "1,2", "--no-floors"]) == 0
    out = capsys.readouterr().out
    assert "pred@1s" in out and "predicted 2 s ahead over measured" in out
    old = tmp_path / "old.trace.jsonl"
    writer = TraceWriter(old)
    writer.close()
    with pytest.raises(SystemExit) as exit_info:
        main([str(old)])
    assert exit_info.value.code == 2 and "no measured turns" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(path), "--horizons", "soon"])


def test_an_empty_log_replays_to_nothing():
    assert replay(TurnLog(None, [])) == []


def test_a_points_accuracy_weighs_its_own_turns_only(tmp_path):
    """The turns of [since, until) are judged, the model fed every turn before them: the
    steady stretch after a dear ramp reads as predicted from 5 s before inside the ramp (over
    1.3) and as measured from 1 s before."""
    path = tmp_path / "run.trace.jsonl"
    write_run(path, dearer_first_s=5.0)
    log = read_turns(path)
    early = accuracy(log, since=17.0, until=20.0)
    assert early["5s"] > 1.3 and early["1s"] < 1.2
    late = accuracy(log, since=24.0, until=30.0)
    assert late["1s"] == pytest.approx(1.0, abs=0.05) and late["5s"] == pytest.approx(1.0, abs=0.05)
    assert late["20s"] is None  # no prediction was made 20 s before 24 s (the run began at 10)
    assert accuracy(log, since=100.0, until=110.0) == {
        "1s": None,
        "5s": None,
        "10s": None,
        "20s": None,
    }
