"""What a `session.start` means for this server: the options it selects and the event that
answers it (whether the engine can take another session at all is gateway/admission.py's).
Pure functions of the event and the model's facts, so the session's state machine only has to
act on the answer."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine.api import (
    ConfigError,
    ModelFacts,
    OptionValue,
    RequestOptionError,
    SamplingParams,
    resolve_request_options,
)
from gateway.config import GatewaySettings
from gateway.protocol import (
    AudioSpec,
    ErrorCode,
    ModelKind,
    ProtocolError,
    SessionStart,
    SessionStarted,
)
from gateway.reply import SpeechOptions

if TYPE_CHECKING:  # gateway.wire imports this module's neighbours; only the type is needed
    from gateway.wire import SessionUpdate


def _check_voice(voice: str | None, facts: ModelFacts) -> None:
    if voice is not None and facts.voices and voice not in facts.voices:
        voices = ", ".join(facts.voices)
        raise ProtocolError(ErrorCode.BAD_FIELD, f"voice must be one of {voices}")


def _check_speed(speed: float | None, facts: ModelFacts) -> None:
    """A full-duplex model talks and listens on one real-time clock: its audio cannot be
    played faster or slower than it is made."""
    if speed is not None and speed != 1.0 and facts.full_duplex:
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            f"{facts.name} is full-duplex: its audio plays in real time, so `speed` must be 1",
        )


def resolve_options(
    event: SessionStart, facts: ModelFacts, served_model: str | None
) -> SpeechOptions:
    """The session's speech options, or ProtocolError(bad_field) naming what is accepted."""
    if event.model is not None and event.model not in (facts.name, served_model):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"this server serves model {facts.name!r}")
    _check_voice(event.voice, facts)
    _check_speed(event.speed, facts)
    try:
        # The model's recommended sampling, overridden field by field by the client's.
        sampling = SamplingParams(**{**facts.sampling_defaults, **event.sampling})
    except ConfigError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"sampling: {exc}") from None
    return SpeechOptions(
        _within_context(sampling, facts),
        event.voice or facts.default_voice,
        event.output_audio or AudioSpec(),
        checked_model_options(event.model_options, facts),
        word_timings=facts.word_timings,
        speed=event.speed if event.speed is not None else 1.0,
    )


def _within_context(sampling: SamplingParams, facts: ModelFacts) -> SamplingParams:
    """`sampling`, unless no prompt could leave room for its max_tokens: refused now, with the
    context named, rather than at every response the session asks for."""
    if sampling.max_tokens >= facts.max_context:
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            f"sampling: max_tokens must be below {facts.name}'s context of {facts.max_context} "
            f"tokens (the prompt takes the rest), got {sampling.max_tokens}",
        )
    return sampling


def checked_model_options(
    given: Mapping[str, Any], facts: ModelFacts, over: Mapping[str, OptionValue] | None = None
) -> dict[str, OptionValue]:
    """`given` (a client's `model_options`) laid over `over` (the session's), checked against
    the served model's options (numbers in a range, text from a list or of bounded length);
    or ProtocolError(bad_field) naming the option and what it takes (a model that takes none
    refuses any, by name). Only the options set are kept, in the form the model takes them
    (a text choice spelt as the model lists it); the model fills in the rest."""
    merged = {**(over or {}), **given}
    try:
        values = resolve_request_options(facts.request_options, merged, facts.name)
    except RequestOptionError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, str(exc)) from None
    return {name: values[name] for name in merged}


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
    )


def update_options(
    options: SpeechOptions, update: SessionUpdate, facts: ModelFacts
) -> SpeechOptions:
    """The session's options with an update applied field by field, or ProtocolError(bad_field)
    (then nothing changes: an update is applied whole or not at all)."""
    _check_voice(update.voice, facts)
    _check_speed(update.speed, facts)
    try:
        sampling = dataclasses.replace(options.sampling, **update.sampling)
    except (ConfigError, TypeError) as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"sampling: {exc}") from None
    return dataclasses.replace(
        options,
        sampling=_within_context(sampling, facts),
        voice=update.voice if update.voice is not None else options.voice,
        output=update.output_audio if update.output_audio is not None else options.output,
        instructions=update.instructions
        if update.instructions is not None
        else options.instructions,
        speed=update.speed if update.speed is not None else options.speed,
        tools=update.tools if update.tools is not None else options.tools,
    )
