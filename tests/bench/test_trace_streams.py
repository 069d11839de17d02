"""bench/trace_streams.py: a profiled step's kernels split by stream, and the busiest stream's
idle gaps told apart by whether another stream's kernels ran in them."""

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from trace_streams import read_kernels, report  # noqa: E402


def _kernel(stream: int, ts: float, dur: float, name: str) -> dict:
    return {"cat": "kernel", "ts": ts, "dur": dur, "name": name, "args": {"stream": stream}}


def test_gaps_under_another_streams_kernels_are_counted_once(tmp_path):
    # LLM stream 7: kernels at 0-10, 30-40, 60-70 (two 20-us gaps); codec stream 13 runs
    # 12-25 and, overlapping itself, 15-28 (covers 12-28 of the first gap), nothing in the
    # second; a CPU op is not a kernel.
    events = [
        _kernel(7, 0, 10, "attention"),
        _kernel(7, 30, 10, "gemm"),
        _kernel(7, 60, 10, "attention"),
        _kernel(13, 12, 13, "depthwise"),
        _kernel(13, 15, 13, "snake"),
        {"cat": "cpu_op", "ts": 0, "dur": 100, "name": "aten::mm", "args": {}},
    ]
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    kernels = read_kernels(str(path))
    assert [k.name for k in kernels][:2] == ["attention", "depthwise"]
    out = report(kernels, steps=2, top=5)
    assert out["busiest_stream"] == 7
    assert out["span_ms"] == 0.07
    assert out["busiest_idle_ms_per_step"] == 0.02  # 40 us of gaps over 2 steps
    assert out["busiest_idle_under_other_streams_ms_per_step"] == 0.008  # 16 us
    assert out["streams"][7]["largest"][0] == {"name": "attention", "ms": 0.02, "calls": 2}
    assert out["streams"][13]["kernel_ms"] == 0.03  # 26 us, rounded
