"""The Realtime API's function calling, client side, as data: `session.tools` and
`session.tool_choice` checked and decoded, and the `function_call_output` items that answer
a call. Pure functions raising ProtocolError(bad_field) with a message that says what to fix;
gateway.realtime_calls decides whether the served model takes tools at all."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gateway.protocol import ErrorCode, ProtocolError
from models.tool_calls import FunctionTool

MAX_TOOLS = 128  # the Realtime API's own limit
MAX_TOOLS_JSON_CHARS = 32768  # all tools together, as JSON (the model's tools message)
MAX_OUTPUT_CHARS = 32768  # one function_call_output's `output`
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOOL_CHOICES = ("auto", "none")  # `required` and a named function are refused: not honoured


def _bad(message: str, param: str) -> ProtocolError:
    """`param`: the offending field's path from the event's root (`session.tools[0].name`)."""
    return ProtocolError(ErrorCode.BAD_FIELD, message, param)


def decode_tools(value: Any, root: str = "session.tools") -> tuple[FunctionTool, ...]:
    """`session.tools` (a list of `{"type": "function", "name", "description", "parameters"}`)
    → the tools, or ProtocolError. null and [] both mean no tools. `root`: where the event
    holds them (`response.tools` in response.create)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _bad(f"`{root}` must be a list of function tools", root)
    if len(value) > MAX_TOOLS:
        raise _bad(f"`{root}` has {len(value)} tools; the limit is {MAX_TOOLS}", root)
    tools: list[FunctionTool] = []
    for i, tool in enumerate(value):
        path = f"{root}[{i}]"
        where = f"`{path}`"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise _bad(
                f"{where} must be an object with type `function` (only functions are served)",
                path if not isinstance(tool, dict) else f"{path}.type",
            )
        name = tool.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise _bad(f"{where}.name must be 1-64 letters, digits, `_` or `-`", f"{path}.name")
        if any(t.name == name for t in tools):
            raise _bad(
                f"{where}.name {name!r} is used twice; tool names must be unique", f"{path}.name"
            )
        description = tool.get("description", "")
        if description is None:
            description = ""
        if not isinstance(description, str):
            raise _bad(f"{where}.description must be a string", f"{path}.description")
        parameters = tool.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise _bad(f"{where}.parameters must be a JSON schema object", f"{path}.parameters")
        if parameters.get("type", "object") != "object":
            raise _bad(
                f"{where}.parameters must be an object schema (type `object`)",
                f"{path}.parameters.type",
            )
        tools.append(FunctionTool(name, description, parameters))
    size = len(json.dumps([t.__dict__ for t in tools], ensure_ascii=False))
    if size > MAX_TOOLS_JSON_CHARS:
        raise _bad(
            f"`{root}` take {size} characters as JSON; the limit is "
            f"{MAX_TOOLS_JSON_CHARS}: offer fewer tools or shorter descriptions and schemas",
            root,
        )
    return tuple(tools)


def decode_tool_choice(value: Any, path: str = "session.tool_choice") -> str | None:
    """`session.tool_choice` (or, `path`, another event's) → "auto" / "none" (None: not
    sent). `required` and a named function are refused: nothing makes the model call a tool."""
    if value is None:
        return None
    if value in TOOL_CHOICES:
        return value
    if value == "required" or isinstance(value, dict):
        raise _bad(
            f"`{path}` can be `auto` or `none` here: the model decides by itself "
            "whether to call a tool, so `required` or a named function cannot be honoured",
            path,
        )
    raise _bad(f"`{path}` must be `auto` or `none`", path)


@dataclass(frozen=True)
class FunctionOutputEvent:
    """`conversation.item.create` with a `function_call_output` item: a call's result."""

    event_id: str | None
    item_id: str | None
    call_id: str
    output: str
    previous_item_id: str | None = None  # where it goes (None: at the end)


def decode_function_output(event_id: str | None, item: dict) -> FunctionOutputEvent:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise _bad(
            "a function_call_output item needs the `call_id` of the call it answers",
            "item.call_id",
        )
    if not isinstance(output, str):
        raise _bad(
            "a function_call_output item needs a string `output` (JSON text or plain)",
            "item.output",
        )
    if len(output) > MAX_OUTPUT_CHARS:
        raise ProtocolError(
            ErrorCode.TOO_LARGE,
            f"`output` is {len(output)} characters; the limit is {MAX_OUTPUT_CHARS}",
            "item.output",
        )
    item_id = item.get("id")
    return FunctionOutputEvent(
        event_id, item_id if isinstance(item_id, str) else None, call_id, output
    )


@dataclass(frozen=True)
class FunctionCallEvent:
    """`conversation.item.create` with a `function_call` item: a call the client puts in the
    conversation (restoring one, say); its output is then sent as for the model's calls."""

    event_id: str | None
    item_id: str | None
    call_id: str | None  # None: the server names it
    name: str
    arguments: str
    previous_item_id: str | None = None  # where it goes (None: at the end)


def decode_function_call(event_id: str | None, item: dict) -> FunctionCallEvent:
    name, arguments, call_id = item.get("name"), item.get("arguments", "{}"), item.get("call_id")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _bad(
            "a function_call item needs the `name` of one of the session's tools", "item.name"
        )
    if not isinstance(arguments, str) or not _is_json_object(arguments):
        raise _bad(
            "a function_call item's `arguments` must be a JSON object, as text", "item.arguments"
        )
    if len(arguments) > MAX_OUTPUT_CHARS:
        raise ProtocolError(
            ErrorCode.TOO_LARGE,
            f"`arguments` are {len(arguments)} characters; the limit is {MAX_OUTPUT_CHARS}",
            "item.arguments",
        )
    if call_id is not None and (not isinstance(call_id, str) or not call_id):
        raise _bad("a function_call item's `call_id` must be a non-empty string", "item.call_id")
    item_id = item.get("id")
    return FunctionCallEvent(
        event_id, item_id if isinstance(item_id, str) else None, call_id, name, arguments
    )


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False
