"""The options a client asks for (voice, sampling, model_options, speed), checked against the
served model and turned into the options of its replies (`SpeechOptions`), the same for every
endpoint: `session.start` and `session.update` on the WebSockets (gateway/session_start.py)
and `POST /v1/audio/speech` (gateway/speech_request.py).

What is checked here is what depends on the model: a voice it has, a speed it can play at,
sampling in range with `max_tokens` below its context, model options it declares. The shape
of each field (a string, a number) is the endpoint's parser's. A refusal is one neutral
`OptionRefused`, which each endpoint answers in its own form: a `bad_field` error event on a
WebSocket, a 400 naming the field on HTTP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.api import (
    ConfigError,
    ModelFacts,
    OptionValue,
    RequestOptionError,
    SamplingParams,
    resolve_request_options,
)
from gateway.protocol import AudioSpec
from gateway.reply import SpeechOptions


class OptionRefused(Exception):
    """An asked-for option the served model does not take.

    `group`: which of the client's options it is in (`voice`, `speed`, `sampling`,
    `model_options`); `field`: the option itself as an HTTP body names it (`max_tokens`,
    `model_options.exaggeration`), None when no one field is to blame; `message`: what is
    wrong and what is accepted."""

    def __init__(self, group: str, field: str | None, message: str) -> None:
        super().__init__(message)
        self.group = group
        self.field = field
        self.message = message


@dataclass(frozen=True)
class AskedOptions:
    """What a client asked for, each field of the right type already (its endpoint's parser
    checked the shapes); None or empty where it leaves the choice to the model."""

    voice: str | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)
    model_options: Mapping[str, Any] = field(default_factory=dict)
    speed: float | None = None


def resolve_speech_options(
    asked: AskedOptions,
    facts: ModelFacts,
    output: AudioSpec,
    *,
    word_timings: bool = False,
    realtime: bool = True,
) -> SpeechOptions:
    """The replies' options for what the client asked, or OptionRefused for the first option
    the model does not take. `word_timings`: the endpoint sends the model's word timings (a
    WebSocket session; an HTTP file has nowhere to put them); `realtime`: someone plays the
    audio as it comes (SpeechRequest.realtime)."""
    check_voice(asked.voice, facts)
    check_speed(asked.speed, facts)
    return SpeechOptions(
        checked_sampling(asked.sampling, facts),
        asked.voice or facts.default_voice,
        output,
        checked_model_options(asked.model_options, facts),
        word_timings=word_timings,
        speed=asked.speed if asked.speed is not None else 1.0,
        realtime=realtime,
    )


def check_voice(voice: str | None, facts: ModelFacts) -> None:
    """Refuses a voice the model does not have (a model that lists none takes any)."""
    if voice is not None and facts.voices and voice not in facts.voices:
        raise OptionRefused(
            "voice",
            "voice",
            f"voice {voice[:64]!r} is not one of {facts.name}'s: {', '.join(facts.voices)}",
        )


def check_speed(speed: float | None, facts: ModelFacts) -> None:
    """A full-duplex model talks and listens on one real-time clock: its audio cannot be
    played faster or slower than it is made."""
    if speed is not None and speed != 1.0 and facts.full_duplex:
        raise OptionRefused(
            "speed",
            "speed",
            f"{facts.name} is full-duplex: its audio plays in real time, so `speed` must be 1",
        )


def checked_sampling(
    given: Mapping[str, Any], facts: ModelFacts, over: SamplingParams | None = None
) -> SamplingParams:
    """`given` laid field by field over `over` (a session's sampling so far), or else over the
    model's recommended sampling; every value in range, and `max_tokens` leaving a prompt room
    in the model's context: refused now, with the context named, rather than at every reply."""
    try:
        if over is None:
            sampling = SamplingParams(**{**facts.sampling_defaults, **given})
        else:
            sampling = dataclasses.replace(over, **given)
    except (ConfigError, TypeError) as exc:
        message = str(exc)
        # ConfigError names the field it refuses first (SamplingParams' checks).
        blamed = next((name for name in given if message.startswith(name)), None)
        raise OptionRefused("sampling", blamed or next(iter(given), None), message) from None
    if sampling.max_tokens >= facts.max_context:
        raise OptionRefused(
            "sampling",
            "max_tokens",
            f"max_tokens must be below {facts.name}'s context of {facts.max_context} tokens "
            f"(the prompt takes the rest), got {sampling.max_tokens}",
        )
    return sampling


def checked_model_options(
    given: Mapping[str, Any], facts: ModelFacts, over: Mapping[str, OptionValue] | None = None
) -> dict[str, OptionValue]:
    """`given` (a client's `model_options`) laid over `over` (the session's), checked against
    the served model's options (numbers in a range, text from a list or of bounded length);
    a model that takes none refuses any, by name. Only the options set are kept, in the form
    the model takes them (a text choice spelt as the model lists it); the model fills in the
    rest."""
    merged = {**(over or {}), **given}
    try:
        values = resolve_request_options(facts.request_options, merged, facts.name)
    except RequestOptionError as exc:
        blamed = f"model_options.{exc.option}" if exc.option else "model_options"
        raise OptionRefused("model_options", blamed, str(exc)) from None
    return {name: values[name] for name in merged}
