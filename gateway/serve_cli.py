"""`voxgate serve`: the gateway's command-line options, turned into GatewaySettings.

Imports stay light so `voxgate --help` and `voxgate synth` never pay for the server stack
(uvicorn, Starlette, PyAV, torch); the app is imported when `serve` runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_serve_parser(subparsers) -> None:
    from gateway.config import GatewaySettings  # light: no torch, no server stack

    d = GatewaySettings()  # the help shows the real defaults
    p = subparsers.add_parser("serve", help="run the WebSocket gateway (and the web demo at /)")
    g = p.add_argument_group("model and engine")
    g.add_argument(
        "--model",
        default=None,
        help="preset name, checkpoint folder or HF repo id (default: voxgate-tiny)",
    )
    g.add_argument("--codec", default=None, help="codec repo id or folder (default: the model's)")
    g.add_argument(
        "--random-weights", action="store_true", help="a preset's real config with random weights"
    )
    g.add_argument(
        "--voices-dir",
        default=None,
        metavar="DIR",
        help="reference clips for voice prompting (CSM): NAME.wav + NAME.txt (its transcript); "
        "clients pick one with session.start voice=NAME",
    )
    g.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if present)")
    g.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bfloat16", "float16"],
        help="(default: bfloat16 on GPU, float32 on CPU)",
    )
    g.add_argument(
        "--policy",
        default=d.engine.policy,
        choices=["slack", "fcfs"],
        help="scheduler policy (default: %(default)s)",
    )
    g.add_argument(
        "--kv-cache-mb",
        type=int,
        default=d.engine.kv_cache_mb,
        help="KV pool size on CPU (default: %(default)s)",
    )
    g.add_argument(
        "--max-num-seqs",
        type=int,
        default=d.engine.max_num_seqs,
        help="requests advanced per engine step (default: %(default)s)",
    )
    g.add_argument(
        "--max-batch-tokens",
        type=int,
        default=d.engine.max_batch_tokens,
        help="prefill + decode tokens per engine step (default: %(default)s)",
    )
    g.add_argument(
        "--max-detok-batch",
        type=int,
        default=d.engine.max_detok_batch,
        metavar="N",
        help="streams decoded per detokenizer job, most urgent first (first chunks, then the "
        "least buffered). Smaller jobs end sooner, so a new stream's first chunk waits less "
        "behind one; each costs more per stream (default: %(default)s)",
    )
    g.add_argument(
        "--attention",
        default=None,
        choices=["sdpa", "flashinfer"],
        help="default: flashinfer on NVIDIA GPUs when installed, else sdpa",
    )
    g.add_argument("--eager", action="store_true", help="no CUDA graphs (debugging)")
    g.add_argument(
        "--first-audio-margin",
        type=float,
        default=None,
        metavar="X",
        help="a first chunk holds X times the audio the next chunk takes to arrive before it goes "
        "out (default: 3 on CUDA, 2 on the CPU). Lower: sooner first audio, less cover against "
        "a gap after it (docs/engine.md)",
    )
    g.add_argument(
        "--first-audio-budget",
        type=float,
        default=d.engine.first_audio_budget_s,
        metavar="S",
        help="seconds after arrival when a first chunk goes out whatever its cover (default: "
        "%(default)s)",
    )
    g.add_argument(
        "--trace-requests",
        default=None,
        metavar="FILE",
        help="append each finished request's timeline to FILE as a JSON line: time to its first "
        "token and first chunk, the first-chunk rule's hold, codec wait and job, gaps "
        "(engine/request_trace.py; `voxgate bench --serve` turns it on)",
    )
    g.add_argument(
        "--first-hop-tokens",
        type=int,
        default=None,
        metavar="N",
        help="CosyVoice 2: speech tokens in the first audio chunk, 5-25 (default: 20; 25 = "
        "CosyVoice's own streaming). Smaller: sooner first audio, less of it to cover the next "
        "chunk (docs/models.md)",
    )
    g.add_argument(
        "--cpu-int8",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="int8 weights on the CPU, for models that offer it (voxgate-tiny: about twice the "
        "streams; docs/models.md). Default: on for voxgate-tiny on the CPU, off otherwise",
    )
    g.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        metavar="N",
        help="torch threads of the engine on the CPU (default: half the cores for voxgate-tiny, "
        "leaving the rest to the gateway; torch's default, every core, for other models)",
    )
    g.add_argument(
        "--realtime-admission",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="refuse a new stream (error `overloaded`) while the engine's steps already take 90 "
        "%% of the audio they make, rather than let every stream fall behind (default: on for "
        "voxgate-tiny on the CPU, off otherwise; docs/engine.md)",
    )
    g.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="plan and launch step n+1 while the device runs step n (docs/engine.md; default on; "
        "--no-async-scheduling plans each step after the previous step's tokens are back)",
    )
    g.add_argument(
        "--first-chunk-lane",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CosyVoice 2 on CUDA: decode requests' first chunks on a detokenizer lane of their "
        "own while a steady job runs (docs/engine.md; default on: measured in BENCHMARKS.md; "
        "--no-first-chunk-lane decodes them in the steady job)",
    )
    g.add_argument(
        "--llm-priority",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CUDA: run the LLM's steps on a high-priority stream, ahead of the codec's kernels "
        "(docs/engine.md; default on; --no-llm-priority shares the GPU evenly)",
    )
    g.add_argument(
        "--steady-batch-rows",
        type=int,
        default=None,
        metavar="N",
        help="with a first-chunk lane: a steady codec job waits for N streams' chunks unless a "
        "listener needs one soon (docs/engine.md; default: the model's, CosyVoice 2 16; 0: never)",
    )
    g.add_argument(
        "--codec-pacing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CUDA: codec threads wait for each graph of a job before queueing the next, so the "
        "GPU never holds a whole codec job ahead of the LLM (docs/engine.md; default on; "
        "--no-codec-pacing queues whole jobs)",
    )
    g.add_argument(
        "--sampling-graphs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CUDA: replay a decode step's head and sampling as one graph (CosyVoice 2; "
        "docs/engine.md; default on; --no-sampling-graphs samples with eager launches)",
    )
    g.add_argument(
        "--compile-codec",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CUDA: compile the codec's repeated blocks with torch.compile before capturing "
        "them, for fewer, fused kernels (CosyVoice 2's flow estimator: 7 -> 12 req/s on an "
        "H200; ~45 s more at a cold start; docs/engine.md; default on, falls back to eager kernels "
        "with a warning if compiling fails)",
    )
    g.add_argument(
        "--codec-sms",
        type=int,
        default=0,
        metavar="N",
        help="CUDA: confine the steady codec job to N SMs (a green context; CUDA 12.4+ driver), "
        "so the LLM's steps never wait behind its kernels (docs/engine.md; default 0: every SM)",
    )
    g.add_argument(
        "--engine-process",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the engine loop in its own process, no GIL shared with the gateway "
        "(default: on with CUDA, except for turn-based speech-to-speech models, whose gateway "
        "needs the model; on the CPU for voxgate-tiny only; --no-engine-process forces the "
        "thread)",
    )
    g.add_argument(
        "--gil-switch-ms",
        type=float,
        default=0.5,
        help="Python's thread switch interval in the engine's process: the engine thread waits "
        "up to this long for the GIL after every blocking torch call while another thread (the "
        "codec's, the event loop) runs Python (bench/gil_probe.py; Python's default is 5 ms) "
        "(default: %(default)s)",
    )

    g = p.add_argument_group("network and security")
    g.add_argument("--host", default=d.host, help="(default: %(default)s)")
    g.add_argument("--port", type=int, default=d.port, help="(default: %(default)s)")
    g.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="accept this API key (repeatable; also $VOXGATE_API_KEYS, comma-separated); "
        "without any key the server is open",
    )
    g.add_argument(
        "--twilio-public-url",
        default=None,
        metavar="URL",
        help="the https base Twilio calls, e.g. https://voice.example.com, when a proxy changes "
        "scheme or host (Twilio signatures are checked when $VOXGATE_TWILIO_AUTH_TOKEN is set)",
    )
    g.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser Origin allowed to connect, e.g. https://app.example.com (repeatable); "
        "without any, every Origin is allowed",
    )
    g.add_argument(
        "--max-sessions-per-key",
        type=int,
        default=d.max_sessions_per_key,
        help="open sessions per API key, 0 for no cap (default: %(default)s)",
    )
    g.add_argument(
        "--max-sessions",
        type=int,
        default=d.max_sessions,
        help="open sessions on this server (default: %(default)s)",
    )

    g = p.add_argument_group("streaming and limits")
    g.add_argument(
        "--lead-ms",
        type=int,
        default=d.lead_ms,
        help="how far audio may be sent ahead of playback (default: %(default)s)",
    )
    g.add_argument(
        "--max-send-queue-ms",
        type=int,
        default=d.max_send_queue_ms,
        help="unread audio after which a client is closed with 1008 (default: %(default)s)",
    )
    g.add_argument(
        "--opus-bitrate", type=int, default=d.opus_bitrate, help="bit/s (default: %(default)s)"
    )
    g.add_argument(
        "--encode-processes",
        type=int,
        default=d.encode_processes,
        help="encode output audio in this many processes of their own, or on the gateway's "
        "worker threads (0); processes keep encodes clear of the gateway's GIL with many "
        "streams (default: 4 when the engine runs on a CUDA GPU, else 0)",
    )
    g.add_argument(
        "--start-timeout",
        type=float,
        default=d.start_timeout_s,
        help="seconds allowed until session.start (default: %(default)s)",
    )
    g.add_argument(
        "--idle-timeout",
        type=float,
        default=d.idle_timeout_s,
        help="seconds without messages or audio before a session ends (default: %(default)s)",
    )
    g.add_argument(
        "--max-text-chars",
        type=int,
        default=d.max_text_chars,
        help="characters in one text event (default: %(default)s)",
    )
    g.add_argument(
        "--max-message-bytes",
        type=int,
        default=d.max_message_bytes,
        help="bytes in any one frame; larger closes with 1009 (default: %(default)s)",
    )
    g.add_argument(
        "--segment-pipeline-depth",
        type=int,
        default=d.segment_pipeline_depth,
        help="sentence segments of a response generating at once (default: %(default)s)",
    )
    p.set_defaults(func=run_serve)


def settings_from_args(args: argparse.Namespace, environ: dict[str, str] | None = None):
    """argparse values → validated GatewaySettings (raises ConfigError, a ValueError)."""
    from engine.config import EngineConfig
    from gateway.config import GatewaySettings, keys_from_env

    if args.trace_requests:
        _check_writable(args.trace_requests)
    engine = EngineConfig(
        policy=args.policy,
        kv_cache_mb=args.kv_cache_mb,
        max_num_seqs=args.max_num_seqs,
        max_batch_tokens=args.max_batch_tokens,
        max_detok_batch=args.max_detok_batch,
        device=args.device,
        dtype=args.dtype,
        attention=args.attention,
        cuda_graphs=not args.eager,
        cpu_int8=args.cpu_int8,
        cpu_threads=args.cpu_threads,
        realtime_admission=args.realtime_admission,
        async_scheduling=args.async_scheduling,
        first_chunk_lane=args.first_chunk_lane,
        llm_stream_priority=args.llm_priority,
        codec_sms=args.codec_sms,
        codec_pacing=args.codec_pacing,
        sampling_graphs=args.sampling_graphs,
        compile_codec=args.compile_codec,
        steady_batch_rows=args.steady_batch_rows,
        gil_switch_ms=args.gil_switch_ms,
        engine_process=args.engine_process,
        model_options={}
        if args.first_hop_tokens is None
        else {"first_hop_tokens": args.first_hop_tokens},
        first_audio_margin=args.first_audio_margin,
        first_audio_budget_s=args.first_audio_budget,
        trace_path=args.trace_requests,
    )
    keys = tuple(dict.fromkeys([*args.api_key, *keys_from_env(environ)]))  # dedupe, keep order
    return GatewaySettings(
        model=args.model,
        codec=args.codec,
        random_weights=args.random_weights,
        voices_dir=args.voices_dir,
        engine=engine,
        host=args.host,
        port=args.port,
        api_keys=keys,
        # A secret: from the environment only, never the command line (visible in `ps`).
        twilio_auth_token=(environ if environ is not None else os.environ).get(
            "VOXGATE_TWILIO_AUTH_TOKEN"
        )
        or None,
        twilio_public_url=args.twilio_public_url,
        allowed_origins=tuple(args.allowed_origin),
        max_sessions_per_key=args.max_sessions_per_key,
        max_sessions=args.max_sessions,
        lead_ms=args.lead_ms,
        max_send_queue_ms=args.max_send_queue_ms,
        opus_bitrate=args.opus_bitrate,
        encode_processes=args.encode_processes,
        start_timeout_s=args.start_timeout,
        idle_timeout_s=args.idle_timeout,
        max_text_chars=args.max_text_chars,
        max_message_bytes=args.max_message_bytes,
        segment_pipeline_depth=args.segment_pipeline_depth,
    )


def run_serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from gateway.app import create_app, uvicorn_config

    settings = settings_from_args(args)
    log = logging.getLogger("voxgate.gateway")
    if settings.auth_enabled:
        log.info("API keys: %d configured (values are never logged)", len(settings.api_keys))
    else:
        log.warning(
            "no API keys configured: anyone who can reach %s:%d may connect",
            settings.host,
            settings.port,
        )
    app = create_app(settings)
    config = uvicorn_config(app, settings, log_level=getattr(args, "log_level", "info").lower())
    uvicorn.Server(config).run()
    return 0


def _check_writable(path: str) -> None:
    """--trace-requests must name a file the engine can append to: say so now, in one line,
    rather than when the engine process starts."""
    from engine.request import ConfigError

    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--trace-requests {path}: cannot write there ({exc.strerror or exc}); "
            "give a file in a writable folder"
        ) from None
