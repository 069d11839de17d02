"""The bench's view of real-time admission (voxbench/admission_view.py), read from the
gateway's own /metrics text: refusals during a point by cause (the engine's at submit and the
gateway's at session start), and the predicted capacity."""

from __future__ import annotations

from engine.outputs import AdmissionStats
from gateway.admission import GATEWAY_CAUSES
from tests.gateway.test_admission_metrics import metrics_text
from voxbench.admission_view import (
    admission_during,
    describe_admission,
    parse_admission,
    peak_turn,
)


def admission_text(
    refusals: dict[str, int], capacity: int, gateway: dict[str, int] | None = None
) -> str:
    admission = AdmissionStats(
        streams=40,
        capacity_streams=capacity,
        turn_fixed_s=0.004,
        turn_per_row_s=0.00005,
        turn_per_page_s=2.5e-7,
        live_turns=300,
        codec_fixed_s=0.005,
        codec_per_audio_s=0.0012,
        refusals=refusals,
    )
    return metrics_text(admission, gateway)


def test_refusals_during_a_point_by_cause_and_the_capacity_at_its_end():
    before = parse_admission(admission_text({"turn_cost": 3}, capacity=90, gateway={"kv": 1}))
    after = parse_admission(
        admission_text(
            {"turn_cost": 10, "listeners": 4},
            capacity=88,
            gateway={"kv": 1, "listeners": 5, "waiting": 2},
        )
    )
    assert before == {
        "refusals": {"turn_cost": 3.0},
        "gateway_refusals": {cause: float(cause == "kv") for cause in GATEWAY_CAUSES},
        "capacity_streams": 90.0,
        "turn_fixed_s": 0.004,
        "turn_per_row_s": 5e-05,
        "turn_per_page_s": 2.5e-07,
        "turn_samples": 300.0,
        "codec_fixed_s": 0.005,
        "codec_per_audio_s": 0.0012,
    }
    view = admission_during(before, after)
    assert view["refusals"] == {"listeners": 4, "turn_cost": 7}
    assert view["gateway_refusals"] == {"listeners": 5, "waiting": 2}  # kv: none during it
    assert view["capacity_streams"] == 88.0
    [line] = describe_admission(view)
    assert "room for 88 streams" in line and "turn 4.00 ms + 0.050 ms/row + 0.250 us/page" in line
    assert "codec 5.00 ms a job + 1.20 ms per s of audio" in line
    # What the clients counted as refused: 18, each under one cause in one family.
    assert "18 in all" in line
    assert "by the engine at submit: listeners 4, turn_cost 7" in line
    assert "at session start: listeners 5, waiting 2" in line
    assert admission_during(None, after) is None
    unchanged = admission_during(after, after)
    assert unchanged["refusals"] == {} and unchanged["gateway_refusals"] == {}
    assert "0 in all" in describe_admission(unchanged)[0]
    # A fit with no part by rows (a window of turns at like rows) is a fit all the same.
    flat = {**view, "turn_fixed_s": 0.00312, "turn_per_row_s": 0.0}
    assert "turn 3.12 ms + 0.000 ms/row" in describe_admission(flat)[0]
    unfitted = {**view, "turn_fixed_s": 0.0, "turn_per_row_s": 0.0}
    assert "turn cost not fitted" in describe_admission(unfitted)[0]


def test_a_server_without_the_gateway_family_reads_as_none_refused_there():
    """An older server's /metrics has only the engine's family."""

    def old_server(kv: int) -> dict:
        text = admission_text({"kv": kv}, capacity=10)
        return parse_admission(
            "\n".join(line for line in text.splitlines() if "voxgate_gateway_" not in line)
        )

    view = admission_during(old_server(2), old_server(5))
    assert view["refusals"] == {"kv": 3} and view["gateway_refusals"] == {}
    [line] = describe_admission(view)
    assert "3 in all" in line and "at session start: none" in line


def test_each_seconds_fit_is_judged_at_the_points_dearest_turn():
    """The dearest loaded second (the longest loop turn of those with enough steps and their
    pages) is the one each earlier fit is judged at, in % over its interval between LLM steps
    (what a stream waits for a token); later fits and idle seconds are left out, and a fit
    without a page price (its turn by rows alone) is read as it is."""
    steps = {
        "3": {"steps_per_s": 150.0, "turn_ms": 6.0, "rows": 100.0, "kv_pages": 5000.0},
        "8": {"steps_per_s": 80.0, "turn_ms": 11.0, "rows": 200.0, "kv_pages": 20000.0},
        "9": {"steps_per_s": 5.0, "turn_ms": 30.0, "rows": 2.0, "kv_pages": 10.0},  # idle
        "10": {"steps_per_s": 90.0, "turn_ms": 10.0, "rows": 150.0, "kv_pages": 15000.0},
    }
    fits = {  # the dearest second's interval: 12.5 ms
        "2": [3.0, 0.01, 0.3],  # 3 + 2 + 6 = 11 ms: 12 % under
        "5": [3.5, 0.0, 0.45],  # 3.5 + 9 = 12.5 ms: exact
        "6": [4.0, 0.025],  # by rows alone: 9 ms, 28 % under
        "9": [1.0, 0.0, 0.1],  # after the dearest second: not judged
    }
    peak = peak_turn(fits, steps, min_steps_per_s=20.0)
    assert (peak["second"], peak["rows"], peak["kv_pages"], peak["interval_ms"]) == (
        8,
        200.0,
        20000.0,
        12.5,
    )
    assert peak["error_pct_by_second"] == {"2": -12.0, "5": 0.0, "6": -28.0}
    line = describe_admission(
        {
            "capacity_streams": 300,
            "refusals": {},
            "turn_fixed_s": 0.003,
            "turn_per_row_s": 0.0,
            "peak_turn": peak,
        }
    )[-1]
    assert "(8s: 200 rows, 20000 KV pages, 12.5 ms between LLM steps)" in line
    assert "2s:-12 5s:+0 6s:-28" in line
    assert peak_turn(fits, {"9": steps["9"]}, min_steps_per_s=20.0) is None
