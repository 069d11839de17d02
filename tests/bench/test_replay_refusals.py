"""bench/replay_refusals.py: a traced refusal judged again offline, as recorded and with one
of the outlook's inputs changed."""

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.realtime_capacity import RealtimeCapacity
from engine.realtime_outlook import StreamOutlook
from engine.request_trace import RequestTrace, TraceWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from replay_refusals import main  # noqa: E402

TOKEN_S = 1 / 82.03  # Orpheus' token of audio


def refused_trace(path: Path) -> None:
    """A trace with one refusal by the streams' outlook (300 long streams, pages at 0.24 µs)
    and one by the KV pool."""
    capacity = RealtimeCapacity(
        TOKEN_S, 28, max_num_seqs=320, max_detok_batch=64, threaded_codec=False
    )
    capacity.price_pages(0.24e-6)
    for rows in (1, 8, 64, 256):
        capacity.steps.seed(rows, 0.003 + 6e-6 * rows)
    live = [StreamOutlook(1000 + 4 * i, 1500, 0.5) for i in range(300)]
    verdict = capacity.room_with(live, [StreamOutlook(40, 1500, 0.0)])
    assert not verdict.ok
    writer = TraceWriter(path)
    writer.write_refusal(10.0, verdict.cause, verdict.reason, verdict.outlook)
    writer.write_refusal(11.0, "kv", "the KV cache is full", None)
    # A record the outlook would admit as it stands: not reproduced, so counted by no variant.
    few = dataclasses.replace(verdict.outlook, streams=verdict.outlook.streams[:10])
    writer.write_refusal(12.0, verdict.cause, verdict.reason, few)
    writer.close()


def test_a_refusal_replays_as_recorded_and_a_cheaper_page_admits_it(tmp_path, capsys):
    path = tmp_path / "run.trace.jsonl"
    refused_trace(path)
    assert main([str(path), "--page-us", "0.05", "--lead-cap-s", "0"]) == 0
    out = capsys.readouterr().out
    assert "3 refusals, 2 by the streams' outlook (others: kv 1)" in out
    assert "  10 streams" in out and "admits as recorded: not reproduced, not counted" in out
    assert "301 streams" in out and "short " in out and "page 0.240 µs" in out
    assert "page 0.05 µs: admits; lead cap 0.0 s: refuses" in out
    assert out.strip().endswith("admitted of the 1 reproduced: page 0.05 µs 1; lead cap 0.0 s 0")


def test_the_standard_variants_and_a_file_that_is_no_trace(tmp_path, capsys):
    path = tmp_path / "run.trace.jsonl"
    refused_trace(path)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    for name in (
        "page price -10 %",
        "turn by rows -10 %",
        "lead credited to 30 s",
        "budget 5 % larger",
        "turn without its floors",  # the record carries the fitted line
    ):
        assert name in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(SystemExit) as exit_info:
        main([str(bad)])
    assert exit_info.value.code == 2 and "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(path), "--turn-ms", "3"])
    assert "FIXED,PER_ROW" in capsys.readouterr().err


def test_the_turns_floors_are_recorded_apart_from_its_line_and_replayed_without():
    """Turns measured 2.5 ms dear at 151 rows (a ramp's crowded second) floor every larger size
    above the line the other sizes' turns fit: the record keeps that line beside the floored
    turn, and the outlook that refused 264 streams with the floor admits them without it."""
    from replay_refusals import without_floors

    from engine.realtime_outlook import OutlookInputs
    from engine.turn_cost import FLOOR_SAMPLES, LIVE_WINDOW

    capacity = RealtimeCapacity(
        TOKEN_S, 28, max_num_seqs=320, max_detok_batch=64, threaded_codec=False
    )
    capacity.price_pages(0.24e-6)
    for rows in (1, 8, 64, 256):
        capacity.steps.seed(rows, 0.003 + 6e-6 * rows)
    for i in range(LIVE_WINDOW - FLOOR_SAMPLES):
        rows = 20 + i % 170
        rows = 150 if rows == 151 else rows
        capacity.steps.observe(rows, 0.003 + 6e-6 * rows)
    for _ in range(FLOOR_SAMPLES):
        capacity.steps.observe(151, 0.003 + 6e-6 * 151 + 0.0025)
    live = [StreamOutlook(600 + 2 * i, 1200, 0.8) for i in range(264)]
    verdict = capacity.room_with(live, [StreamOutlook(40, 1200, 0.0)])
    assert not verdict.ok
    record = OutlookInputs.from_record(verdict.outlook.to_record())
    fixed, per_row = record.turn.line_s
    assert record.turn.by_rows(np.array([200.0]))[0] > fixed + per_row * 200 + 0.0015
    assert record.shortfall() is not None and without_floors(record).shortfall() is None


def timeline(arrival: float, chunks: list[tuple[float, float, float]], last_token: float):
    """A request's timeline: its chunks as (submitted, out, seconds of audio), engine clock;
    None for `out` leaves a chunk in its codec job to the end."""
    trace = RequestTrace(arrival, prompt_tokens=8)
    trace.token(arrival + 0.05, 1)
    for submitted, out, audio_s in chunks:
        trace.submitted(submitted, 4, False, 1)
        if out is not None:
            trace.out(out, submitted, audio_s, 0.0)
    trace.token(last_token, 100)
    return trace


def test_the_guards_refusals_show_what_the_settled_listeners_held(tmp_path, capsys):
    """At 10 s the guard refused (a listener under its 0.50-s line): the timelines show the
    settled, generating listener 0.4 s ahead by its delivered audio and 1.0 s more in a codec
    job, so none was under the line with it; a listener not yet settled, and one done
    generating, are not counted."""
    path = tmp_path / "run.trace.jsonl"
    writer = TraceWriter(path)
    writer.write("a", timeline(0.0, [(0.9, 1.0, 9.4), (9.95, 10.05, 1.0)], last_token=12.0))
    writer.write("settling", timeline(9.0, [(9.4, 9.5, 2.0)], last_token=12.0))
    writer.write("done", timeline(0.0, [(0.9, 1.0, 20.0)], last_token=5.0))
    reason = "listeners ran short of audio 0.0 s ago (the furthest short held 0.40 s of audio, "
    reason += "under its 0.50-s line) and 1 newer stream(s) have not settled yet"
    for arrival in (10.0, 10.02, 13.0):  # two moments: a burst of two, then one
        writer.write_refusal(arrival, "listeners", reason, None)
    writer.close()
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "3 refusals, 0 by the streams' outlook (others: listeners 3)" in out
    assert "3 refusals by the listener guard, at 2 moment(s):" in out
    assert "+  0.00 s  1 settled listeners, the lowest 0.40 (+1.00 decoding) s; " in out
    assert "under the 0.50-s line: 1, 0 with what was decoding" in out
    assert "+  3.00 s  0 settled listeners; under the 0.50-s line: 0, 0" in out
