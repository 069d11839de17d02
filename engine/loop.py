"""The engine loop's interface, and `apply`: how a command of the contract (engine/api.py) is
executed against it, the same way for the thread client and the process client.

Two loops implement `EngineLoop`: `engine/core.py:EngineCore` (text-to-speech and turn-based
models: continuous batching, an LLM step at a time) and `engine/duplex.py:DuplexEngine`
(full-duplex models: every session stepped together once per frame). The factory picks one
by the model's facts (`engine/factory.py:build_core`); the clients drive either the same way:

    while running:
        apply each queued command
        sleep while not has_work(), or until seconds_until_due()
        deliver the events of step()
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from engine.api import (
    AddClipVoice,
    AppendText,
    Cancel,
    Command,
    EndConversation,
    EndSession,
    ErasedTurn,
    HeardReply,
    InstallClipVoice,
    PushAudio,
    RemoveClipVoice,
    ReplyFromText,
    ReplyTranscript,
    ReportPlayback,
    Submit,
    ToolsTurn,
    TurnCommand,
    TurnFromSpeech,
    TurnFromText,
    TurnFromToolCall,
    TurnFromToolOutputs,
    VoiceCommand,
)
from engine.outputs import EngineEvent, EngineStats, LoopTotals, SpeechRequest
from engine.request import Request
from models.base import ModelInputError, SpeechModel


class EngineLoop(Protocol):
    model: SpeechModel
    totals: LoopTotals  # where the loop's time went (EngineStats.totals reads a snapshot)

    def add_request(self, spec: SpeechRequest) -> Request:
        """Raises ModelInputError (bad input) or EngineOverloaded (no room now)."""
        ...

    def cancel(self, request_id: str) -> list[EngineEvent]: ...

    def report_playback(self, request_id: str, played_s: float) -> None: ...

    def push_audio(self, request_id: str, pcm: np.ndarray) -> None: ...

    def append_text(self, request_id: str, text: str, final: bool) -> list[EngineEvent]: ...

    def end_session(self, request_id: str) -> list[EngineEvent]: ...

    def end_conversation(self, conversation_id: str) -> None: ...

    def has_work(self) -> bool: ...

    def seconds_until_due(self) -> float | None:
        """How long the loop may sleep before its next step is due (None: step at once)."""
        ...

    def step(self) -> list[EngineEvent]: ...

    def stats(self, stepping: bool = True) -> EngineStats: ...

    def warm_up(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Applied:
    """What a command gave back: `value` for its caller (Submit: the admitted request's id; a
    turn command: its turn or transcript) and `events` for the request streams."""

    value: Any = None
    events: tuple[EngineEvent, ...] = ()


def apply(loop: EngineLoop, command: Command) -> Applied:
    """Execute one command. Raises what the loop raises (ModelInputError, EngineOverloaded),
    for the client to hand to its caller. Turn commands touch the model alone, not the loop's
    state: a client may run them off the loop's thread; so may voice commands. An
    AddClipVoice that gives back a PendingVoice is not done: the client then applies
    InstallClipVoice on the loop's thread (engine/client.py, engine/engine_host.py). The
    time a command of the loop's own state takes counts in the loop's `commands_s`."""
    if isinstance(command, TurnCommand | VoiceCommand):  # model work, possibly off the loop
        return _apply(loop, command)
    started = time.perf_counter()
    try:
        return _apply(loop, command)
    finally:
        loop.totals.commands_s += time.perf_counter() - started


def _apply(loop: EngineLoop, command: Command) -> Applied:
    match command:
        case Submit(request):
            return Applied(loop.add_request(request).request_id)
        case Cancel(request_id):
            return Applied(events=tuple(loop.cancel(request_id)))
        case ReportPlayback(request_id, played_s):
            loop.report_playback(request_id, played_s)
        case PushAudio(request_id, pcm):
            loop.push_audio(request_id, pcm)
        case AppendText(request_id, text, final):
            return Applied(events=tuple(loop.append_text(request_id, text, final)))
        case EndSession(request_id):
            return Applied(events=tuple(loop.end_session(request_id)))
        case EndConversation(conversation_id):
            loop.end_conversation(conversation_id)
        case (
            TurnFromSpeech()
            | TurnFromText()
            | HeardReply()
            | ReplyTranscript()
            | ToolsTurn()
            | TurnFromToolOutputs()
            | TurnFromToolCall()
            | ReplyFromText()
            | ErasedTurn()
        ):
            return Applied(prepare_turn(loop.model, command))
        case AddClipVoice(name, clip):
            model = loop.model
            if not model.facts.voice_cloning:
                raise ModelInputError(f"{model.facts.name} cannot make a voice from a clip")
            return Applied(model.add_clip_voice(name, clip))  # bytes, or a PendingVoice
        case InstallClipVoice(voice):
            return Applied(voice.install())
        case RemoveClipVoice(name):
            loop.model.remove_clip_voice(name)
        case _:
            raise TypeError(f"not an engine command: {command!r}")
    return Applied()


def prepare_speech_turns(
    model: SpeechModel, commands: Sequence[TurnFromSpeech]
) -> list[Any | Exception]:
    """Several sessions' TurnFromSpeech at once → each one's user turn, or the exception its
    caller gets. Models with a batched audio stage (SpeechModel.user_audio_turns overridden:
    Step-Audio 2's encoder) run it once for all of them; the others one by one, as
    prepare_turn."""
    if not model.facts.accepts_turns or len(commands) < 2 or not model.has_batched_audio_turns():
        return [_attempt(model, c) for c in commands]
    results: list[Any | Exception] = [None] * len(commands)
    ready: list[int] = []
    for i, command in enumerate(commands):
        if command.system is not None and not model.facts.system_prompt:
            results[i] = ModelInputError(f"{model.facts.name} takes no system prompt; leave it out")
        else:
            ready.append(i)
    try:
        turns = model.user_audio_turns(
            [commands[i].pcm_16k for i in ready], [commands[i].system for i in ready]
        )
    except Exception as exc:  # the whole batch failed: each caller hears why
        turns = [exc] * len(ready)
    for i, turn in zip(ready, turns, strict=True):
        results[i] = turn
    return results


def _attempt(model: SpeechModel, command: TurnFromSpeech) -> Any | Exception:
    try:
        return prepare_turn(model, command)
    except Exception as exc:  # handed to that command's caller
        return exc


def prepare_turn(model: SpeechModel, command: TurnCommand) -> Any:
    facts = model.facts
    if not facts.accepts_turns:  # (its turn methods would be SpeechModel's, which refuse)
        raise ModelInputError(f"{facts.name} is not a turn-based model: it takes no turns")
    tool_commands = ToolsTurn | TurnFromToolOutputs | TurnFromToolCall
    if isinstance(command, tool_commands) and facts.tool_call_syntax is None:
        raise ModelInputError(f"{facts.name} was not trained with tool calls; it takes no tools")
    system = getattr(command, "system", None)
    if system is not None and not facts.system_prompt:
        raise ModelInputError(f"{facts.name} takes no system prompt; leave it out")
    extra = {} if system is None else {"system": system}
    match command:
        case TurnFromSpeech(pcm):
            return model.user_audio_turn(pcm, **extra)
        case TurnFromText(text):
            return model.user_text_turn(text, **extra)
        case HeardReply(output_ids, heard_s):
            return model.heard_reply(output_ids, heard_s)
        case ReplyTranscript(output_ids, heard_s):
            kept = model.heard_reply(output_ids, heard_s)
            return model.reply_text(tuple(kept.token_ids))
        case ToolsTurn(tools):
            return model.tools_turn(tools)
        case TurnFromToolOutputs(outputs):
            return model.tool_output_turn(outputs)
        case TurnFromToolCall(name, arguments):
            return model.tool_call_turn(name, arguments)
        case ReplyFromText(text):
            return model.assistant_text_turn(text)
        case ErasedTurn(turn):
            return model.erased_turn(turn)
