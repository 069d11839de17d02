"""bench/engine_load.py's burst report: the device's busy time from profiled kernels (streams
overlap), and a second's turn split into its parts."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from engine_load import device_busy_us, summarise_second  # noqa: E402


def test_overlapping_kernels_count_once_toward_the_busy_time():
    # Two streams: [0, 10) and [5, 12) overlap, [20, 25) stands alone, [21, 22) lies inside it.
    kernels = [(20.0, 25.0), (0.0, 10.0), (21.0, 22.0), (5.0, 12.0)]
    summed, busy = device_busy_us(kernels)
    assert summed == 10 + 7 + 5 + 1
    assert busy == 12 + 5


def test_a_seconds_parts_are_per_turn_and_the_rest_is_other():
    second = {"turns": 4, "steps": 2, "rows": 300, "turn_s": 0.040}
    row = summarise_second(3, second, {"schedule": 0.008, "launch": 0.020})
    assert row["rows"] == 150.0 and row["turn_ms"] == 10.0
    assert row["schedule_ms"] == 2.0 and row["launch_ms"] == 5.0
    assert row["other_ms"] == 3.0
