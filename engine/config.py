"""Typed, validated engine settings."""

from __future__ import annotations

from dataclasses import dataclass

from engine.request import ConfigError

POLICIES = ("slack", "fcfs")


@dataclass(frozen=True)
class EngineConfig:
    policy: str = "slack"
    block_size: int = 16  # tokens per KV page
    num_kv_blocks: int | None = None  # None: size from kv_memory_fraction / kv_cache_mb
    kv_cache_mb: int = 512  # CPU default pool size; GPUs use kv_memory_fraction
    kv_memory_fraction: float = 0.85  # of free GPU memory after weights
    max_num_seqs: int = 128  # requests advanced per LLM step
    max_batch_tokens: int = 4096  # prefill + decode tokens per LLM step
    max_detok_batch: int = 64  # streams decoded per detokenizer call
    device: str | None = None  # None: cuda when available, else cpu
    dtype: str | None = None  # None: bfloat16 on cuda, float32 on cpu
    attention: str | None = None  # None: flashinfer on cuda when installed, else sdpa
    # CUDA graphs for decode steps (flashinfer on cuda only); False forces eager mode.
    cuda_graphs: bool = True
    # On the CPU, int8 Linear weights for models that offer it (SpeechModel.quantize_for_cpu,
    # models/cpu_int8.py): about twice the streams, at int8's precision. None: on for
    # voxgate-tiny on the CPU, off otherwise (engine/factory.py, serving_defaults).
    cpu_int8: bool | None = None
    # torch's intra-op threads for the engine on the CPU. None: torch's default (every core),
    # except voxgate-tiny: half the cores, the rest left to the gateway (serving_defaults).
    cpu_threads: int | None = None
    # Python's thread switch interval in the engine's process (sys.setswitchinterval). The
    # engine loop shares its interpreter with the codec threads (and the gateway's event loop,
    # or the child's queue feeder): after every blocking torch call it waits for the GIL, up to
    # one interval while another thread runs Python (bench/gil_probe.py). Python's 5 ms is
    # a whole LLM step.
    gil_switch_ms: float = 0.5
    # With FlashInfer attention, also its fused RMSNorm/RoPE/SiLU kernels in the backbone.
    fused_kernels: bool = True
    # Detokenize on a thread and CUDA stream of its own, overlapping the LLM (cuda only).
    async_detok: bool = True
    # With async_detok, for models that offer it (ModelFacts.first_chunk_lane: CosyVoice 2):
    # a second detokenizer thread, high-priority CUDA stream and set of CUDA graphs that
    # decodes requests' first chunks at once, beside the steady job in flight, instead of
    # after it (docs/engine.md). On by default since the sixth session's same-commit A/B on the
    # H200 (BENCHMARKS.md): with it 2 req/s kept every stream viable, without it one came late
    # at 2 req/s and two at 3. Models without the capability and the CPU are unaffected.
    first_chunk_lane: bool = True
    # Run the LLM's steps on a CUDA stream of the highest priority (cuda only). The codec's
    # jobs run beside them on streams of their own; at equal priority their kernels (CosyVoice
    # 2's flow: thousands a job) take the SMs as often as the step's, and every stream's next
    # token waits. With priority the block scheduler hands freed SMs to the step first, so a
    # step costs about what it costs alone and the codec fills the gaps (docs/engine.md).
    llm_stream_priority: bool = True
    # With async_detok on CUDA: > 0 confines the steady codec job's kernels to this many SMs
    # (a CUDA green context, engine/sm_partition.py), so they never fill the SMs the LLM's
    # step needs; priority alone does not pre-empt running blocks. 0: every SM.
    codec_sms: int = 0
    # With async_detok on CUDA: the codec threads wait for each graph of a job to run before
    # they queue the next (CallableGraphs.pace; CosyVoice 2's flow: one per Euler step), so
    # the GPU never holds a whole job of codec kernels ahead of the LLM's. On: measured on
    # the H200 (BENCHMARKS.md, tenth session: CosyVoice 2 at 8 req/s, prefill steps p90 84 →
    # 36 ms, decode steps mean 7.7 → 6.1 ms).
    codec_pacing: bool = True
    # With CUDA graphs, models whose candidates need no host lists (models.base
    # .device_candidates: CosyVoice 2) replay a decode step's head and sampling as one graph
    # per bucket (engine/sampling_graphs.py) instead of ~100 eager launches, each of which can
    # wait behind the codec's queued kernels. Tokens are the same either way.
    sampling_graphs: bool = True
    # CUDA with graphs: the blocks a codec names (CosyVoice 2's flow estimator's ResNet and
    # transformer blocks) go through torch.compile (Inductor) before capture, so a replay
    # holds fewer, fused kernels (cuda_graphs.compile_regions): a 32-row steady job 164 ->
    # 134 ms on the H200, CosyVoice 2's goodput 7 -> 12 req/s. ~45 s more at a cold start
    # (Inductor's on-disk cache shortens the next); a failed compile falls back to eager
    # kernels with a warning.
    compile_codec: bool = True
    # Append each finished request's timeline (queue, steps to its first chunk, cover wait,
    # codec wait and job, gaps) to this JSON-lines file (engine/request_trace.py). None: off.
    trace_path: str | None = None
    # Overlap the host work of step n+1 (scheduling, input preparation, attention planning,
    # the launch) with the device's step n, for models whose facts allow it
    # (ModelFacts.supports_async_scheduling); False forces the synchronous step. Equal to the
    # synchronous step in CI (CPU) and on the H200 (tests/gpu), and 16-24 % faster per step
    # there at batch 16-64 (BENCHMARKS.md, 2026-11-30).
    async_scheduling: bool = True
    # Run the engine loop in a process of its own (see engine/process_engine.py) instead of a
    # thread of the caller's: no GIL shared with the gateway. Measured on the H200: goodput
    # 0 -> 1 req/s from this alone (BENCHMARKS.md), hence the GPU default.
    # None: a process on CUDA (not for turn-based speech-to-speech models) and for
    # voxgate-tiny on the CPU; a thread otherwise (engine/factory.py, serving_defaults).
    engine_process: bool | None = None
    # Refuse a new request (EngineOverloaded: the gateway's `overloaded` error) when the step
    # and codec costs measured at the batch size it would make (calibrated at warm-up, refined
    # by live steps), or the cadence measured now, come within 10 % of the audio each step
    # adds to every stream: one stream too many is turned away instead of making every stream
    # fall behind (engine/realtime_capacity.py). On for every model and device; None (the
    # command line's "not given") counts as on; False turns it off.
    realtime_admission: bool | None = True
    # A request whose buffered audio exceeds this is not decoded this step: the listener does
    # not need it yet, and the batch slot is better spent on someone closer to a gap.
    max_lead_s: float = 30.0
    # ... and while some listener is short of audio (waiting for its first chunk, or with less
    # than urgent_buffer_s buffered), neither is one more than contended_lead_s ahead: the
    # steps then come round sooner for those who need them (Scheduler._lead_cap).
    contended_lead_s: float = 2.0
    urgent_buffer_s: float = 1.0
    # ... nor is one with this many chunks of tokens still waiting for the codec (backpressure):
    # more tokens would not reach the listener sooner, and a codec that fell behind would get
    # jobs of several chunks a request, beyond its captured shapes (slower still).
    max_undecoded_chunks: int = 2
    # The first chunk holds enough audio to cover generating and decoding the next chunk, times
    # this margin (the listener plays from the first frame on). None: 3 with a threaded codec
    # (CUDA; a model may measure its own, ModelFacts.first_audio_margin: CosyVoice 2 uses 2),
    # 2 with an inline one (CPU). On the H200 the listener saw second chunks up to 1.6x
    # the engine's median gap (a codec job in flight, the async step of lag, delivery jitter)
    # and a bigger first chunk is cheap there (Orpheus streams run ~3x real time: one more
    # 85 ms SNAC frame is ~25 ms); on a CPU the inline codec has none of that latency, and
    # streams run ~1.5x real time, so 3 would cost voxgate-tiny 150 -> 360 ms of first audio ...
    first_audio_margin: float | None = None
    # ... unless the request has waited this long since arrival: then whatever whole frames
    # exist go out, so load never pushes time to first audio far past this.
    first_audio_budget_s: float = 0.35
    # With a first-chunk lane: a steady codec job waits until this many streams have a chunk
    # ready, unless a listener needs one soon (Scheduler.steady_job_waits). None: the model's
    # own (ModelFacts.steady_batch_rows: CosyVoice 2 16, others 0); 0: never waits.
    steady_batch_rows: int | None = None
    # CosyVoice 2: generated tokens in the first audio chunk (the flow's first attention
    # chunk; the rest are its 25-token chunks). None: the model's default (docs/models.md).
    first_hop_tokens: int | None = None
    # CosyVoice 2: > 0 runs the flow's estimator over each stream's cached context, kept in a
    # pool of this many streams (docs/models.md, "The cached estimator in a pool"); 0: each chunk
    # re-integrates its window of context chunks (the default, measured on the H200).
    flow_cache_slots: int = 0
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
        if self.policy not in POLICIES:
            raise ConfigError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.block_size not in (8, 16, 32, 64):
            raise ConfigError(f"block_size must be 8, 16, 32 or 64, got {self.block_size}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise ConfigError(f"num_kv_blocks must be >= 2, got {self.num_kv_blocks}")
        if self.steady_batch_rows is not None and self.steady_batch_rows < 0:
            raise ConfigError(f"steady_batch_rows must be >= 0, got {self.steady_batch_rows}")
        if self.codec_sms < 0:
            raise ConfigError(f"codec_sms must be >= 0 (0: every SM), got {self.codec_sms}")
        if self.flow_cache_slots < 0:
            raise ConfigError(f"flow_cache_slots must be >= 0, got {self.flow_cache_slots}")
        if self.max_num_seqs < 1 or self.max_batch_tokens < 1 or self.max_detok_batch < 1:
            raise ConfigError("max_num_seqs, max_batch_tokens and max_detok_batch must be >= 1")
        if not 0.05 <= self.kv_memory_fraction <= 0.98:
            raise ConfigError(
                f"kv_memory_fraction must be in [0.05, 0.98], got {self.kv_memory_fraction}"
            )
        if self.dtype not in (None, "float32", "bfloat16", "float16"):
            raise ConfigError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.attention not in (None, "sdpa", "flashinfer"):
            raise ConfigError(f"attention must be sdpa or flashinfer, got {self.attention!r}")
        if (self.first_audio_margin or 0) < 0 or self.first_audio_budget_s < 0:
            raise ConfigError("first_audio_margin and first_audio_budget_s must be >= 0")
        if self.duplex_max_input_frames < 1 or self.duplex_max_catch_up_frames < 0:
            raise ConfigError(
                "duplex_max_input_frames must be >= 1, duplex_max_catch_up_frames >= 0"
            )
        if self.first_hop_tokens is not None and self.first_hop_tokens < 1:
            raise ConfigError(f"first_hop_tokens must be >= 1, got {self.first_hop_tokens}")
        if not 0.05 <= self.gil_switch_ms <= 50:
            raise ConfigError(f"gil_switch_ms must be in [0.05, 50], got {self.gil_switch_ms}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ConfigError(f"cpu_threads must be >= 1, got {self.cpu_threads}")
        if min(self.max_lead_s, self.contended_lead_s) <= 0 or self.urgent_buffer_s < 0:
            raise ConfigError(
                "max_lead_s and contended_lead_s must be > 0 and urgent_buffer_s >= 0, got "
                f"{self.max_lead_s}, {self.contended_lead_s}, {self.urgent_buffer_s}"
            )
        if self.max_undecoded_chunks < 1:
            raise ConfigError(f"max_undecoded_chunks must be >= 1, got {self.max_undecoded_chunks}")
