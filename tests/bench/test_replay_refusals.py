"""bench/replay_refusals.py: a traced refusal judged again offline, as recorded and with one
of the outlook's inputs changed."""

import dataclasses
import sys
from pathlib import Path

import pytest

from engine.realtime_capacity import RealtimeCapacity
from engine.realtime_outlook import StreamOutlook
from engine.request_trace import TraceWriter

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
        "budget at 100 %",
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
