"""Typed values that cross the engine's internal and external boundaries (no torch)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.request import Request, SamplingParams, Token
from engine.word_timing import WordTiming

if TYPE_CHECKING:
    from models.request_options import OptionValue


# --- scheduler → worker ---------------------------------------------------------------------
@dataclass(slots=True)
class ScheduledChunk:
    """`num_tokens` tokens of `request`, starting at position `start`, run through the LLM.
    A chunk that reaches the end of the known sequence produces a sampled token (`samples`,
    fixed when the chunk is planned: the launch then counts the token in flight, and the
    worker reads it several times a row). Not changed once made; not frozen, because the
    scheduler makes one per row per step and a frozen dataclass takes three times as long to
    build."""

    request: Request
    start: int
    num_tokens: int
    samples: bool = field(init=False)

    def __post_init__(self) -> None:
        self.samples = self.start + self.num_tokens == self.request.num_tokens


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)  # prefills first, then decodes
    # Live requests the slack policy left out of the step: past the lead cap (ahead of their
    # listener), or with max_undecoded_chunks waiting for the codec (its backpressure).
    held_by_lead: int = 0
    held_by_codec: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def pages_read(self) -> int:
        """The KV pages the step's attention reads: each scheduled request's. A request that
        sits the step out (a lead cap) reads none, whatever pages it holds."""
        return sum(len(c.request.block_table) for c in self.chunks)


@dataclass
class StepTiming:
    llm_s: float = 0.0
    detok_s: float = 0.0
    host_s: float = 0.0
    batch_size: int = 0
    num_tokens: int = 0


@dataclass
class LoopTotals:
    """Where the engine loop's time went since it started: cumulative counters, so a reader
    (the bench, a dashboard) takes the difference of two snapshots for any window.

    A loop turn (`loop_s`) is the LLM's launch and wait (`llm_s`), the codec's hand-offs and
    event bookkeeping (the rest). With async scheduling a turn launches step n+1 and waits
    for step n, so `prefill_turn_s` (turns that launched a prefill) is the host's share of
    a prefill step (eager, or `prefill_graphed` from graphs) plus the wait for the step before it. Codec jobs run beside the loop on their own streams
    (`codec_s` is their decode time, not loop time). `capped_steps` counts LLM steps that left
    live requests out because `max_num_seqs` was full; `lead_held_rows` and `codec_held_rows`
    the requests steps left out, summed over steps, for being ahead of their listener (the
    lead cap) or for the chunks they had waiting for the codec (its backpressure)."""

    loop_turns: int = 0
    loop_s: float = 0.0
    llm_steps: int = 0
    llm_s: float = 0.0
    rows: int = 0  # requests advanced, summed over LLM steps
    tokens: int = 0  # prefill + decode tokens, summed over LLM steps
    prefill_steps: int = 0  # LLM steps that ran any prompt tokens
    prefill_graphed: int = 0  # of them, steps replayed from graphs (engine/prompt_graphs.py)
    prefill_turn_s: float = 0.0  # the loop turns that launched them
    capped_steps: int = 0
    lead_held_rows: int = 0
    codec_held_rows: int = 0
    codec_jobs: int = 0  # steady jobs
    codec_rows: int = 0
    codec_s: float = 0.0
    lane_jobs: int = 0  # first-chunk lane jobs
    lane_rows: int = 0
    lane_s: float = 0.0
    # Rows of steady jobs handed less than a chunk, not their first nor their last: a listener
    # about to run dry, or streamed text run out (Scheduler._detok_ready).
    early_rows: int = 0
    audio_s: float = 0.0  # audio handed to listeners
    # The loop's time between its turns: the commands it applied (Submit, Cancel, playback
    # reports …; turn preparation runs off the loop and is not counted), of that the real-time
    # admission verdicts on submits, and the stats snapshots (admission's view of one more
    # stream included). The rest of the wall time outside turns is waiting for work.
    commands_s: float = 0.0
    admission_s: float = 0.0
    stats_s: float = 0.0
    # Full-duplex engines (engine/frame_scheduler.py): which of the frames they stepped were
    # late, and why. `frames_late`: finished after the frame was due (the engine's own
    # lateness); `input_late`: stepped on silence because the user's audio for the frame had
    # not reached the engine yet (late upstream: client, network or gateway); `input_dropped`:
    # queued input frames dropped to stay within the input budget; `resyncs`: times the frame
    # grid was moved to now after the loop fell too far behind.
    frames_out: int = 0
    frames_late: int = 0
    input_late: int = 0
    input_dropped: int = 0
    resyncs: int = 0
    # The engine process's full (generation-2) garbage collections, which stop its loop.
    gc_full: int = 0
    gc_full_s: float = 0.0


# --- engine → callers ----------------------------------------------------------------------
class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    FAILED = "failed"


# The longest a request's audio may be held from its listener (SpeechRequest.audible_after_s).
MAX_AUDIBLE_AFTER_S = 10.0


@dataclass(frozen=True)
class SpeechRequest:
    """What a caller asks the engine for.

    Turn-based speech-to-speech models (ModelFacts.accepts_turns) take `turns` instead of
    `text`: the conversation so far as the model's own turn objects (GLM-4-Voice: UserTurn /
    AssistantTurn), ending with the user's turn to answer. With a `conversation_id` the
    engine keeps the request's KV when it ends and reuses the longest common prefix for the
    next request of the same conversation (docs/engine.md, "Conversations").
    """

    text: str
    voice: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    request_id: str | None = None
    turns: tuple[Any, ...] | None = None
    conversation_id: str | None = None
    # Audio of each chunk the listener only gets with the next one: the gateway's encoder
    # sends whole frames, and its resampler holds the chunk's last, partial frame back until
    # more audio comes. Up to one output frame (the session's frame_ms; 0: none), and at a
    # playback_rate other than 1 what the gateway's time-stretch keeps for the next chunk. The
    # engine counts it as not yet delivered when it judges a listener's buffer.
    delivery_hold_s: float = 0.0
    # Seconds of this request's audio the listener plays per second (the gateway's `speed`:
    # it time-stretches the audio, pitch unchanged). The engine's estimate of what has been
    # played advances at this rate, and the audio ahead of the listener lasts 1/rate of its
    # length. `played_s` reports and `delivery_hold_s` are in the request's own audio.
    playback_rate: float = 1.0
    # Per-request model options (ModelFacts.request_options: Chatterbox's exaggeration and
    # cfg_weight, a number each; Qwen3-TTS' language and instruction, text), name → value;
    # unset ones take the model's defaults. A model that takes
    # none refuses any (ModelInputError naming the option).
    model_options: Mapping[str, OptionValue] = field(default_factory=dict)
    # Time the words as they are spoken (WordTimings events), where the model knows them
    # (ModelFacts.word_timings); ignored for other models.
    word_timings: bool = False
    # `text` is the start of a text still arriving: the rest comes by append_text, the last
    # piece with final=True. Only for models with ModelFacts.appends_text (else refused).
    text_stream: bool = False
    # The listener hears none of this request's audio sooner than this many seconds after it
    # is submitted: a speculative reply, held by the gateway until its turn is confirmed. The
    # engine's clock of the listener starts then, and the request's first audio is ranked
    # and budgeted from then, so a reply nobody can hear yet does not go ahead of one that is
    # awaited now. 0 to MAX_AUDIBLE_AFTER_S.
    audible_after_s: float = 0.0
    # Whether someone plays this audio as it is made. False: no one does (a file returned
    # whole, a batch job), so the request has no deadline: it runs in the room real-time
    # streams leave (after them, and sitting out while any of their listeners is short of
    # audio), real-time admission never refuses it (the KV pool still bounds it), and its
    # audio is decoded in the codec's cheapest chunks (ModelFacts.large_chunk_tokens), not
    # sized for a listener's buffer.
    realtime: bool = True


@dataclass(frozen=True)
class AudioChunk:
    request_id: str
    pcm: np.ndarray  # float32 [n_samples], mono, at `sample_rate`
    sample_rate: int
    # When the engine had the audio (time.monotonic of the engine's host), so that a gateway on
    # the same host can time its delivery (voxgate_audio_delivery_seconds); None where the
    # clocks differ (a Ray replica's events).
    made_s: float | None = None

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate


@dataclass(frozen=True)
class Finished:
    request_id: str
    reason: FinishReason
    num_tokens: int
    error: str | None = None
    # The generated tokens (resolved ones; stop token included when one came): what a
    # turn-based caller keeps as the reply in its history (GLM-4-Voice: model.heard_reply).
    output_ids: tuple[Token, ...] = ()
    # Prompt tokens whose KV came from the conversation's previous request (not prefilled).
    reused_tokens: int = 0


@dataclass(frozen=True)
class TextDelta:
    """Text the model produced alongside its audio (Moshi's inner monologue)."""

    request_id: str
    text: str


@dataclass(frozen=True)
class WordTimings:
    """Words the request has finished speaking (SpeechRequest.word_timings), in order, each
    once, timed from the start of the request's audio (engine/word_timing.py). They come as
    soon as the tokens saying them do, ahead of their audio; the last come before `Finished`."""

    request_id: str
    words: tuple[WordTiming, ...]


EngineEvent = AudioChunk | Finished | TextDelta | WordTimings


@dataclass(frozen=True)
class AdmissionStats:
    """Real-time admission now (engine/realtime_capacity.py): what it predicts and why it
    would refuse. The turn cost is the fitted line, turn seconds = fixed + per_row x rows,
    plus per_page x the KV pages in use where pages are priced."""

    streams: int = 0  # generating requests, admitted ones not yet prefilled included
    capacity_streams: int = 0  # the most streams the fitted cost keeps in real time (0: unknown)
    turn_fixed_s: float = 0.0
    turn_per_row_s: float = 0.0
    turn_per_page_s: float = 0.0  # 0: pages unpriced (the turn judged by its rows alone)
    live_turns: int = 0  # live decode turns in the fit's window
    # A threaded codec's fitted job cost: seconds a job + seconds per second of audio made
    # (0: no codec beside the LLM, or no job measured yet).
    codec_fixed_s: float = 0.0
    codec_per_audio_s: float = 0.0
    settled_listeners: int = 0  # streams playing for a while (engine/listener_guard.py)
    short_listeners: int = 0  # ... of them, those that would run dry before their next audio
    # The tokens per character of text a stream is bounded by (engine/speech_lengths.py: a
    # high quantile of the pace learned; 0 until learned) and the requests it is learned from.
    tokens_per_char: float = 0.0
    length_samples: int = 0
    refusals: dict[str, int] = field(default_factory=dict)  # requests refused so far, by cause


@dataclass(frozen=True)
class EngineStats:
    running: int
    waiting: int
    kv_blocks_total: int
    kv_blocks_used: int
    steps: int
    last_step: StepTiming
    stepping: bool  # the loop is alive and has not failed
    kv_blocks_reserved: int = 0  # promised to admitted requests (admission control uses this)
    # Conversations (prefix reuse): prompt tokens not prefilled because their KV was kept
    # from the conversation's previous request, in total; pages held by idle conversations.
    prefix_reused_tokens: int = 0
    kv_blocks_kept: int = 0
    totals: LoopTotals = field(default_factory=LoopTotals)
    # Why real-time admission would refuse one more stream now (engine/realtime_capacity.py),
    # by the cause its refusals are counted under (turn_cost, codec, slow_start, listeners);
    # "" while it would take one. The gateway refuses a new session with 1013 meanwhile and
    # counts that refusal under this cause. Judged without counting anything (stats are polled).
    realtime_refusal: str = ""
    admission: AdmissionStats = field(default_factory=AdmissionStats)
    # Pages a new session reserves at admission when the engine knows it in advance: a
    # full-duplex session reserves its model's whole context. 0 where requests' lengths vary
    # (TTS). The gateway refuses a new session with 1013 while fewer pages are free.
    kv_blocks_per_session: int = 0

    @property
    def realtime_room(self) -> bool:
        """Whether real-time admission would take one more stream now."""
        return not self.realtime_refusal
