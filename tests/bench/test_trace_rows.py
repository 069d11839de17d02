"""bench/trace_rows.py: a decode step's rows and turn rebuilt from the requests' timelines."""

import gzip
import json
import sys
from pathlib import Path

import pytest

from engine.request_trace import read_traces

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from trace_rows import by_stretch  # noqa: E402


def _chunk(out_ms: float) -> dict:
    return {
        "tokens": 7,
        "submitted_ms": out_ms - 5,
        "lane": False,
        "rows": 1,
        "started_ms": out_ms - 4,
        "out_ms": out_ms,
        "audio_ms": 300.0,
        "buffered_ms": 0.0,
    }


def _request(arrival, first_step, last_step, first_ms, last_ms, tokens, outs):
    return {
        "request_id": f"r{arrival}",
        "arrival": arrival,
        "first_token_ms": first_ms,
        "last_token_ms": last_ms,
        "first_token_step": first_step,
        "last_token_step": last_step,
        "first_chunk_ready_ms": outs[0] - 10,
        "tokens": tokens,
        "chunks": [_chunk(out) for out in outs],
    }


def test_rows_turns_and_live_streams_from_two_timelines(tmp_path):
    # Steps 0-199 over 2 s (a step every ~10 ms). Stream a decodes every step (200 tokens);
    # stream b lives over steps 100-199 and sits half of them out (50 tokens). A third request
    # never made a token (refused or cancelled): it is left out.
    lines = [
        _request(100.0, 0, 199, 0.0, 1990.0, 200, (100.0, 350.0)),
        _request(101.0, 100, 199, 0.0, 990.0, 50, (50.0, 230.0)),
        {
            "request_id": "x",
            "arrival": 100.5,
            "first_token_ms": None,
            "first_token_step": None,
            "last_token_step": None,
            "chunks": [],
        },
    ]
    path = tmp_path / "trace.jsonl.gz"  # gzipped, as bench/results keeps them
    with gzip.open(path, "wt") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines))
    first, second = by_stretch(read_traces(path), stretch_s=1.0)
    assert first["rows"] == 1.0 and first["live"] == 1.0
    assert second["rows"] == 1.5 and second["live"] == 2.0  # b took half the steps
    assert first["turn_ms"] == pytest.approx(10.0, abs=0.1)
    assert second["tokens_per_s"] == pytest.approx(150, rel=0.02)
    # The second chunk's gap belongs to the stretch the stream arrived in.
    assert first["second_chunk_gap_ms"]["p50"] == 250.0
    assert second["second_chunk_gap_ms"]["p50"] == 180.0


def test_an_empty_trace_has_no_stretches(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text("")
    assert by_stretch(read_traces(path)) == []
