"""Real-time admission on /metrics (gateway/metrics.py): what the engine predicts and why it
refused, read from EngineStats.admission, and the refusals the gateway counted itself before
anything reached the engine (gateway/admission.py)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import generate_latest

from engine.outputs import AdmissionStats, EngineStats, StepTiming
from gateway.admission import GATEWAY_CAUSES, AdmissionRefusal
from gateway.metrics import GatewayMetrics


def metrics_text(
    admission: AdmissionStats, gateway_refusals: Mapping[str, int] | None = None
) -> str:
    """The gateway's /metrics text for an engine whose admission stands at `admission`, after
    the gateway refused `gateway_refusals` sessions (by cause) itself."""
    stats = EngineStats(0, 0, 100, 0, 0, StepTiming(), True, realtime_refusal="turn_cost")
    stats = EngineStats(**{**stats.__dict__, "admission": admission})
    metrics = GatewayMetrics(lambda: stats)
    for cause, count in (gateway_refusals or {}).items():
        for _ in range(count):
            metrics.count_refused(AdmissionRefusal(cause, "refused"))
    return generate_latest(metrics.registry).decode()


def test_admission_figures_and_refusals_by_cause_are_exported():
    admission = AdmissionStats(
        streams=42,
        capacity_streams=57,
        turn_fixed_s=0.008,
        turn_per_row_s=0.00004,
        live_turns=256,
        codec_fixed_s=0.005,
        codec_per_audio_s=0.0012,
        settled_listeners=40,
        short_listeners=3,
        tokens_per_char=4.25,
        length_samples=512,
        refusals={"turn_cost": 12, "listeners": 5},
    )
    text = metrics_text(admission, {"listeners": 2, "waiting": 1})
    for line in (
        "voxgate_engine_realtime_room 0.0",
        "voxgate_engine_realtime_streams 42.0",
        "voxgate_engine_realtime_capacity_streams 57.0",
        "voxgate_engine_turn_fixed_seconds 0.008",
        "voxgate_engine_turn_row_seconds 4e-05",
        "voxgate_engine_codec_job_fixed_seconds 0.005",
        "voxgate_engine_codec_seconds_per_audio_second 0.0012",
        "voxgate_engine_listeners_short 3.0",
        "voxgate_engine_speech_tokens_per_char 4.25",
        "voxgate_engine_speech_length_samples 512.0",
        'voxgate_engine_admission_refusals_total{cause="turn_cost"} 12.0',
        'voxgate_engine_admission_refusals_total{cause="listeners"} 5.0',
        'voxgate_gateway_admission_refusals_total{cause="listeners"} 2.0',
        'voxgate_gateway_admission_refusals_total{cause="waiting"} 1.0',
        'voxgate_gateway_admission_refusals_total{cause="kv"} 0.0',
    ):
        assert line in text, line


def test_every_gateway_cause_is_on_metrics_from_the_start():
    """A series at 0 from the first scrape: a rate over any window has a start."""
    text = metrics_text(AdmissionStats())
    for cause in GATEWAY_CAUSES:
        assert f'voxgate_gateway_admission_refusals_total{{cause="{cause}"}} 0.0' in text, cause
