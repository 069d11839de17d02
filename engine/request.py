"""The lifecycle object of one generation request, and the parameters it carries.

Everything here is plain Python (no torch) so that the scheduler and the block manager can be
unit-tested with fake model outputs.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.request_trace import RequestTrace
    from engine.word_timing import WordClock
    from models.request_options import OptionValue
    from models.text_feed import TextFeed

# One step's token: a vocabulary id, or a row of ids for models with a depth stage (CSM: a
# frame's codebooks plus a text column). Same alias as models.base.Token (no torch here).
Token = int | tuple[int, ...]


class ConfigError(ValueError):
    """A user-supplied value is out of range; the message says what would be accepted."""


class SettingError(ConfigError):
    """One setting's value refused: `field` (the settings dataclass field), the `rule` it broke
    ("must be >= 1") and the `value`. The message names the field, as an embedder sets it;
    `voxgate serve` names the option as its user set it instead (gateway/settings.py)."""

    def __init__(self, field: str, rule: str, value: Any) -> None:
        self.field, self.rule, self.value = field, rule, value
        super().__init__(self.named(field))

    def named(self, name: str) -> str:
        """The message with the setting called `name` (a flag, a variable, a file's key)."""
        return f"{name} {self.rule}, got {self.value!r}"

    def __reduce__(self):  # crosses process boundaries (an engine process's start) whole
        return SettingError, (self.field, self.rule, self.value)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0  # 0: no top-k cut
    # Tokens less probable than min_p x the likeliest one are dropped (after temperature,
    # before top-k/top-p; 0: none). Chatterbox's published sampling uses 0.05.
    min_p: float = 0.0
    repetition_penalty: float = 1.1
    seed: int | None = None
    max_tokens: int = 1200
    min_tokens: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.temperature <= 10.0:
            raise ConfigError(f"temperature must be in [0, 10], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ConfigError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.5 <= self.repetition_penalty <= 5.0:
            raise ConfigError(
                f"repetition_penalty must be in [0.5, 5], got {self.repetition_penalty}"
            )
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ConfigError(
                f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def within(self, length: tuple[int, int] | None) -> SamplingParams:
        """These parameters inside a model's own length rule for a text (models.base.Prompt.
        length: the fewest and most tokens its published inference lets that text make). A
        request that fixes its length (min_tokens = max_tokens) keeps it."""
        if length is None or self.min_tokens >= self.max_tokens:
            return self
        fewest, most = length
        most = max(1, min(self.max_tokens, most))
        return replace(self, min_tokens=min(max(self.min_tokens, fewest), most), max_tokens=most)


class RequestStatus(enum.IntEnum):
    """Ordered: every status after RUNNING is a finished one."""

    WAITING = 0  # admitted, prompt not (fully) prefilled yet
    RUNNING = 1  # decoding
    FINISHED_STOPPED = 2  # a stop token came
    FINISHED_LENGTH = 3  # max_tokens reached
    FINISHED_CANCELLED = 4
    FINISHED_FAILED = 5

    @property
    def finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED


_ids = itertools.count()


@dataclass(eq=False)
class Request:
    """One request from admission to its last audio chunk.

    Token bookkeeping follows nano-vllm: `prompt_ids + output_ids` is the sequence; the first
    `num_computed` of them have KV in the cache. Audio bookkeeping feeds the slack policy.

    With async scheduling (engine/core.py) a sampled token can still be on the device when the
    next step is planned: `num_inflight` counts those. Everything that positions the next
    token (the scheduler, the model's candidate rule, the sampler's step) counts them
    (`num_generated`, `num_tokens`); `output_ids` and the detokenizer see resolved tokens only.
    """

    prompt_ids: list[Token]
    sampling: SamplingParams
    arrival_time: float
    request_id: str = field(default_factory=lambda: f"req-{next(_ids)}")
    output_ids: list[Token] = field(default_factory=list)  # resolved tokens only
    num_inflight: int = 0  # sampled tokens launched on the device, not resolved yet
    status: RequestStatus = RequestStatus.WAITING
    num_computed: int = 0
    block_table: list[int] = field(default_factory=list)
    # Audio side, in seconds of audio.
    audio_emitted_s: float = 0.0
    first_audio_time: float | None = None
    first_chunk_s: float = 0.0  # audio in the first chunk: the lead the listener starts with
    audio_chunks_out: int = 0
    delivery_hold_s: float = 0.0  # SpeechRequest.delivery_hold_s
    playback_rate: float = 1.0  # SpeechRequest.playback_rate: audio seconds played per second
    audible_after_s: float = 0.0  # SpeechRequest.audible_after_s: held from the listener
    audible_from: float = field(init=False)  # arrival_time + audible_after_s (__post_init__)
    realtime: bool = True  # SpeechRequest.realtime: someone plays the audio as it is made
    played_s: float | None = None  # from the client's `playback` report, when it sends one
    played_report_time: float | None = None
    # Output tokens already handed to the detokenizer (the rest wait for a chunk to fill).
    num_detokenized: int = 0
    detok_done: bool = False
    detok_in_flight: bool = False  # a detokenizer job holds this request's stream state
    # ... and took this many of its tokens, whose audio is not out yet (0 with no job).
    detok_in_flight_tokens: int = 0
    error: str | None = None
    # Conversations (prefix reuse): the KV of this request is kept under `conversation_id`
    # when it ends; `num_reused` prompt tokens had their KV from the previous request of it.
    conversation_id: str | None = None
    num_reused: int = 0
    transcript_chars: int = 0  # turn-based models: transcript characters sent as TextDelta
    # Characters of the text it speaks, known whole at submission (0: turns, streamed text):
    # what real-time admission bounds its length by (engine/speech_lengths.py).
    text_chars: int = 0
    # Times the words as they are spoken (SpeechRequest.word_timings on a model that can).
    words: WordClock | None = None
    # What the model's preprocess attached for its later stages (models.base.Prompt.extras:
    # CosyVoice 2's voice conditioning for the detokenizer).
    extras: dict = field(default_factory=dict)
    # The request's model options, checked and with the model's defaults filled in
    # (ModelFacts.request_options; {} for a model that takes none): the sample stage's too.
    model_options: dict[str, OptionValue] = field(default_factory=dict)
    # Streamed text (SpeechRequest.text_stream): the ids its generated tokens take, extended
    # by append_text; the request waits while it has none (models/text_feed.py).
    text_feed: TextFeed | None = None
    # The request's timeline when the engine traces requests (engine/request_trace.py).
    trace: RequestTrace | None = None

    @property
    def num_tokens(self) -> int:
        """The sequence length as the device sees it (in-flight tokens included)."""
        return len(self.prompt_ids) + self.num_generated

    @property
    def num_generated(self) -> int:
        """Output tokens sampled so far, resolved or still in flight: the output position of
        the next token drawn."""
        return len(self.output_ids) + self.num_inflight

    @property
    def wants_tokens(self) -> bool:
        """Whether another LLM step may be launched for this request. max_tokens is known
        without the token values: a request whose last allowed token is in flight waits."""
        return not self.status.finished and self.num_generated < self.sampling.max_tokens

    @property
    def awaits_text(self) -> bool:
        """Streamed text: the next token needs text that has not arrived yet."""
        return self.text_feed is not None and not self.text_feed.ready

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def prefilled(self) -> bool:
        return self.num_computed >= self.num_prompt_tokens

    @property
    def finished(self) -> bool:
        return self.status.finished

    def __post_init__(self) -> None:
        # When the listener can first hear this request's audio: its arrival, or later for a
        # request held from its listener (a speculative reply); its first audio is due from
        # then. A field, not a property: the scheduler reads it for every stream every step.
        self.audible_from = self.arrival_time + self.audible_after_s

    @property
    def playing_since(self) -> float | None:
        """When the listener began to play this request's audio, by the engine's clock: its
        first audio out, or the end of its hold if that comes later; None before first audio."""
        first = self.first_audio_time
        if first is None:
            return None
        return first if first >= self.audible_from else self.audible_from

    @property
    def ttfa_critical(self) -> bool:
        """No audio has reached the listener yet: time to first audio is what matters (never
        for a request no one plays as it is made)."""
        return self.first_audio_time is None and self.realtime

    @property
    def pending_detok_tokens(self) -> int:
        return len(self.output_ids) - self.num_detokenized

    @property
    def undecoded_tokens(self) -> int:
        """Tokens made whose audio has not gone out yet: those waiting for a chunk and those
        a codec job in flight is decoding. Real-time admission counts them as the listener's
        audio (a stream is no shorter while its chunk is decoded: a Qwen3-TTS chunk in
        flight holds 0.32-0.64 s of it)."""
        return self.pending_detok_tokens + self.detok_in_flight_tokens

    def hand_to_codec(self) -> list[Token]:
        """The tokens made since the last chunk, now a codec job's: the request is in that
        job (detok_in_flight) until codec_returned, and its tokens stay undecoded_tokens."""
        fresh = self.output_ids[self.num_detokenized :]
        self.num_detokenized = len(self.output_ids)
        self.detok_in_flight, self.detok_in_flight_tokens = True, len(fresh)
        return fresh

    def codec_returned(self) -> None:
        """Its codec job is done: the job's audio is out (or the request was cancelled)."""
        self.detok_in_flight, self.detok_in_flight_tokens = False, 0

    def all_ids(self) -> list[Token]:
        return self.prompt_ids + self.output_ids

    def token_slice(self, start: int, end: int) -> list[Token]:
        """Tokens [start, end) of prompt + output, without copying the whole history (a decode
        step needs only the newest token, and the step runs for hundreds of requests). Resolved
        tokens only: the worker takes an in-flight token from the device."""
        n = len(self.prompt_ids)
        if end <= n:
            return self.prompt_ids[start:end]
        if start >= n:
            return self.output_ids[start - n : end - n]
        return self.prompt_ids[start:] + self.output_ids[: end - n]

    def buffered_audio_s(self, now: float) -> float:
        """Audio delivered but not yet played: how long (seconds of the listener's time) the
        listener can go without more."""
        return max(self.audio_lead_s(now), 0.0)

    def audio_lead_s(self, now: float) -> float:
        """buffered_audio_s, negative once the listener has run dry: by how long, if playback
        had not paused (exact for a stream's first gap; later ones count the earlier too).
        Audio the gateway holds back (delivery_hold_s) is not the listener's yet. The
        listener plays `playback_rate` seconds of the audio a second, so the audio ahead of
        them lasts that much less (or more); a held request's listener plays none of it
        before its hold ends (playing_since)."""
        since = self.first_audio_time  # playing_since, inline: this runs per stream per step
        if since is None:
            return 0.0
        if since < self.audible_from:
            since = self.audible_from
        if self.played_s is not None and self.played_report_time is not None:
            played = self.played_s + (now - self.played_report_time) * self.playback_rate
        else:
            played = max(now - since, 0.0) * self.playback_rate
        return (self.audio_emitted_s - self.delivery_hold_s - played) / self.playback_rate
