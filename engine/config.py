"""Typed, validated engine settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.request import SettingError

POLICIES = ("slack", "fcfs")
# `voxgate serve --help` groups whose options a user needs first: picking and placing the model,
# and the network; the others are listed apart as expert knobs.
MODEL = "model"
NETWORK = "network and security"


def cli(
    flag: str,
    help: str,
    group: str = "engine",
    expert: bool | None = None,
    choices: tuple[str, ...] | None = None,
    metavar: str | None = None,
    switch: bool = False,
    invert: bool = False,
    env: str | None = None,
    merge: bool = False,
) -> dict:
    """A settings field's `voxgate serve` option (gateway/settings.py reads it): its flag and help,
    its --help group and whether it is an expert knob (default: every group but the model's
    and the network's), choices, metavar; `switch`: a store-true flag rather than --x/--no-x;
    `invert`: the flag sets the field to False; `env`: its environment variable when not
    VOXGATE_<KEY>; `merge`: values from every source add up rather than the first winning."""
    if expert is None:
        expert = group not in (MODEL, NETWORK)
    return dict(
        flag=flag,
        help=help,
        group=group,
        expert=expert,
        choices=choices,
        metavar=metavar,
        switch=switch,
        invert=invert,
        env=env,
        merge=merge,
    )


@dataclass(frozen=True)
class EngineConfig:
    """What every model's engine shares. A None is settled before the engine starts: by the
    device, or by the model family's serving defaults (engine/factory.py, serving_defaults);
    first_audio_margin's by the device and the model's facts (first_audio_margin_for).
    A field with `cli(...)` metadata is also a `voxgate serve` option (gateway/settings.py).

    What only some models take is not here: it is their family's option (models/families.py:
    CosyVoice 2's first-chunk lane, the flow + HiFT codecs' pacing …), carried as
    `load_options` and set by the family's load as the model's ModelFacts, which the engine
    reads."""

    # Scheduler policy (engine/scheduler.py).
    policy: str = field(
        default="slack", metadata=cli("--policy", "scheduler policy", choices=POLICIES)
    )
    block_size: int = 16  # tokens per KV page
    num_kv_blocks: int | None = None  # None: size from kv_memory_fraction / kv_cache_mb
    kv_cache_mb: int = field(
        default=512,
        metadata=cli("--kv-cache-mb", "KV pool size on the CPU (GPUs size it from free memory)"),
    )
    # The KV pool's share of the GPU memory still free once the weights and the codec's
    # graphs are in (engine/core.py builds the codec first); the rest holds the LLM's CUDA
    # graphs and activations.
    kv_memory_fraction: float = field(
        default=0.85,
        metadata=cli(
            "--kv-memory-fraction",
            "share of the GPU memory free after the weights and the codec's graphs that the KV "
            "pool takes (0.05-0.98)",
        ),
    )
    # The KV cache's storage: "auto" (the model's dtype) or "fp8" (float8 e4m3, scale 1): half
    # the bytes each decode step reads, and twice the tokens the pool holds. Long streams'
    # decode steps are bound by reading their KV, so fp8 raises how many real-time streams a
    # GPU holds; attention then sees K/V rounded to 3 mantissa bits (tokens may differ).
    kv_cache_dtype: str = field(
        default="auto",
        metadata=cli(
            "--kv-cache-dtype",
            "KV cache storage: the model's dtype, or fp8 (half the bytes each decode step "
            "reads, twice the tokens; K/V rounded)",
            choices=("auto", "fp8"),
        ),
    )
    max_num_seqs: int = field(
        default=128, metadata=cli("--max-num-seqs", "requests advanced per engine step")
    )
    max_batch_tokens: int = field(
        default=4096, metadata=cli("--max-batch-tokens", "prefill + decode tokens per engine step")
    )
    # Smaller detokenizer jobs end sooner, so a new stream's first chunk waits less behind one;
    # each costs more per stream.
    max_detok_batch: int = field(
        default=64,
        metadata=cli(
            "--max-detok-batch",
            "streams decoded per detokenizer job, most urgent first",
            metavar="N",
        ),
    )
    device: str | None = field(
        default=None,
        metadata=cli("--device", "cpu, cuda, cuda:1 … (default: cuda if present)", group=MODEL),
    )
    dtype: str | None = field(
        default=None,
        metadata=cli(
            "--dtype",
            "(default: bfloat16 on GPU, float32 on CPU)",
            group=MODEL,
            choices=("float32", "bfloat16", "float16"),
        ),
    )
    attention: str | None = field(
        default=None,
        metadata=cli(
            "--attention",
            "default: flashinfer on NVIDIA GPUs when installed (bfloat16 or float16), else sdpa",
            choices=("sdpa", "flashinfer"),
        ),
    )
    # CUDA graphs for decode steps (flashinfer on cuda only); False forces eager mode.
    cuda_graphs: bool = field(
        default=True,
        metadata=cli("--eager", "no CUDA graphs (debugging)", switch=True, invert=True),
    )
    # int8 Linear weights on the CPU for models that offer them (SpeechModel.quantize_for_cpu).
    cpu_int8: bool | None = field(
        default=None,
        metadata=cli(
            "--cpu-int8",
            "int8 weights on the CPU, for models that offer them (default: the model family's; "
            "on for voxgate-tiny on the CPU)",
        ),
    )
    cpu_threads: int | None = field(
        default=None,
        metadata=cli(
            "--cpu-threads",
            "torch threads of the engine on the CPU (default: the model family's: half the "
            "cores for the families that ask for it, leaving the rest to the gateway; every "
            "core for the others)",
            metavar="N",
        ),
    )
    # After every blocking torch call the engine loop waits up to this long for the GIL while
    # another thread runs Python (bench/gil_probe.py); Python's 5 ms is a whole LLM step.
    gil_switch_ms: float = field(
        default=0.5,
        metadata=cli("--gil-switch-ms", "Python's thread switch interval in the engine's process"),
    )
    # With FlashInfer attention, also its fused RMSNorm/RoPE/SiLU kernels in the backbone.
    fused_kernels: bool = True
    # Detokenize on a thread and CUDA stream of its own, overlapping the LLM (cuda only).
    async_detok: bool = True
    # The LLM's steps on the highest-priority CUDA stream, so the codec's kernels beside them
    # take the SMs only when a step leaves them free (docs/engine.md).
    llm_stream_priority: bool = field(
        default=True,
        metadata=cli("--llm-priority", "CUDA: the LLM's steps on a high-priority stream"),
    )
    # Models whose candidates need no host lists (models.base.device_candidates) replay a
    # decode step's head and sampling as one graph per bucket (engine/sampling_graphs.py)
    # instead of ~100 eager launches. Tokens are the same.
    sampling_graphs: bool = field(
        default=True,
        metadata=cli("--sampling-graphs", "CUDA: a decode step's head and sampling as one graph"),
    )
    # Steps of decodes and fresh prompts replay a graph of the prompts' forward per token
    # bucket (engine/prompt_graphs.py) beside the decode and sampling graphs, instead of one
    # eager forward launched op by op. Needs the sampling graphs, or a model whose prompts
    # replay apart from its eager sampling (SpeechModel.prompt_graphs_sample_eagerly).
    prompt_graphs: bool = field(
        default=True,
        metadata=cli("--prompt-graphs", "CUDA: fresh prompts' forward as graphs by token count"),
    )
    trace_path: str | None = field(
        default=None,
        metadata=cli(
            "--trace-requests",
            "append each finished request's timeline to FILE as a JSON line "
            "(engine/request_trace.py; default: off)",
            metavar="FILE",
        ),
    )
    # A torch profile of the loop under load (engine/profile_window.py): once this many
    # requests run, a window of loop turns is profiled into profile_dir.
    profile_dir: str | None = field(
        default=None,
        metadata=cli(
            "--profile-dir",
            "write a torch profile of the loop's turns under load to DIR (ops.txt, "
            "trace.json.gz; once, when --profile-at-streams requests run; default: off)",
            metavar="DIR",
        ),
    )
    profile_at_streams: int = field(
        default=64,
        metadata=cli(
            "--profile-at-streams",
            "with --profile-dir: start the profile once this many requests run",
            metavar="N",
        ),
    )
    profile_after_s: float = field(
        default=0.0,
        metadata=cli(
            "--profile-after-s",
            "with --profile-dir: start the profile this many seconds after "
            "--profile-at-streams requests first run (default: at once)",
            metavar="S",
        ),
    )
    # Overlap the host work of step n+1 with the device's step n, for models whose facts allow
    # it (ModelFacts.supports_async_scheduling); False forces the synchronous step.
    async_scheduling: bool = field(
        default=True,
        metadata=cli("--async-scheduling", "plan and launch step n+1 while the device runs step n"),
    )
    # The engine loop in a process of its own (engine/process_engine.py): no GIL shared with
    # the gateway.
    engine_process: bool | None = field(
        default=None,
        metadata=cli(
            "--engine-process",
            "run the engine loop in its own process (default: on with CUDA; on the CPU where "
            "the model family asks for it)",
        ),
    )
    # How long the engine's own process (engine_process) may take to load and warm up the
    # model (a first download, Orpheus' first codec compile: minutes) before its start fails.
    # A process that dies meanwhile fails the start at once, whatever this is.
    engine_start_timeout_s: float = field(
        default=600.0,
        metadata=cli(
            "--engine-start-timeout",
            "seconds the engine process may take to load and warm up the model before its "
            "start fails (a dead one fails at once)",
            metavar="S",
        ),
    )
    # Refuse a new request (EngineOverloaded: the gateway's `overloaded` error) when the decode
    # turn fitted from live turns (engine/turn_cost.py, seeded at warm-up) predicts that one
    # more stream would make every stream's token interval exceed REALTIME_LOAD of a token's
    # audio (engine/realtime_capacity.py), or while the listeners already playing run short
    # of audio (engine/listener_guard.py). On for every model and device.
    realtime_admission: bool = field(
        default=True,
        metadata=cli(
            "--realtime-admission",
            "refuse a new stream (1013 / `overloaded`) that would push the streams already "
            "playing behind real time, from turn costs measured at warm-up and live and the "
            "listeners' buffers",
        ),
    )
    # A request whose buffered audio exceeds this is not decoded this step: the batch slot is
    # better spent on someone closer to a gap.
    max_lead_s: float = field(
        default=30.0,
        metadata=cli(
            "--max-lead-s",
            "a stream this far ahead of its listener sits out the LLM's steps",
            metavar="S",
        ),
    )
    # ... and under the slack policy, while some listener is short of audio (waiting for its
    # first chunk, or with less than urgent_buffer_s buffered), neither is one more than
    # contended_lead_s ahead: the steps then come round sooner for those who need them
    # (Scheduler._lead_cap).
    contended_lead_s: float = field(
        default=2.0,
        metadata=cli(
            "--contended-lead-s",
            "... this far ahead while another listener is short of audio",
            metavar="S",
        ),
    )
    urgent_buffer_s: float = 1.0
    # ... nor is one with this many chunks still waiting for the codec (backpressure: a codec
    # that fell behind would otherwise get jobs beyond its captured shapes).
    max_undecoded_chunks: int = 2
    # The first chunk holds enough audio to cover generating and decoding the next chunk, times
    # this margin. None: 3 with a threaded codec (or the model's own,
    # ModelFacts.first_audio_margin), 2 with an inline one (CPU), whose latency is lower.
    first_audio_margin: float | None = field(
        default=None,
        metadata=cli(
            "--first-audio-margin",
            "a first chunk holds X times the audio the next chunk takes to arrive (default: 3 on "
            "CUDA, or the model's own, 2 on the CPU)",
            metavar="X",
        ),
    )
    # ... unless the request has waited this long since arrival: then the whole frames that
    # exist go out, so load never pushes time to first audio far past this (a few frames more
    # when they spare the listener a gap after the first chunk: Scheduler._closes_gap_soon).
    first_audio_budget_s: float = field(
        default=0.35,
        metadata=cli(
            "--first-audio-budget",
            "seconds after arrival when a first chunk stops waiting for its cover margin",
            metavar="S",
        ),
    )
    # The model family's own load-time options the user set, name → value (models/families.py;
    # e.g. CosyVoice 2's first_hop_tokens). Checked by `voxgate serve`'s settings and by the
    # family when it loads (models/registry.py); per-request options are another thing
    # (SpeechRequest.model_options).
    load_options: Mapping[str, Any] = field(default_factory=dict)
    # Full-duplex sessions (engine/frame_scheduler.py): input frames a session may queue before
    # the oldest are dropped, and how many frame periods the tick grid may run late before it
    # resyncs to now.
    duplex_max_input_frames: int = 3
    duplex_max_catch_up_frames: int = 2

    def first_audio_margin_for(
        self, threaded_codec: bool, model_margin: float | None = None
    ) -> float:
        """first_audio_margin, or its default for the engine's kind of codec pipeline: with a
        threaded codec, the model's own measured margin (ModelFacts.first_audio_margin) if it
        has one."""
        if self.first_audio_margin is not None:
            return self.first_audio_margin
        if not threaded_codec:
            return 2.0
        return 3.0 if model_margin is None else model_margin

    def __post_init__(self) -> None:
        require_choice("policy", self.policy, POLICIES)
        require_choice("kv_cache_dtype", self.kv_cache_dtype, ("auto", "fp8"))
        require_choice("block_size", self.block_size, (8, 16, 32, 64))
        if self.num_kv_blocks is not None:
            check_range("num_kv_blocks", self.num_kv_blocks, 2)
        check_range("max_num_seqs", self.max_num_seqs, 1)
        check_range("max_batch_tokens", self.max_batch_tokens, 1)
        check_range("max_detok_batch", self.max_detok_batch, 1)
        check_range("kv_memory_fraction", self.kv_memory_fraction, 0.05, 0.98)
        if self.dtype is not None:
            require_choice("dtype", self.dtype, ("float32", "bfloat16", "float16"))
        if self.attention is not None:
            require_choice("attention", self.attention, ("sdpa", "flashinfer"))
        if self.first_audio_margin is not None:
            check_range("first_audio_margin", self.first_audio_margin, 0)
        check_range("first_audio_budget_s", self.first_audio_budget_s, 0)
        check_range("duplex_max_input_frames", self.duplex_max_input_frames, 1)
        check_range("duplex_max_catch_up_frames", self.duplex_max_catch_up_frames, 0)
        check_range("gil_switch_ms", self.gil_switch_ms, 0.05, 50)
        require(
            self.engine_start_timeout_s > 0,
            "engine_start_timeout_s",
            "must be > 0",
            self.engine_start_timeout_s,
        )
        if self.cpu_threads is not None:
            check_range("cpu_threads", self.cpu_threads, 1)
        require(self.max_lead_s > 0, "max_lead_s", "must be > 0", self.max_lead_s)
        require(self.contended_lead_s > 0, "contended_lead_s", "must be > 0", self.contended_lead_s)
        check_range("urgent_buffer_s", self.urgent_buffer_s, 0)
        check_range("max_undecoded_chunks", self.max_undecoded_chunks, 1)
        check_range("profile_at_streams", self.profile_at_streams, 1)
        check_range("profile_after_s", self.profile_after_s, 0)


def require(ok: bool, field: str, rule: str, value: Any) -> None:
    """Refuse a settings field's value unless `ok`: SettingError, which `voxgate serve` words
    with the option's flag (gateway/settings.py)."""
    if not ok:
        raise SettingError(field, rule, value)


def require_choice(field: str, value: Any, choices: tuple[Any, ...]) -> None:
    """Refuse a settings field's value that is not one of `choices` ("must be a, b or c")."""
    names = [str(choice) for choice in choices]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    require(value in choices, field, f"must be {listed}", value)


def check_range(field: str, value: float, low: float, high: float | None = None) -> None:
    """Refuse a settings field's value below `low` or above `high` (inclusive)."""
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"
    require(low <= value and (high is None or value <= high), field, f"must be {bound}", value)
