"""The throughput run measures the engine as the served points ran it: the bench hands its
--server-arg options to the in-process throughput run, which reads them with the serve
command's own parser."""

from __future__ import annotations

import subprocess

import pytest

from voxbench.throughput import build_parser, served_settings


def test_server_args_set_the_engine_the_throughput_run_builds():
    args = build_parser().parse_args(
        [
            "--model",
            "tiny-orpheus",
            "--server-arg=--max-num-seqs=7",
            "--server-arg=--kv-cache-dtype=fp8",
            "--server-arg=--no-realtime-admission",
        ]
    )
    settings = served_settings(args)
    assert settings.engine.max_num_seqs == 7
    assert settings.engine.kv_cache_dtype == "fp8"
    assert settings.model == "tiny-orpheus"


def test_without_server_args_the_engine_has_the_serve_defaults():
    from engine.config import EngineConfig

    settings = served_settings(build_parser().parse_args(["--model", "tiny-orpheus"]))
    assert settings.engine.max_num_seqs == EngineConfig().max_num_seqs
    assert settings.engine.kv_cache_dtype == EngineConfig().kv_cache_dtype


def test_a_bad_server_arg_is_a_clear_error_not_a_silent_default():
    args = build_parser().parse_args(["--server-arg=--kv-cache-dtype=int3"])
    with pytest.raises((ValueError, SystemExit)):
        served_settings(args)


def test_the_bench_passes_its_server_args_to_the_engine_throughput_run(tmp_path, monkeypatch):
    from voxbench.config import BenchConfig
    from voxbench.runner import BenchRun, SystemSpec

    seen: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(subprocess, "run", fake_run)
    cfg = BenchConfig(
        serve=True,
        server_args=("--max-num-seqs=9", "--kv-cache-dtype=fp8"),
        out_dir=str(tmp_path),
    )
    run = BenchRun(cfg, argv=[])
    for kind, expected in (("voxgate", True), ("hf-baseline", False)):
        spec = SystemSpec(kind, kind, "slack" if kind == "voxgate" else None, None)
        result = run._throughput_subprocess(spec, 4, reserve_s=0.0)
        assert "error" in result  # the fake exits 1: reported, not raised
        passed = [a for a in seen[-1] if a.startswith("--server-arg=")]
        assert (
            passed == ["--server-arg=--max-num-seqs=9", "--server-arg=--kv-cache-dtype=fp8"]
        ) is expected
