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


def test_the_turn_models_foresight_is_a_line_of_its_own():
    """The point's `turn_model_vs_measured` (voxbench/turn_accuracy.py), horizons without a
    prediction left out; none at all, no line."""
    view = {"capacity_streams": 300, "refusals": {}, "turn_fixed_s": 0.003, "turn_per_row_s": 0.0}
    foreseen = {"1s": 0.987, "5s": 0.97, "10s": None, "20s": None}
    line = describe_admission({**view, "turn_model_vs_measured": foreseen})[-1]
    assert line.endswith("by how far ahead it predicted: 1s:0.987 5s:0.970")
    none = {h: None for h in foreseen}
    assert len(describe_admission({**view, "turn_model_vs_measured": none})) == 1
