"""Function calling, model-neutral and torch-free: the tools a client offers, and what a
model's reply text becomes once its tool calls are picked out of it.

A model family that was trained with tool calls names its syntax in
`ModelFacts.tool_call_syntax`; `parser_for(syntax)` makes an incremental parser for it. The
gateway feeds the reply's transcript text to the parser as it streams and maps the pieces it
gets back onto its protocol (the Realtime API's `function_call` items, gateway/realtime_calls.py).
How a family writes tools and tool results into its prompt is the family's own business
(models/step_audio2/tool_format.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class FunctionTool:
    """One function the model may call: its name, what it does, and its parameters' JSON
    schema (an object schema)."""

    name: str
    description: str
    parameters: dict[str, Any]


# --- what a parser hands back, in reply order --------------------------------------------------
@dataclass(frozen=True)
class ReplyText:
    """Text for the transcript (what the reply says)."""

    text: str


@dataclass(frozen=True)
class CallStarted:
    """A call of a known function has begun; its arguments follow."""

    name: str


@dataclass(frozen=True)
class CallArguments:
    """More of the current call's arguments (raw JSON text, as the model writes it)."""

    delta: str


@dataclass(frozen=True)
class CallDone:
    """The current call is complete: `arguments` is its whole JSON object text."""

    name: str
    arguments: str


@dataclass(frozen=True)
class CallMalformed:
    """A call that cannot be honoured (unknown function, arguments that are not a JSON
    object, no end before the reply ended). `started` says whether a CallStarted for it was
    already handed back (the caller must close that item); `text` is the call's raw text."""

    reason: str
    text: str
    started: bool


ParsedPiece = ReplyText | CallStarted | CallArguments | CallDone | CallMalformed


class ToolCallParser(Protocol):
    def feed(self, text: str) -> list[ParsedPiece]:
        """The next piece of the reply's text (any split) → what can be told so far."""
        ...

    def finish(self) -> list[ParsedPiece]:
        """The reply ended: whatever was held back (text that might have begun a call; a
        call left open → CallMalformed)."""
        ...


def parser_for(syntax: str, tools: tuple[FunctionTool, ...]) -> ToolCallParser:
    """The incremental parser of a model's tool-call syntax, calling only `tools`."""
    if syntax == "step_audio2":
        from models.step_audio2.tool_format import StepAudio2CallParser

        return StepAudio2CallParser(frozenset(t.name for t in tools))
    raise ValueError(f"unknown tool-call syntax {syntax!r}")
