"""The Realtime API's function calling in the gateway, without a model: `session.tools` /
`tool_choice` checked (gateway/realtime_tools.py), a model without tool calls refusing them,
call outputs matched to open calls, and a response's text mapped onto `function_call` items,
malformed calls included (gateway/realtime_calls.py)."""

from __future__ import annotations

import json

import pytest

from engine.api import ModelFacts
from gateway.protocol import ErrorCode, ProtocolError
from gateway.realtime_calls import ResponseCalls, SessionTools
from gateway.realtime_events import OutputItem
from gateway.realtime_protocol import Dialect, SessionUpdateEvent, decode_client_event
from gateway.realtime_tools import (
    FunctionCallEvent,
    FunctionOutputEvent,
    decode_tool_choice,
    decode_tools,
)
from models.step_audio2.tool_format import call_text

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def facts(name: str, syntax: str | None) -> ModelFacts:
    return ModelFacts(
        name=name,
        sample_rate=24000,
        token_rate_hz=30.0,
        stop_token_ids=(0,),
        first_chunk_tokens=30,
        chunk_tokens=30,
        tool_call_syntax=syntax,
    )


WITH_TOOLS, WITHOUT = facts("talker", "step_audio2"), facts("reader", None)


def session_update(**session) -> SessionUpdateEvent:
    event = decode_client_event(json.dumps({"type": "session.update", "session": session}))
    assert isinstance(event, SessionUpdateEvent)
    return event


def test_tools_decode_with_their_schema():
    (tool,) = decode_tools([WEATHER])
    assert (tool.name, tool.description) == ("get_weather", "The weather now")
    assert tool.parameters["properties"]["city"] == {"type": "string"}
    assert decode_tools(None) == decode_tools([]) == ()
    (bare,) = decode_tools([{"type": "function", "name": "ping"}])
    assert bare.parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    "tools, says",
    [
        ({"name": "x"}, "must be a list"),
        ([{"type": "mcp", "name": "x"}], "only functions are served"),
        ([{"type": "function"}], "1-64 letters"),
        ([{"type": "function", "name": "has space"}], "1-64 letters"),
        ([{"type": "function", "name": "x" * 65}], "1-64 letters"),
        ([WEATHER, WEATHER], "used twice"),
        ([{**WEATHER, "description": 3}], "description must be a string"),
        ([{**WEATHER, "parameters": "city"}], "JSON schema object"),
        ([{**WEATHER, "parameters": {"type": "array"}}], "object schema"),
        ([{**WEATHER, "name": f"t{i}"} for i in range(129)], "the limit is 128"),
        ([{**WEATHER, "description": "d" * 40000}], "offer fewer tools"),
    ],
)
def test_bad_tools_are_refused_saying_what_to_fix(tools, says):
    with pytest.raises(ProtocolError) as err:
        session_update(tools=tools)
    assert err.value.code == ErrorCode.BAD_FIELD and says in err.value.message


def test_tool_choice_auto_and_none_are_served_the_others_refused():
    assert decode_tool_choice("auto") == "auto" and decode_tool_choice("none") == "none"
    assert decode_tool_choice(None) is None
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        with pytest.raises(ProtocolError, match="cannot be honoured"):
            session_update(tool_choice=choice)
    with pytest.raises(ProtocolError, match="must be `auto` or `none`"):
        session_update(tool_choice="sometimes")


def test_function_items_decode():
    item = {"type": "function_call_output", "call_id": "call_1", "output": '{"t": 1}'}
    event = decode_client_event(json.dumps({"type": "conversation.item.create", "item": item}))
    assert event == FunctionOutputEvent(None, None, "call_1", '{"t": 1}')
    item = {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Rome"}'}
    event = decode_client_event(json.dumps({"type": "conversation.item.create", "item": item}))
    assert event == FunctionCallEvent(None, None, None, "get_weather", '{"city": "Rome"}')
    for item, says in (
        ({"type": "function_call_output", "output": "x"}, "call_id"),
        ({"type": "function_call_output", "call_id": "c", "output": {"t": 1}}, "string `output`"),
        ({"type": "function_call", "arguments": "{}"}, "`name`"),
        ({"type": "function_call", "name": "f", "arguments": "[1]"}, "JSON object"),
        ({"type": "function_call", "name": "f", "call_id": 7}, "`call_id`"),
        ({"type": "mcp_call"}, "`item.type` must be"),
    ):
        with pytest.raises(ProtocolError, match=says):
            decode_client_event(json.dumps({"type": "conversation.item.create", "item": item}))


def test_a_call_from_the_client_opens_for_its_output():
    tools = SessionTools(WITH_TOOLS, 1000)
    tools.accept(decode_tools([WEATHER]), "auto")
    call = FunctionCallEvent(None, "item_c", "call_c", "get_weather", '{"city": "Rome"}')
    item_id, created = tools.add_call(call, "item_before")
    assert item_id == "item_c"
    item = json.loads(created)["item"]
    assert (item["type"], item["call_id"], item["status"]) == (
        "function_call",
        "call_c",
        "completed",
    )
    with pytest.raises(ProtocolError, match="already open"):
        tools.add_call(call, item_id)
    with pytest.raises(ProtocolError, match="not one"):
        tools.add_call(FunctionCallEvent(None, None, None, "launch", "{}"), item_id)
    tools.add_output(FunctionOutputEvent(None, None, "call_c", "sunny"), item_id)
    with pytest.raises(ProtocolError, match="outputs are waiting"):
        tools.add_call(FunctionCallEvent(None, None, None, "get_weather", "{}"), item_id)


def test_a_response_repeats_the_sessions_tools_and_gives_back_outputs_it_took():
    """response.create's own tools are refused unless the session's; outputs taken for a
    response the session then refused wait for the next response.create."""
    tools = SessionTools(WITH_TOOLS, 1000)
    tools.accept(decode_tools([WEATHER]), "auto")
    tools.check_response(decode_tools([WEATHER]), "auto")
    tools.check_response(None, None)
    for listed, choice, param in (
        ([], None, "response.tools"),
        (None, "none", "response.tool_choice"),
    ):
        with pytest.raises(ProtocolError) as err:
            tools.check_response(None if listed is None else decode_tools(listed), choice)
        assert err.value.param == param
    tools.add_call(FunctionCallEvent(None, None, "call_c", "get_weather", "{}"), None)
    item_id, _ = tools.add_output(FunctionOutputEvent(None, None, "call_c", "sunny"), None)
    assert tools.holds_output(item_id)
    tools.give_back(*tools.take_outputs())
    assert tools.has_outputs and tools.take_outputs() == (("sunny",), (item_id,))
    assert not tools.holds_output(item_id)


def test_a_model_without_tool_calls_refuses_tools_naming_the_models_that_take_them():
    tools = SessionTools(WITHOUT, 1000)
    with pytest.raises(ProtocolError) as err:
        tools.update(session_update(tools=[WEATHER]))
    assert "reader was not trained with function calling" in err.value.message
    assert "Step-Audio 2 (tiny-step-audio2, step-audio2-mini)" in err.value.message
    assert tools.update(session_update(tools=[], tool_choice="none")) == ((), "none")
    with pytest.raises(ProtocolError, match="makes no function calls"):
        tools.add_output(FunctionOutputEvent(None, None, "call_1", "x"), None)


def test_the_prompt_lists_the_tools_unless_the_choice_is_none():
    tools = SessionTools(WITH_TOOLS, 1000)
    listed, choice = tools.update(session_update(tools=[WEATHER]))
    assert choice == "auto" and tools.prompt_tools(listed, choice) == listed
    tools.accept(listed, choice)
    assert tools.parser() is not None
    assert tools.update(session_update(tool_choice="none")) == (listed, "none")
    tools.accept(None, "none")
    assert tools.prompt_tools() == () and tools.parser() is None


def events_of(texts: list[str]) -> list[dict]:
    return [json.loads(t) for t in texts]


def test_a_reply_maps_onto_a_message_and_function_call_items():
    tools = SessionTools(WITH_TOOLS, 1000)
    tools.accept(decode_tools([WEATHER]), "auto")
    transcript: list[str] = []
    out = OutputItem("resp_1", "item_msg")
    calls = ResponseCalls(Dialect.BETA, out, tools.parser(), transcript, "item_msg", tools.opened)
    reply = "On it. " + call_text("get_weather", '{"city": "Oslo"}') + " Bye."
    events = events_of([e for ch in reply for e in calls.feed(ch)] + calls.finish())
    kinds = [e["type"] for e in events]
    assert "".join(transcript) == "On it.  Bye."
    assert kinds[0] == "response.audio_transcript.delta"
    added = events[kinds.index("response.output_item.added")]
    call = added["item"]
    assert (call["type"], call["name"], added["output_index"]) == (
        "function_call",
        "get_weather",
        1,
    )
    created = events[kinds.index("conversation.item.created")]
    assert created["previous_item_id"] == "item_msg" and created["item"]["id"] == call["id"]
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(deltas) == '{"city": "Oslo"}' and len(deltas) > 1
    done = events[kinds.index("response.function_call_arguments.done")]
    assert done["arguments"] == '{"city": "Oslo"}' and "name" not in done  # beta has no name
    assert calls.items == [events[kinds.index("response.output_item.done")]["item"]]
    assert calls.items[0]["status"] == "completed" and calls.last_item_id == call["id"]
    # The call is open for its output now, once.
    item_id, created_text = tools.add_output(
        FunctionOutputEvent(None, None, call["call_id"], "12 C"), calls.last_item_id
    )
    assert json.loads(created_text)["item"]["output"] == "12 C"
    assert tools.take_outputs() == (("12 C",), (item_id,))
    with pytest.raises(ProtocolError, match="no function call awaits"):
        tools.add_output(FunctionOutputEvent(None, None, call["call_id"], "again"), item_id)


def test_malformed_calls_stay_text_or_close_incomplete_and_cannot_be_answered():
    tools = SessionTools(WITH_TOOLS, 1000)
    tools.accept(decode_tools([WEATHER]), "auto")
    transcript: list[str] = []
    out = OutputItem("resp_2", "item_msg")
    calls = ResponseCalls(Dialect.GA, out, tools.parser(), transcript, "item_msg", tools.opened)
    unknown = call_text("launch_rockets", "{}")
    bad_args = call_text("get_weather", '{"city": ')
    events = events_of(calls.feed(unknown + bad_args + call_text("get_weather", '{"city"')))
    events += events_of(calls.finish())
    # The unknown function never began an item: its text is the transcript.
    assert "".join(transcript) == unknown
    items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["status"] for i in items] == ["incomplete", "incomplete"]
    assert [i["arguments"] for i in items] == ['{"city": ', '{"city"']
    assert calls.items == items
    dones = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [d["name"] for d in dones] == ["get_weather", "get_weather"]  # GA names the call
    for item in items:
        with pytest.raises(ProtocolError, match="no function call awaits"):
            tools.add_output(FunctionOutputEvent(None, None, item["call_id"], "x"), None)
