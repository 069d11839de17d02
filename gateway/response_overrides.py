"""A response's own options, over the session's: the one carrier of "this response only" for
every protocol — the native `text` event's `model_options` (the text that opens a response)
and the OpenAI Realtime `response.create`'s `response` (voice, sampling, instructions,
metadata). The session checks them as the input that starts the response arrives
(gateway.session_start.check_overrides) and lays them over the options in force when the
response starts (`over`); the next response has the session's again.

Imports nothing of the gateway at run time, so the native decoder (gateway.protocol) can build
one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.reply import SpeechOptions


@dataclass(frozen=True)
class ResponseOverrides:
    voice: str | None = None
    sampling: Mapping[str, float | int] = field(default_factory=dict)  # temperature, max_tokens
    # Models with ModelFacts.system_prompt: the system prompt of the user turn it answers.
    instructions: str | None = None
    # The adapter's own data, handed back untouched in the response's `ResponseStarted`.
    echo: object = None
    # Where the client's event set each option, as SessionUpdate.param_paths.
    param_paths: Mapping[str, str] = field(default_factory=dict, compare=False)
    # The served model's own per-request options over the session's (None: the session's), as
    # the client gave them until check_overrides returns them in the form the model takes.
    model_options: Mapping[str, Any] | None = None

    def over(self, options: SpeechOptions) -> SpeechOptions:
        """`options` (the session's, as the response starts) with these laid over them."""
        sampling = dict(self.sampling)
        if "max_tokens" in sampling:  # a session's min_tokens never outgrows the budget
            sampling["min_tokens"] = min(options.sampling.min_tokens, sampling["max_tokens"])
        model_options = options.model_options
        if self.model_options is not None:
            model_options = {**options.model_options, **self.model_options}
        return dataclasses.replace(
            options,
            voice=self.voice if self.voice is not None else options.voice,
            sampling=dataclasses.replace(options.sampling, **sampling),
            instructions=(
                self.instructions if self.instructions is not None else options.instructions
            ),
            model_options=model_options,
        )
