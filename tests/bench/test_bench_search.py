"""The goodput search (with a fake system), request plans, and the headline figures."""

from __future__ import annotations

import json

import pytest

from voxbench.config import BenchConfig
from voxbench.goodput import SearchSettings, goodput_of, nice_rate, search_goodput
from voxbench.report import headline, results_path, slug
from voxbench.workload import (
    ORPHEUS_TOKEN_RATE,
    WorkItem,
    burst_plan,
    load_workload,
    poisson_plan,
    tokens_for,
)


def capacity(limit: float, log: list[float]):
    def evaluate(rate: float) -> bool:
        log.append(rate)
        return rate <= limit

    return evaluate


# --- search -----------------------------------------------------------------------------------
def test_doubling_then_bisection():
    tried: list[float] = []
    result = search_goodput(capacity(5.3, tried), SearchSettings(start_rate=1, bisect_steps=2))
    assert tried == [1, 2, 4, 8, 6, 5]
    assert result.goodput == 5 and result.ended_by is None
    assert result.points[-1] == (5.0, True)


def test_explicit_rates_stop_at_the_first_failure():
    tried: list[float] = []
    result = search_goodput(
        capacity(3, tried), SearchSettings(rates=(8, 1, 2, 4, 16), bisect_steps=1)
    )
    assert tried == [1, 2, 4, 3]  # ascending, stops at 4, then one midpoint
    assert result.goodput == 3


def test_failing_explicit_rates_halve_down_too():
    tried: list[float] = []
    settings = SearchSettings(rates=(4, 8), min_rate=0.5, bisect_steps=0)
    assert search_goodput(capacity(1.5, tried), settings).goodput == 1
    assert tried == [4, 2, 1]


def test_a_failing_start_halves_down():
    tried: list[float] = []
    result = search_goodput(
        capacity(0.3, tried), SearchSettings(start_rate=1, min_rate=0.1, bisect_steps=1)
    )
    assert tried == [1, 0.5, 0.25, 0.375]
    assert result.goodput == 0.25


def test_nothing_passes():
    result = search_goodput(capacity(0.01, []), SearchSettings(start_rate=1, min_rate=0.5))
    assert result.goodput == 0.0 and [r for r, _ in result.points] == [1, 0.5]


def test_budget_and_max_points_end_the_search():
    result = search_goodput(lambda rate: None if rate > 2 else True, SearchSettings(start_rate=1))
    assert result.ended_by == "budget" and result.goodput == 2
    result = search_goodput(capacity(100, []), SearchSettings(start_rate=1, max_points=3))
    assert result.ended_by == "max_points" and result.goodput == 4


def test_goodput_ignores_a_noisy_pass_above_a_failure():
    assert goodput_of([(1, True), (2, False), (3, True)]) == 1
    assert goodput_of([]) == 0.0
    assert nice_rate(5.33333) == 5.33


def test_search_settings_are_validated():
    with pytest.raises(ValueError):
        SearchSettings(rates=(0,))
    with pytest.raises(ValueError):
        SearchSettings(start_rate=4, max_rate=2)


# --- plans ------------------------------------------------------------------------------------
ITEMS = [WorkItem(f"tts-{i}", f"Sentence {i}.", 1.0 + i % 5) for i in range(50)]


def test_poisson_plan_is_open_loop_and_long_enough():
    plan = poisson_plan(ITEMS, 10.0, 5.0, 20, ORPHEUS_TOKEN_RATE, seed=3)
    offsets = [p.offset_s for p in plan]
    assert offsets == sorted(offsets) and offsets[-1] < 5.0 + 1.0
    assert 25 <= len(plan) <= 80  # ~50 arrivals in 5 s
    long = poisson_plan(ITEMS, 1.0, 2.0, 30, ORPHEUS_TOKEN_RATE)
    assert len(long) == 30  # min_requests wins over the duration
    assert plan == poisson_plan(ITEMS, 10.0, 5.0, 20, ORPHEUS_TOKEN_RATE, seed=3)  # deterministic
    assert plan[0].tokens == tokens_for(plan[0].item.audio_seconds, ORPHEUS_TOKEN_RATE)
    assert len({p.item.id for p in long}) == 30  # no repeats before the workload is used up


def test_tokens_follow_the_token_rate():
    assert ORPHEUS_TOKEN_RATE == 7 * 24000 / 2048 == 82.03125
    assert tokens_for(7.7, ORPHEUS_TOKEN_RATE) == 632
    assert tokens_for(0.0, ORPHEUS_TOKEN_RATE) == 1


def test_burst_plan_and_workload_file(tmp_path):
    assert [p.offset_s for p in burst_plan(ITEMS, 3, ORPHEUS_TOKEN_RATE)] == [0.0, 0.0, 0.0]
    path = tmp_path / "w.jsonl"
    path.write_text(
        "\n".join(
            json.dumps({"id": i.id, "text": i.text, "audio_seconds": i.audio_seconds})
            for i in ITEMS
        )
    )
    assert load_workload(path) == ITEMS
    assert max(i.audio_seconds for i in load_workload(path, max_audio_seconds=2.0)) == 2.0
    path.write_text('{"id": 1}\n')
    with pytest.raises(ValueError, match="w.jsonl:1"):
        load_workload(path)
    with pytest.raises(ValueError, match="not found: pass --workload FILE"):
        load_workload(tmp_path / "missing.jsonl")


def test_the_shipped_workload_loads():
    items = load_workload(BenchConfig(serve=True).workload)
    assert len(items) == 2000
    assert 7.0 < sum(i.audio_seconds for i in items) / len(items) < 8.5


# --- configuration and headline ---------------------------------------------------------------
def test_bench_config_is_validated():
    with pytest.raises(ValueError, match="--url"):
        BenchConfig()
    with pytest.raises(ValueError, match="--serve"):
        BenchConfig(url="ws://x/v1/stream", baseline=True)
    with pytest.raises(ValueError, match="policies"):
        BenchConfig(serve=True, policies=("lifo",))
    assert BenchConfig(serve=True, audio_format="pcm16").output_audio["sample_rate"] == 24000


def _point(rate, p90, viability, stopped=False):
    return {
        "rate": rate,
        "stopped_early": stopped,
        "summary": {
            "ttfa_ms": {"p50": p90 / 2, "p90": p90, "p99": p90 * 2},
            "viability": viability,
            "underrun_ms_total": 0.0,
        },
    }


def test_headline_quotes_the_goodput_point_and_the_baseline():
    cfg = BenchConfig(serve=True, duration_s=10, min_requests=40)
    results = {
        "systems": {
            "voxgate-slack": {
                "kind": "voxgate",
                "goodput_req_s": 4.0,
                "throughput": {"rtf": 60.0},
                "points": [_point(2, 100, 1.0), _point(4, 300, 0.995), _point(8, 900, 0.5, True)],
            },
            "hf-baseline": {
                "kind": "hf-baseline",
                "goodput_req_s": 0.0,
                "throughput": {"rtf": 0.8},
                "note": "too slow",
                "points": [_point(0.125, 2000, 0.0)],
            },
        }
    }
    h = headline(results, cfg)
    assert h["goodput_req_s"] == 4.0 and h["ttfa_ms"] == {"p50": 150, "p90": 300, "p99": 600}
    assert h["viability"] == 0.995 and h["at_rate_req_s"] == 4
    assert h["baseline_goodput_req_s"] == 0.0 and h["baseline_at_rate"]["rate"] == 0.125
    assert h["ratios"] == {"goodput": None, "rtf": 75.0}
    assert h["baseline_note"] == "too slow"
    assert any("max(10 s, 40 requests)" in d for d in h["deviations"])
    assert any("stopped" in d for d in h["deviations"])


def test_results_file_name(tmp_path):
    import datetime

    now = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    first = results_path(tmp_path, "NVIDIA H200", "orpheus-3b", now)
    assert first.name == "2026-01-02-nvidia-h200-orpheus-3b.json"
    first.write_text("{}")
    assert results_path(tmp_path, "NVIDIA H200", "orpheus-3b", now).name.endswith(
        "-orpheus-3b-2.json"
    )
    assert slug("cpu AMD EPYC 7B13") == "cpu-amd-epyc-7b13"


def test_how_each_system_picks_its_rates():
    cfg = BenchConfig(serve=True, rates=(2, 4, 8), bisect_steps=2, baseline_rates=(0.25, 0.5))
    settings, note, early_stop = cfg.search_settings("voxgate")
    assert settings.rates == (2, 4, 8) and settings.bisect_steps == 2 and note is None
    assert early_stop
    settings, note, _ = cfg.search_settings("voxgate", ablation_rates=(8, 2, 6))
    assert settings.rates == (2, 6, 8) and settings.bisect_steps == 0 and "ablation" in note
    settings, note, early_stop = cfg.search_settings("hf-baseline", rtf=0.7)
    assert settings.rates == (0.25,) and settings.bisect_steps == 0 and "0.70x" in note
    assert not early_stop  # a measurement to report, run to its end
    settings, note, _ = cfg.search_settings("hf-baseline", rtf=1.5)
    assert settings.rates == (0.25, 0.5) and note is None
    tried: list[float] = []
    search_goodput(capacity(10, tried), cfg.search_settings("hf-baseline", rtf=0.5)[0])
    assert tried == [0.25]
