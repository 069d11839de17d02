"""The bench's view of real-time admission (voxbench/admission_view.py), read from the
gateway's own /metrics text: refusals during a point by cause, and the predicted capacity."""

from __future__ import annotations

from engine.outputs import AdmissionStats
from tests.gateway.test_admission_metrics import metrics_text
from voxbench.admission_view import admission_during, describe_admission, parse_admission


def admission_text(refusals: dict[str, int], capacity: int) -> str:
    admission = AdmissionStats(
        streams=40,
        capacity_streams=capacity,
        turn_fixed_s=0.004,
        turn_per_row_s=0.00005,
        live_turns=300,
        refusals=refusals,
    )
    return metrics_text(admission)


def test_refusals_during_a_point_by_cause_and_the_capacity_at_its_end():
    before = parse_admission(admission_text({"turn_cost": 3}, capacity=90))
    after = parse_admission(admission_text({"turn_cost": 10, "listeners": 4}, capacity=88))
    assert before == {
        "refusals": {"turn_cost": 3.0},
        "capacity_streams": 90.0,
        "turn_fixed_s": 0.004,
        "turn_per_row_s": 5e-05,
        "turn_samples": 300.0,
    }
    view = admission_during(before, after)
    assert view["refusals"] == {"listeners": 4, "turn_cost": 7}
    assert view["capacity_streams"] == 88.0
    [line] = describe_admission(view)
    assert "room for 88 streams" in line and "turn 4.00 ms + 0.050 ms/row" in line
    assert "listeners 4, turn_cost 7" in line
    assert admission_during(None, after) is None
    unchanged = admission_during(after, after)
    assert unchanged["refusals"] == {} and "none" in describe_admission(unchanged)[0]
