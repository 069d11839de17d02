"""Function calling on one `/v1/realtime` connection, for models trained with tool calls
(ModelFacts.tool_call_syntax):

- `SessionTools`: the session's `tools` and `tool_choice`, what the prompt lists, the calls
  awaiting a `function_call_output` (the model's, and `function_call` items the client put in
  the conversation), and the outputs waiting for `response.create`.
- `ResponseCalls`: one response's transcript text fed through the model's tool-call parser
  (models/tool_calls.py) as it streams; text stays transcript, each call becomes a
  `function_call` output item (response.output_item.added, function_call_arguments.delta …
  .done, response.output_item.done), listed in `response.done` after the audio message.

A malformed call (models/tool_calls.py CallMalformed) that never began an item stays text in
the transcript, so the client sees what the model said; one that began an item (its arguments
turned out not to be a JSON object, or the reply ended inside it) is closed `incomplete` and
cannot be answered."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from engine.api import ModelFacts
from gateway.protocol import ErrorCode, ProtocolError
from gateway.realtime_events import (
    CallItem,
    OutputItem,
    call_item,
    encode_call_added,
    encode_call_created,
    encode_call_delta,
    encode_call_done,
    encode_function_output_created,
    encode_transcript_delta,
)
from gateway.realtime_protocol import Dialect, SessionUpdateEvent
from gateway.realtime_tools import FunctionCallEvent, FunctionOutputEvent
from models.families import tool_call_families
from models.tool_calls import (
    CallArguments,
    CallDone,
    CallMalformed,
    CallStarted,
    FunctionTool,
    ParsedPiece,
    ReplyText,
    ToolCallParser,
    parser_for,
)

MAX_OPEN_CALLS = 64  # calls awaiting their function_call_output; older ones are forgotten
Tools = tuple[FunctionTool, ...]


def tool_resource(tool: FunctionTool) -> dict:
    """A tool as the session resource shows it (the Realtime API's function tool)."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
    }


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


class SessionTools:
    def __init__(self, facts: ModelFacts, max_pending_chars: int) -> None:
        self._facts = facts
        self._max_pending_chars = max_pending_chars
        self.tools: Tools = ()  # in force (once session.updated said so)
        self.choice = "auto"
        self._open: dict[str, str] = {}  # call_id → name, awaiting its output
        # function_call_output items for the next response: (item id, output)
        self._outputs: list[tuple[str, str]] = []

    # --- session.update ----------------------------------------------------------------------
    def update(self, event: SessionUpdateEvent) -> tuple[Tools | None, str]:
        """The tools (None: not sent) and tool_choice after `event`. Raises ProtocolError:
        tools for a model that was not trained with tool calls."""
        if event.tools and self._facts.tool_call_syntax is None:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`session.tools`: {self._facts.name} was not trained with function calling, "
                f"so it is served without tools; models that take them: {tool_call_families()}",
                "session.tools",
            )
        choice = event.tool_choice or self.choice
        if event.tools is None and event.tool_choice is None:
            return None, choice
        return (self.tools if event.tools is None else event.tools), choice

    def accept(self, tools: Tools | None, choice: str | None) -> None:
        """The session took the update (session.updated)."""
        if tools is not None:
            self.tools = tools
        self.choice = choice or self.choice

    def prompt_tools(self, tools: Tools | None = None, choice: str | None = None) -> Tools:
        """What the prompt lists: the tools, unless the client said `none` (then the model is
        not told of them, and replies are not parsed for calls)."""
        tools = self.tools if tools is None else tools
        choice = choice or self.choice
        if self._facts.tool_call_syntax is None or choice == "none":
            return ()
        return tools

    def parser(self) -> ToolCallParser | None:
        """A parser for the next response's text; None while no tools are in the prompt."""
        syntax, tools = self._facts.tool_call_syntax, self.prompt_tools()
        return parser_for(syntax, tools) if syntax and tools else None

    # --- calls and their outputs ---------------------------------------------------------------
    def opened(self, call: CallItem) -> None:
        self._open[call.call_id] = call.name
        while len(self._open) > MAX_OPEN_CALLS:
            del self._open[next(iter(self._open))]

    @property
    def has_outputs(self) -> bool:
        return bool(self._outputs)

    def add_output(
        self, event: FunctionOutputEvent, previous_item_id: str | None
    ) -> tuple[str, str]:
        """A call's result, kept for the next response.create → (its item id, the
        conversation.item.created text). Raises ProtocolError."""
        if self._facts.tool_call_syntax is None:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"{self._facts.name} makes no function calls, so there is no call to answer",
            )
        if event.call_id not in self._open:
            waiting = ", ".join(self._open) or "none"
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"no function call awaits an output with call_id {event.call_id[:64]!r}; the "
                f"calls awaiting one: {waiting}",
                "item.call_id",
            )
        pending = sum(len(output) for _, output in self._outputs) + len(event.output)
        if pending > self._max_pending_chars:
            raise ProtocolError(
                ErrorCode.TOO_LARGE,
                f"a response is limited to {self._max_pending_chars} characters of function "
                "call outputs; send response.create before adding more",
            )
        del self._open[event.call_id]
        item_id = event.item_id or _new_id("item")
        self._outputs.append((item_id, event.output))
        created = encode_function_output_created(
            item_id, event.call_id, event.output, previous_item_id
        )
        return item_id, created

    def add_call(self, event: FunctionCallEvent, previous_item_id: str | None) -> tuple[str, str]:
        """A call the client puts in the conversation, opened for its output → (its item id,
        the conversation.item.created text). Raises ProtocolError."""
        if self._facts.tool_call_syntax is None:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"{self._facts.name} was not trained with function calling; its conversation "
                "takes no function_call items",
            )
        if event.name not in {t.name for t in self.prompt_tools()}:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"a function_call item must call one of the session's tools (`session.tools`, "
                f"tool_choice auto); {event.name!r} is not one",
                "item.name",
            )
        if self._outputs:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                "function call outputs are waiting for response.create: send it before "
                "adding a function_call item",
            )
        call_id = event.call_id or _new_id("call")
        if call_id in self._open:
            raise ProtocolError(
                ErrorCode.BAD_FIELD, f"call_id {call_id[:64]!r} is already open", "item.call_id"
            )
        item_id = event.item_id or _new_id("item")
        self._open[call_id] = event.name
        created = encode_call_created(
            item_id, call_id, event.name, event.arguments, previous_item_id
        )
        return item_id, created

    def holds_output(self, item_id: str) -> bool:
        """Whether the item is an output waiting for response.create."""
        return any(item == item_id for item, _ in self._outputs)

    def take_outputs(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The outputs waiting for response.create, and their items' ids."""
        taken, self._outputs = self._outputs, []
        return tuple(output for _, output in taken), tuple(item for item, _ in taken)

    def give_back(self, outputs: tuple[str, ...], items: Sequence[str]) -> None:
        """Outputs taken for a response the session refused: they wait for the next one."""
        self._outputs[:0] = zip(items, outputs, strict=True)

    def check_response(self, tools: Tools | None, choice: str | None) -> None:
        """A response.create's own `tools` and `tool_choice`: refused unless they are the
        session's (None: not sent). A response is answered with the session's tools."""
        for name, value, current in (
            ("tools", tools, self.tools),
            ("tool_choice", choice, self.choice),
        ):
            if value is not None and value != current:
                raise ProtocolError(
                    ErrorCode.BAD_FIELD,
                    f"`response.{name}` is not applied: a response uses the session's tools "
                    "and tool_choice; set them with session.update, or leave it out",
                    f"response.{name}",
                )


class ResponseCalls:
    """One response's text → transcript deltas and function_call items (see the module)."""

    def __init__(
        self,
        dialect: Dialect,
        out: OutputItem,
        parser: ToolCallParser,
        transcript: list[str],
        previous_item_id: str | None,
        opened: Callable[[CallItem], None],
    ) -> None:
        self._dialect, self._out, self._parser = dialect, out, parser
        self._transcript = transcript  # the response's transcript, appended to
        self.last_item_id = previous_item_id  # the newest item in the conversation
        self._opened = opened
        self._call: CallItem | None = None  # the call whose arguments are streaming
        self._args: list[str] = []
        self.items: list[dict] = []  # the response's function_call items, done

    def feed(self, text: str) -> list[str]:
        return self._events(self._parser.feed(text))

    def finish(self) -> list[str]:
        return self._events(self._parser.finish())

    def _events(self, pieces: list[ParsedPiece]) -> list[str]:
        out: list[str] = []
        for piece in pieces:
            if isinstance(piece, ReplyText) or (
                isinstance(piece, CallMalformed) and not piece.started
            ):
                self._transcript.append(piece.text)
                out.append(encode_transcript_delta(self._dialect, self._out, piece.text))
            elif isinstance(piece, CallStarted):
                out += self._start(piece.name)
            elif isinstance(piece, CallArguments) and self._call is not None:
                self._args.append(piece.delta)
                out.append(encode_call_delta(self._call, piece.delta))
            elif isinstance(piece, CallDone | CallMalformed) and self._call is not None:
                out += self._end(piece)
        return out

    def _start(self, name: str) -> list[str]:
        call = CallItem(
            self._out.response_id,
            _new_id("item"),
            _new_id("call"),
            name,
            output_index=self._out.output_index + 1 + len(self.items),
        )
        self._call, self._args = call, []
        previous, self.last_item_id = self.last_item_id, call.item_id
        return encode_call_added(call, previous)

    def _end(self, piece: CallDone | CallMalformed) -> list[str]:
        call, self._call = self._call, None
        assert call is not None
        done = isinstance(piece, CallDone)
        arguments = piece.arguments if isinstance(piece, CallDone) else "".join(self._args)
        status = "completed" if done else "incomplete"
        self.items.append(call_item(call, status, arguments))
        if done:
            self._opened(call)
        return encode_call_done(self._dialect, call, arguments, status)
