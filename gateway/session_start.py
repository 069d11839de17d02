"""What a `session.start` means for this server: the options it selects and the event that
answers it (whether the engine can take another session at all is gateway/admission.py's).
Pure functions of the event and the model's facts, so the session's state machine only has to
act on the answer."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine.api import ModelFacts
from gateway import speech_options
from gateway.config import GatewaySettings
from gateway.input_transcription import NO_TRANSCRIPTION, InputTranscription
from gateway.protocol import (
    AudioSpec,
    ErrorCode,
    ModelKind,
    ProtocolError,
    SessionStart,
    SessionStarted,
)
from gateway.reply import SpeechOptions
from gateway.response_overrides import ResponseOverrides
from gateway.speech_options import (
    AskedOptions,
    OptionRefused,
    check_speed,
    check_voice,
    checked_sampling,
    resolve_speech_options,
)

if TYPE_CHECKING:  # gateway.wire imports this module's neighbours; only the type is needed
    from gateway.wire import SessionUpdate


def _bad_field(
    refused: OptionRefused, param_paths: Mapping[str, str] | None = None
) -> ProtocolError:
    """A refused option as a WebSocket's `bad_field` error (sampling's named as such), blaming
    the field where `param_paths` says the client set it."""
    prefix = "sampling: " if refused.group == "sampling" else ""
    param = (param_paths or {}).get(refused.field) if refused.field else None
    return ProtocolError(ErrorCode.BAD_FIELD, prefix + refused.message, param)


def resolve_options(
    event: SessionStart,
    facts: ModelFacts,
    served_model: str | None,
    transcription_model: str | None = None,
) -> SpeechOptions:
    """The session's speech options, or ProtocolError(bad_field) naming what is accepted
    (`transcription_model`: the server's, which transcripts of spoken turns need)."""
    if event.model is not None and event.model not in (facts.name, served_model):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"this server serves model {facts.name!r}")
    asked = AskedOptions(event.voice, event.sampling, event.model_options, event.speed)
    try:
        options = resolve_speech_options(
            asked, facts, event.output_audio or AudioSpec(), word_timings=facts.word_timings
        )
    except OptionRefused as refused:
        raise _bad_field(refused) from None
    transcription = event.input_transcription
    if transcription is None:
        return options
    check_transcription_offered(facts, transcription_model, "input_transcription")
    return dataclasses.replace(
        options, input_transcription=dataclasses.replace(transcription, model=transcription_model)
    )


def check_transcription_offered(
    facts: ModelFacts, transcription_model: str | None, path: str
) -> None:
    """Transcripts of spoken turns need a turn-based model and a server that makes them;
    else ProtocolError(bad_field) blaming `path`."""
    if not _takes_spoken_turns(facts):
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            f"`{path}`: transcripts are made of a turn-based speech-to-speech model's spoken "
            f"turns, and {facts.name} takes none",
            path,
        )
    if transcription_model is None:
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            f"`{path}`: this server does not transcribe spoken turns; it does when started "
            "with --input-transcription-model (pip install 'voxgate[transcription]')",
            path,
        )


def announced_options(facts: ModelFacts) -> tuple[dict[str, Any], ...]:
    """The model's per-request options as `session.started.model_options` lists them."""
    return tuple(spec.announce() for spec in facts.request_options)


def input_audio_of(event: SessionStart, facts: ModelFacts) -> AudioSpec | None:
    """The audio the session takes from its client: the asked-for format (default: the
    protocol's), or None for a model that reads text only."""
    return (event.input_audio or AudioSpec()) if facts.accepts_audio else None


def started_event(
    session_id: str,
    facts: ModelFacts,
    options: SpeechOptions,
    input_audio: AudioSpec | None,
    settings: GatewaySettings,
    speed: float | None = None,
) -> SessionStarted:
    """`session.started`: what the session was started with and what this server offers
    (`speed`: echoed when the client asked for one)."""
    return SessionStarted(
        session_id,
        facts.name,
        input_audio,
        options.output,
        settings.limits(),
        ModelKind.of(facts),
        facts.token_rate_hz,
        options.voice,
        announced_options(facts),
        word_timings=options.word_timings,
        speed=speed,
        input_transcription=options.input_transcription,
        transcribes=_transcribes(facts, settings) or None,
    )


def _transcribes(facts: ModelFacts, settings: GatewaySettings) -> bool:
    """Whether a session of this server may ask for transcripts of its spoken turns
    (check_transcription_offered's conditions)."""
    return _takes_spoken_turns(facts) and settings.input_transcription_model is not None


def _takes_spoken_turns(facts: ModelFacts) -> bool:
    """A turn-based speech-to-speech model: the one kind whose spoken turns are transcribed."""
    return facts.accepts_turns and not facts.full_duplex


def update_options(
    options: SpeechOptions, update: SessionUpdate, facts: ModelFacts
) -> SpeechOptions:
    """The session's options with an update applied field by field, or ProtocolError(bad_field)
    (then nothing changes: an update is applied whole or not at all)."""
    try:
        check_voice(update.voice, facts)
        check_speed(update.speed, facts)
        sampling = checked_sampling(update.sampling, facts, over=options.sampling)
    except OptionRefused as refused:
        raise _bad_field(refused, update.param_paths) from None
    return dataclasses.replace(
        options,
        sampling=sampling,
        voice=update.voice if update.voice is not None else options.voice,
        output=update.output_audio if update.output_audio is not None else options.output,
        instructions=update.instructions
        if update.instructions is not None
        else options.instructions,
        speed=update.speed if update.speed is not None else options.speed,
        tools=update.tools if update.tools is not None else options.tools,
        input_transcription=_transcription(options.input_transcription, update),
    )


def _transcription(
    current: InputTranscription | None, update: SessionUpdate
) -> InputTranscription | None:
    asked = update.input_transcription
    if asked is None:
        return current
    return None if asked == NO_TRANSCRIPTION else asked


def check_overrides(
    options: SpeechOptions, overrides: ResponseOverrides, facts: ModelFacts
) -> ResponseOverrides:
    """`overrides` as one response may take them over the session's `options` — its
    `model_options` in the form the model takes them — or ProtocolError(bad_field): the same
    checks as an update's (a voice of the model's, sampling in range) and session.start's
    (the model's own options)."""
    try:
        check_voice(overrides.voice, facts)
        checked_sampling(overrides.sampling, facts, over=options.sampling)
        if overrides.model_options is None:
            return overrides
        merged = speech_options.checked_model_options(
            overrides.model_options, facts, options.model_options
        )
    except OptionRefused as refused:
        raise _bad_field(refused, overrides.param_paths) from None
    own = {name: merged[name] for name in overrides.model_options}
    return dataclasses.replace(overrides, model_options=own)
