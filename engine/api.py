"""The engine's contract with its callers: what the gateway (and `voxgate synth`) may ask of a
running engine, and every value and error that crosses.

Two clients implement `EngineClient`: `engine/client.py` (the engine loop in a thread of the
caller's process) and `engine/process_engine.py` (in a process of its own). Each call becomes
one of the command values below; `engine/loop.py:apply` executes a command against the engine
loop, the same way for both clients, which keep only their transport.

Callers talk to a running engine through this module alone: every value and error that
crosses, and the causes of its refusals (RefusalCause), are here. The gateway imports nothing
else of the engine but what builds an engine or serves the process around it:

- `engine.config`: EngineConfig and the command-line flags that fill it (gateway/config.py,
  gateway/settings.py, gateway/synth.py);
- `engine.request.ConfigError` in gateway/config.py and gateway/settings.py, which build the
  command line without loading torch (`voxgate --help`), as importing this module would
  (everywhere else ConfigError comes from here);
- `engine.factory.build_engine` (gateway/app.py, gateway/synth.py), and `engine.engine_host`
  and `engine.ray_engine` for Ray replicas (gateway/ray_cluster.py);
- `engine.parent_watch` (a gateway worker process exits with its parent) and
  `engine.gc_pauses` (the process's garbage-collection pauses, on /metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from engine.outputs import (
    MAX_AUDIBLE_AFTER_S,
    AdmissionStats,
    AudioChunk,
    EngineEvent,
    EngineStats,
    Finished,
    FinishReason,
    LoopTotals,
    SpeechRequest,
    StepTiming,
    TextDelta,
    WordTimings,
)
from engine.refusal_causes import RefusalCause
from engine.request import ConfigError, SamplingParams
from engine.word_timing import WordTiming
from models.base import ModelFacts, ModelInputError
from models.request_options import (
    OptionSpec,
    OptionValue,
    RequestOptionError,
    resolve_request_options,
)
from models.tool_calls import FunctionTool
from models.voice_clip import PendingVoice, VoiceClip

__all__ = [
    "MAX_AUDIBLE_AFTER_S",
    "AddClipVoice",
    "AppendText",
    "AudioChunk",
    "Cancel",
    "Command",
    "ConfigError",
    "EndConversation",
    "EndSession",
    "EngineClient",
    "EngineDead",
    "EngineEvent",
    "EngineOverloaded",
    "EngineStats",
    "Finished",
    "FinishReason",
    "ErasedTurn",
    "HeardReply",
    "InstallClipVoice",
    "LoopCommand",
    "LoopTotals",
    "AdmissionStats",
    "ModelFacts",
    "ModelInputError",
    "OptionSpec",
    "OptionValue",
    "PendingVoice",
    "PushAudio",
    "RefusalCause",
    "RemoveClipVoice",
    "ReplyFromText",
    "ReplyTranscript",
    "ReportPlayback",
    "RequestOptionError",
    "ResponseStream",
    "SamplingParams",
    "SpeechRequest",
    "StepTiming",
    "Submit",
    "TextDelta",
    "ToolsTurn",
    "TurnCommand",
    "TurnFromSpeech",
    "TurnFromText",
    "TurnFromToolCall",
    "TurnFromToolOutputs",
    "VoiceClip",
    "VoiceCommand",
    "resolve_request_options",
    "WordTiming",
    "WordTimings",
]


# --- errors --------------------------------------------------------------------------------------
class EngineOverloaded(RuntimeError):
    """No room for another request now; the message says why. Callers answer 'try later'."""


class EngineDead(RuntimeError):
    """The engine loop is not running (not started, shut down, or failed): nothing more can be
    served until the server restarts. The message says why."""


# --- commands: the engine loop's --------------------------------------------------------------
@dataclass(frozen=True)
class Submit:
    """Admit a request. Answer: its request id. Raises ModelInputError or EngineOverloaded."""

    request: SpeechRequest


@dataclass(frozen=True)
class Cancel:
    """Stop a request (or a full-duplex session) now: it finishes `cancelled`."""

    request_id: str


@dataclass(frozen=True)
class ReportPlayback:
    """How much of a request's audio the listener has played (real-time admission uses it)."""

    request_id: str
    played_s: float


@dataclass(frozen=True)
class PushAudio:
    """User audio for a full-duplex session (float32 mono at the model's rate)."""

    request_id: str
    pcm: np.ndarray = field(compare=False)


@dataclass(frozen=True)
class AppendText:
    """More text for a request submitted with SpeechRequest.text_stream; `final` closes it."""

    request_id: str
    text: str
    final: bool


@dataclass(frozen=True)
class EndSession:
    """The user of a full-duplex session left: it ends between frames (`Finished` stop)."""

    request_id: str


@dataclass(frozen=True)
class EndConversation:
    """The conversation's session closed: free the KV kept for its next turn."""

    conversation_id: str


LoopCommand = (
    Submit | Cancel | ReportPlayback | PushAudio | AppendText | EndSession | EndConversation
)


# --- commands: turn preparation (turn-based speech-to-speech models) ---------------------------
# A turn-based conversation (ModelFacts.accepts_turns) keeps its history as the model's own
# turn objects, opaque to the caller, and hands them back in `SpeechRequest.turns`. Making them
# is the model's work, so it is asked for here and runs where the model is loaded.
@dataclass(frozen=True)
class TurnFromSpeech:
    """The user's spoken turn (float32 mono, 16 kHz) → the model's user turn. Runs the model's
    speech tokenizer. Raises ModelInputError (no speech in it). `system`: the system prompt
    from this turn on, for models with ModelFacts.system_prompt (None: unchanged)."""

    pcm_16k: np.ndarray = field(compare=False)
    system: str | None = None


@dataclass(frozen=True)
class TurnFromText:
    """Typed text → the model's user turn. Raises ModelInputError (empty). `system` as
    TurnFromSpeech's."""

    text: str
    system: str | None = None


@dataclass(frozen=True)
class HeardReply:
    """A reply's generated ids → the model's assistant turn for the history: all of it
    (`heard_s` None), or only what the user heard of it (barge-in)."""

    output_ids: tuple
    heard_s: float | None = None


@dataclass(frozen=True)
class ReplyTranscript:
    """The text a reply's ids carry, of what the user heard of it (`heard_s` as HeardReply)."""

    output_ids: tuple
    heard_s: float | None = None


@dataclass(frozen=True)
class ToolsTurn:
    """The session's tools → the model's tools element, which leads `SpeechRequest.turns`
    (the model writes it where its chat format lists tools). Models with
    ModelFacts.tool_call_syntax. Raises ModelInputError (too large)."""

    tools: tuple[FunctionTool, ...]


@dataclass(frozen=True)
class TurnFromToolOutputs:
    """The results of the last reply's tool calls, in call order → the model's turn that
    carries them; it is answered as a user turn is. Models with ModelFacts.tool_call_syntax."""

    outputs: tuple[str, ...]


@dataclass(frozen=True)
class TurnFromToolCall:
    """A tool call the client puts in the conversation (the Realtime API's `function_call`
    item) → the model's assistant turn holding it, as the model writes calls. Models with
    ModelFacts.tool_call_syntax."""

    name: str
    arguments: str


@dataclass(frozen=True)
class ReplyFromText:
    """Text the client puts in the conversation as the model's own words (the Realtime API's
    assistant message) → the model's assistant turn holding it as text, with no speech.
    Raises ModelInputError (empty, too long)."""

    text: str


@dataclass(frozen=True)
class ErasedTurn:
    """A turn of the history (one the model made) → what stays in its place once it is taken
    out of the conversation (the Realtime API's conversation.item.delete): an empty message
    of the same role, so the turns still alternate; a user turn keeps its system prompt."""

    turn: Any


TurnCommand = (
    TurnFromSpeech
    | TurnFromText
    | HeardReply
    | ReplyTranscript
    | ToolsTurn
    | TurnFromToolOutputs
    | TurnFromToolCall
    | ReplyFromText
    | ErasedTurn
)


# --- commands: voices from clients (cloning-capable models, models/voice_clip.py) -------------
# Encoding a clip is the model's work (its codec or speech tokenizer), so it runs where the
# model is loaded, beside the loop as turn preparation does.
@dataclass(frozen=True)
class AddClipVoice:
    """Encode a checked clip once and serve `voice=name` with it (unlisted in the facts).
    Answer: the bytes the voice holds. Raises ModelInputError (the model cannot clone, or
    cannot use this clip)."""

    name: str
    clip: VoiceClip


@dataclass(frozen=True)
class InstallClipVoice:
    """Put in place a voice AddClipVoice encoded as a PendingVoice, on the loop's own thread
    between steps. The engine's clients send it themselves, after AddClipVoice answered with
    a PendingVoice (callers never do); its answer is AddClipVoice's: the bytes the voice holds.
    Not a VoiceCommand: hosts apply it where they apply Submit, not beside the loop."""

    voice: PendingVoice


@dataclass(frozen=True)
class RemoveClipVoice:
    """Forget a voice AddClipVoice made."""

    name: str


VoiceCommand = AddClipVoice | RemoveClipVoice
Command = LoopCommand | TurnCommand | VoiceCommand | InstallClipVoice


# --- the response stream -----------------------------------------------------------------------
class ResponseStream:
    """Audio chunks (and text deltas) then exactly one `Finished`, for one request."""

    def __init__(self, loop: asyncio.AbstractEventLoop, request_id: str = "") -> None:
        self.request_id = request_id  # set on admission when not known up front
        self._loop = loop
        self._queue: asyncio.Queue[EngineEvent] = asyncio.Queue()
        self.lost = False  # the engine went away before the stream's end (lose)
        self._on_lost: list[Callable[[], None]] = []

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call `callback` on the consumer's event loop when the engine is lost before this
        stream ends (at once if it already was). The stream's failed `Finished` is queued
        behind the audio that came before it, which a paced consumer would play out first:
        this says sooner that none of it will be followed."""
        if self.lost:
            callback()
        else:
            self._on_lost.append(callback)

    def lose(self, finished: Finished) -> None:
        """The engine is gone: `finished` (failed) ends the stream and the on_lost callbacks
        run. From any thread."""

        def deliver() -> None:
            self.lost = True
            self._queue.put_nowait(finished)
            for callback in self._on_lost:
                callback()

        with contextlib.suppress(RuntimeError):  # the consumer's loop has closed
            self._loop.call_soon_threadsafe(deliver)

    def push(self, event: EngineEvent) -> None:
        """Deliver from any thread. A consumer whose event loop has closed is simply gone: that
        must never raise into (and stop) the thread delivering it."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    @staticmethod
    def push_all(pairs: Sequence[tuple[ResponseStream, EngineEvent]]) -> None:
        """Deliver many events from any thread, one wake-up of each consumer's event loop for
        them all (an engine step's events: a full-duplex frame has one or two per session,
        and a wake-up per event kept the gateway's loop busy at a hundred sessions)."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[ResponseStream, EngineEvent]]] = {}
        for stream, event in pairs:
            by_loop.setdefault(stream._loop, []).append((stream, event))
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that consumer's loop has closed
                loop.call_soon_threadsafe(_put_each, items)

    async def get(self) -> EngineEvent:
        return await self._queue.get()

    def __aiter__(self) -> AsyncIterator[EngineEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[EngineEvent]:
        while True:
            event = await self._queue.get()
            yield event
            if isinstance(event, Finished):
                return


def _put_each(items: list[tuple[ResponseStream, EngineEvent]]) -> None:
    for stream, event in items:
        stream._queue.put_nowait(event)


# --- the client ----------------------------------------------------------------------------------
class EngineClient(Protocol):
    """A running engine, as its callers see it. Methods that return nothing only queue their
    command: it is applied between two engine steps, in the order sent."""

    @property
    def facts(self) -> ModelFacts: ...

    @property
    def ready(self) -> bool:
        """The loop is running and has not failed."""
        ...

    async def submit(self, request: SpeechRequest) -> ResponseStream:
        """Admit a request. Raises ModelInputError (bad input), EngineOverloaded (no room) or
        EngineDead."""
        ...

    def cancel(self, request_id: str) -> None: ...

    def report_playback(self, request_id: str, played_s: float) -> None: ...

    def push_audio(self, request_id: str, pcm: np.ndarray) -> None: ...

    def append_text(self, request_id: str, text: str, final: bool) -> None:
        """More text for a request submitted with SpeechRequest.text_stream (ModelFacts.
        appends_text); `final` closes it. Text the model cannot take ends the request
        `failed` with the reason; text for an ended request is dropped."""
        ...

    def end_session(self, request_id: str) -> None: ...

    def end_conversation(self, conversation_id: str) -> None: ...

    async def prepare_turn(self, command: TurnCommand) -> Any:
        """Run a turn-preparation command on the model and return its value (a turn object,
        or a transcript). Raises ModelInputError or EngineDead."""
        ...

    async def add_clip_voice(self, name: str, clip: VoiceClip) -> int:
        """Make voice `name` from a checked clip (AddClipVoice); returns the bytes it holds.
        Raises ModelInputError or EngineDead."""
        ...

    def remove_clip_voice(self, name: str) -> None: ...

    def stats(self) -> EngineStats: ...

    async def shutdown(self) -> None: ...
