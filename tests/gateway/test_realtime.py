"""`/v1/realtime` end to end: the official `openai` package's Realtime client (GA and beta) against
a real uvicorn server and the real tiny-orpheus engine."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
import websockets
from gateway_testkit import decode_g711, engine_pcm, resample, until_event, wait_engine_idle

openai = pytest.importorskip("openai")

TEXT = "Hello from the realtime endpoint."
# Greedy and short: standard Realtime session fields. Random weights never emit the stop token,
# so every response ends at max_output_tokens: `incomplete`, reason max_output_tokens.
FAST = {"temperature": 0.0, "max_output_tokens": 60}
FAST_SAMPLING = {"temperature": 0.0, "max_tokens": 60}


def client(server, api_key: str = "unused") -> openai.AsyncOpenAI:
    # websocket_base_url: the beta client would otherwise always use wss://.
    ws_base = server.url.removesuffix("/stream")
    return openai.AsyncOpenAI(
        base_url=server.http + "/v1", websocket_base_url=ws_base, api_key=api_key
    )


async def next_event(conn, timeout: float = 30):
    return await asyncio.wait_for(conn.recv(), timeout)


async def say(conn, text: str = TEXT, role: str = "user", **create) -> None:
    """A message, then response.create (`create`: its fields, such as `response`)."""
    part = "input_text" if role == "user" else "output_text"
    await conn.conversation.item.create(
        item={"type": "message", "role": role, "content": [{"type": part, "text": text}]}
    )
    created = await next_event(conn)
    assert created.type == "conversation.item.created", created
    assert created.item.content[0].text == text
    await conn.response.create(**create)


def assert_ran_to_its_token_budget(done) -> None:
    assert done.response.status == "incomplete", done
    assert done.response.status_details.reason == "max_output_tokens"


def audio_of(events, delta_type: str) -> bytes:
    return b"".join(base64.b64decode(e.delta) for e in events if e.type == delta_type)


async def test_ga_client_text_in_pcm16_out_equals_engine_audio(server, engine):
    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        created = await next_event(conn)
        assert created.type == "session.created"
        assert created.session.model == "tiny-orpheus"
        await conn.send(
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}}},
                    **FAST,
                },
            }
        )
        updated = await next_event(conn)
        assert updated.type == "session.updated", updated
        assert updated.session.audio.output.format.type == "audio/pcm"
        assert updated.session.max_output_tokens == 60

        await say(conn)
        done, events = await until_event(conn, "response.done")
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.output_item.added",
        "conversation.item.created",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",  # OpenAI sends it for every audio part
        "response.content_part.done",
        "response.output_item.done",
    ]
    # tiny-orpheus writes no text: the audio's transcript is "" (a string, as OpenAI's always
    # is), not null; in progress, the item has no content yet.
    assert events[1].item.content == [] and events[3].part.transcript == ""
    assert [e.transcript for e in events[-4:] if e.type.endswith("transcript.done")] == [""]
    assert events[-2].part.transcript == events[-1].item.content[0].transcript == ""
    assert done.response.output[0].content[0].transcript == ""
    assert "response.audio.delta" not in kinds  # GA clients get GA names only
    assert_ran_to_its_token_budget(done)
    assert done.response.id == events[0].response.id
    got = np.frombuffer(audio_of(events, "response.output_audio.delta"), "<i2") / 32768
    want = np.clip(await engine_pcm(engine, TEXT, FAST_SAMPLING), -1, 1)
    assert len(want) <= len(got) < len(want) + 480  # the last 20 ms frame is padded
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768


async def test_speed_is_applied_to_the_responses_after_it(server, engine):
    """GA `audio.output.speed` (beta: `speed`) is taken, shown in `session.updated`, and the
    next response is the engine's audio time-stretched to it: half as long at speed 2."""
    from gateway.time_stretch import TimeStretcher

    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        session = {"type": "realtime", "audio": {"output": {"speed": 2.0}}, **FAST}
        await conn.send({"type": "session.update", "session": session})
        updated = await next_event(conn)
        assert updated.type == "session.updated", updated
        assert updated.session.audio.output.speed == 2.0
        await say(conn)
        done, events = await until_event(conn, "response.done")
    assert_ran_to_its_token_budget(done)
    got = np.frombuffer(audio_of(events, "response.output_audio.delta"), "<i2") / 32768
    made = await engine_pcm(engine, TEXT, FAST_SAMPLING)
    stretcher = TimeStretcher(2.0, 24000)
    want = np.clip(np.concatenate([stretcher.push(made), stretcher.flush()]), -1, 1)
    assert len(want) == round(len(made) / 2)
    assert len(want) <= len(got) < len(want) + 480
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768


def assert_engine_audio(got: bytes, want: np.ndarray) -> None:
    """pcm16 deltas that are the engine's audio (the last 20 ms frame padded)."""
    pcm = np.frombuffer(got, "<i2") / 32768
    want = np.clip(want, -1, 1)
    assert len(want) <= len(pcm) < len(want) + 480
    assert np.max(np.abs(pcm[: len(want)] - want)) <= 1.5 / 32768


async def test_response_create_options_apply_to_that_response_only(server, engine):
    """GA `response`: a voice and a token budget of its own for one response, and its
    metadata in response.created and response.done; the next response has the session's."""
    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        await conn.send({"type": "session.update", "session": {"type": "realtime", **FAST}})
        await next_event(conn)
        own = {
            "audio": {"output": {"voice": "leo"}},
            "max_output_tokens": 20,
            "metadata": {"turn": "first"},
        }
        await say(conn, response=own)
        done, events = await until_event(conn, "response.done")
        assert events[0].type == "response.created"
        assert events[0].response.metadata == {"turn": "first"} == done.response.metadata
        assert_ran_to_its_token_budget(done)
        leo = await engine_pcm(engine, TEXT, {**FAST_SAMPLING, "max_tokens": 20}, voice="leo")
        assert_engine_audio(audio_of(events, "response.output_audio.delta"), leo)

        await say(conn)
        done, events = await until_event(conn, "response.done")
        assert events[0].response.metadata is None and done.response.metadata is None
        session = await engine_pcm(engine, TEXT, FAST_SAMPLING)
        assert_engine_audio(audio_of(events, "response.output_audio.delta"), session)


async def test_beta_response_options_refused_by_name_then_applied(server, engine):
    """Beta `response`: each refusal names its field (`param`) and leaves the message
    waiting; a temperature and budget of their own then speak it, greedy although the
    session samples, and the next response has the session's budget again."""
    async with client(server).beta.realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        session = {"temperature": 1.0, "max_response_output_tokens": 60}
        await conn.session.update(session=session)
        await next_event(conn)
        await conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": TEXT}],
            }
        )
        await next_event(conn)
        refused = [
            ({"conversation": "none"}, "response.conversation", "out-of-band"),
            ({"voice": "alloy"}, "response.voice", "tara"),  # the session checks voices
            ({"output_audio_format": "g711_ulaw"}, "response.output_audio_format", "pcm16"),
            ({"max_response_output_tokens": 0}, "response.max_response_output_tokens", ">= 1"),
            ({"metadata": {"k": 1}}, "response.metadata", "string values"),
        ]
        for i, (response, param, says) in enumerate(refused):
            event = {"type": "response.create", "event_id": f"ev_{i}", "response": response}
            await conn.send(event)
            error = await next_event(conn)
            assert error.type == "error", (response, error)
            assert error.error.code == "bad_field", error
            assert (error.error.param, error.error.event_id) == (param, f"ev_{i}"), error
            assert says in error.error.message, error
        own = {"temperature": 0.0, "max_response_output_tokens": 20, "metadata": {"k": "v"}}
        await conn.response.create(response=own)
        done, events = await until_event(conn, "response.done")
        assert done.response.metadata == {"k": "v"}
        greedy = await engine_pcm(engine, TEXT, {**FAST_SAMPLING, "max_tokens": 20})
        first = audio_of(events, "response.audio.delta")
        assert_engine_audio(first, greedy)

        await say(conn)
        done, events = await until_event(conn, "response.done")
        assert_ran_to_its_token_budget(done)
        assert len(audio_of(events, "response.audio.delta")) > 2 * len(first)  # 60 tokens


async def test_beta_client_g711_ulaw_out(server, engine):
    async with client(server).beta.realtime.connect(model="tiny-orpheus") as conn:
        created = await next_event(conn)
        assert created.session.output_audio_format == "pcm16"
        await conn.session.update(
            session={
                "output_audio_format": "g711_ulaw",
                "temperature": 0.0,
                "max_response_output_tokens": 60,
            }
        )
        updated = await next_event(conn)
        assert updated.session.output_audio_format == "g711_ulaw"
        await say(conn, role="assistant")
        done, events = await until_event(conn, "response.done")
    assert_ran_to_its_token_budget(done)
    kinds = {e.type for e in events}
    assert "response.audio.done" in kinds and "response.output_audio.delta" not in kinds
    got = decode_g711(audio_of(events, "response.audio.delta"), "pcm_mulaw")
    want = resample(await engine_pcm(engine, TEXT, FAST_SAMPLING), 24000, 8000)
    assert len(want) <= len(got) < len(want) + 160
    n = len(want) - 100
    # μ-law keeps ~8 bits of log-scaled precision: a few percent of full scale at most.
    assert np.max(np.abs(got[:n] - np.clip(want[:n], -1, 1))) < 0.03


async def test_g711_alaw_out(server, engine):
    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        fmt = {"type": "audio/pcma"}
        await conn.send(
            {"type": "session.update", "session": {"audio": {"output": {"format": fmt}}, **FAST}}
        )
        assert (await next_event(conn)).session.audio.output.format.type == "audio/pcma"
        await say(conn)
        done, events = await until_event(conn, "response.done")
    got = decode_g711(audio_of(events, "response.output_audio.delta"), "pcm_alaw")
    want = resample(await engine_pcm(engine, TEXT, FAST_SAMPLING), 24000, 8000)
    n = len(want) - 100
    assert np.max(np.abs(got[:n] - np.clip(want[:n], -1, 1))) < 0.03


async def test_cancel_mid_response_then_the_session_goes_on(server, engine):
    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        long = {"temperature": 0.0, "max_output_tokens": 600}  # ~7 s of audio
        await conn.send({"type": "session.update", "session": long})
        await next_event(conn)
        await say(conn)
        await until_event(conn, "response.output_audio.delta")
        await conn.response.cancel()
        done, _ = await until_event(conn, "response.done", timeout=10)
        assert done.response.status == "cancelled"
        assert done.response.status_details.reason == "client_cancelled"
        await wait_engine_idle(engine)

        await conn.send({"type": "session.update", "session": FAST})
        await next_event(conn)
        await say(conn)
        done, _ = await until_event(conn, "response.done")
        assert_ran_to_its_token_budget(done)
    body = httpx.get(server.http + "/metrics").text  # the same metrics as /v1/stream
    assert 'voxgate_responses_total{status="cancelled"}' in body


async def test_bad_events_get_error_events_and_the_session_stays_usable(server):
    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        audio = base64.b64encode(bytes(960)).decode()
        cases = [
            ("{not json", "bad_json"),
            (json.dumps({"type": "response.explode", "event_id": "ev_1"}), "unknown_type"),
            (json.dumps({"type": "response.create", "event_id": "ev_2"}), "bad_field"),
            (json.dumps({"type": "session.update", "session": {"voice": "alloy"}}), "bad_field"),
            (
                json.dumps({"type": "input_audio_buffer.append", "audio": audio}),
                "unsupported_input",
            ),
            (json.dumps({"type": "input_audio_buffer.commit"}), "unsupported_input"),
            (json.dumps({"type": "input_audio_buffer.clear"}), "unsupported_input"),
            (
                json.dumps({"type": "conversation.item.truncate", "item_id": "x"}),
                "unsupported_input",
            ),
        ]
        for raw, code in cases:
            await conn.send_raw(raw)
            error = await next_event(conn)
            assert error.type == "error", (raw, error)
            assert error.error.code == code, (raw, error)
            assert error.error.type == "invalid_request_error"
            if code == "unsupported_input":
                assert "speech-to-speech" in error.error.message
        assert error.error.event_id is None
        await conn.send_raw(json.dumps({"type": "response.explode", "event_id": "ev_9"}))
        assert (await next_event(conn)).error.event_id == "ev_9"

        await conn.send({"type": "session.update", "session": FAST})
        assert (await next_event(conn)).type == "session.updated"
        await say(conn)
        done, _ = await until_event(conn, "response.done")
        assert_ran_to_its_token_budget(done)


async def test_errors_name_the_field_and_the_client_event(server):
    """OpenAI's `error.param` is the refused field's path as the client sent it (GA or beta
    shape), and `error.event_id` the client event's own id; both null where there is none."""
    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        cases = [
            # Refused by the session's options (the served model's voices and ranges).
            ({"audio": {"output": {"voice": "alloy"}}}, "session.audio.output.voice"),
            ({"voice": "alloy"}, "session.voice"),
            ({"sampling": {"top_p": 7.0}}, "session.sampling.top_p"),
            ({"temperature": -1.0}, "session.temperature"),
            # Refused by the event's shape.
            ({"turn_detection": "server_vad"}, "session.turn_detection"),
            ({"tool_choice": "required"}, "session.tool_choice"),
        ]
        for i, (session, param) in enumerate(cases):
            update = {"type": "session.update", "event_id": f"ev_{i}", "session": session}
            await conn.send_raw(json.dumps(update))
            error = await next_event(conn)
            assert error.type == "error", (session, error)
            assert error.error.code == "bad_field", error
            assert (error.error.param, error.error.event_id) == (param, f"ev_{i}"), error
        item = {
            "type": "message",
            "role": "robot",
            "content": [{"type": "input_text", "text": "Hi"}],
        }
        await conn.send_raw(json.dumps({"type": "conversation.item.create", "item": item}))
        error = await next_event(conn)
        assert (error.error.param, error.error.event_id) == ("item.role", None)
        await conn.send_raw(json.dumps({"type": "response.create", "event_id": "ev_last"}))
        error = await next_event(conn)  # nothing to speak: no one field to blame
        assert (error.error.param, error.error.event_id) == (None, "ev_last")


async def test_session_fields_not_applied_are_refused_and_applied_ones_still_work(server):
    """`instructions` (tiny-orpheus is given no system prompt), tools and text-only output
    get an `error` naming the field instead of a silent echo in `session.updated`; the refused
    update changes nothing, and the fields that are applied still are."""
    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        refused = [
            ({"instructions": "Speak like a pirate.", **FAST}, "`instructions` are not applied"),
            ({"tools": [{"type": "function", "name": "f"}]}, "not trained with function calling"),
            ({"output_modalities": ["text"]}, "`session.output_modalities` is not applied"),
            ({"audio": {"output": {"speed": 5}}}, "`session.audio.output.speed` must be in"),
            ({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}}, "speech-to-speech"),
        ]
        for session, says in refused:
            await conn.send({"type": "session.update", "session": {"type": "realtime", **session}})
            error = await next_event(conn)
            assert error.type == "error", (session, error)
            assert error.error.type == "invalid_request_error"
            assert says in error.error.message, error
        # The values that ask for nothing are accepted, and what is applied shows.
        session = {
            "type": "realtime",
            "instructions": "",
            "tools": [],
            "tool_choice": "auto",
            "output_modalities": ["audio"],
            **FAST,
        }
        await conn.send({"type": "session.update", "session": session})
        updated = await next_event(conn)
        assert updated.type == "session.updated", updated
        assert updated.session.instructions == ""
        assert updated.session.max_output_tokens == 60
        await say(conn)
        done, _ = await until_event(conn, "response.done")
        assert_ran_to_its_token_budget(done)  # the refused update's budget was not taken


async def test_a_wrong_model_name_is_refused_with_an_error(server):
    async with client(server).realtime.connect(model="gpt-realtime") as conn:
        error = await next_event(conn)
        assert error.type == "error" and "tiny-orpheus" in error.error.message


async def test_auth_by_header_and_by_browser_subprotocol(make_server):
    server = make_server(api_keys=("sekrit",))
    async with client(server, api_key="sekrit").realtime.connect(model="tiny-orpheus") as conn:
        assert (await next_event(conn)).type == "session.created"
    url = server.url.replace("/v1/stream", "/v1/realtime")
    offered = ["realtime", "openai-insecure-api-key.sekrit", "openai-beta.realtime-v1"]
    async with websockets.connect(url, subprotocols=offered) as ws:
        assert ws.subprotocol == "realtime"  # the key is never echoed
        created = json.loads(await ws.recv())
        assert created["type"] == "session.created"
        assert created["session"]["output_audio_format"] == "pcm16"  # beta, from its subprotocol
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url, subprotocols=["openai-insecure-api-key.wrong"]):
            pass
    assert refused.value.response.status_code == 403


async def test_a_message_over_the_text_limit_is_refused_when_it_is_created(server, engine):
    """One response speaks at most max_text_chars (4096) characters: a message that would take
    the waiting text over is refused at conversation.item.create, and the session goes on."""
    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        await conn.send({"type": "session.update", "session": FAST})
        await next_event(conn)
        for waiting, text in (("", "x" * 4097), ("a" * 3000, "b" * 1096)):
            if waiting:
                await conn.conversation.item.create(
                    item={"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": waiting}]}
                )  # fmt: skip
                assert (await next_event(conn)).type == "conversation.item.created"
            await conn.conversation.item.create(
                item={"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": text}]}
            )  # fmt: skip
            error = await next_event(conn)
            assert error.type == "error", error
            assert error.error.type == "invalid_request_error"
            assert error.error.code == "bad_field" and "4096 characters" in error.error.message
        await conn.response.create()  # the 3000 characters that were taken
        done, seen = await until_event(conn, "response.done")
        assert not [e for e in seen if e.type == "error"]
        assert_ran_to_its_token_budget(done)
    await wait_engine_idle(engine)


async def test_deleted_message_is_not_spoken_and_items_are_retrieved(server, engine):
    """Two messages, the first deleted: response.create speaks only the second (the engine's
    audio for its text alone). Items are retrieved as shown; unknown ids are refused by
    `item_id`, and the session goes on."""
    short = {**FAST, "max_output_tokens": 20}
    async with client(server).realtime.connect(model="tiny-orpheus") as conn:
        await next_event(conn)
        await conn.send({"type": "session.update", "session": {"type": "realtime", **short}})
        await next_event(conn)
        ids = []
        for text in ("Forget this one.", "Second."):
            part = {"type": "input_text", "text": text}
            await conn.conversation.item.create(
                item={"type": "message", "role": "user", "content": [part]}
            )
            ids.append((await next_event(conn)).item.id)
        await conn.conversation.item.delete(item_id=ids[0])
        deleted = await next_event(conn)
        assert (deleted.type, deleted.item_id) == ("conversation.item.deleted", ids[0])
        for item_id in (ids[0], "item_nope"):
            await conn.conversation.item.retrieve(item_id=item_id, event_id="ev_r")
            error = await next_event(conn)
            assert error.type == "error", error
            assert (error.error.code, error.error.param) == ("bad_field", "item_id")
            assert item_id in error.error.message and error.error.event_id == "ev_r"
        await conn.conversation.item.delete(item_id="item_nope")
        assert (await next_event(conn)).error.param == "item_id"
        await conn.response.create()
        done, events = await until_event(conn, "response.done")
        want = await engine_pcm(engine, "Second.", {**FAST_SAMPLING, "max_tokens": 20})
        assert_engine_audio(audio_of(events, "response.output_audio.delta"), want)
        for item in (ids[1], done.response.output[0].id):
            await conn.conversation.item.retrieve(item_id=item)
            got = await next_event(conn)
            assert got.type == "conversation.item.retrieved" and got.item.id == item, got
        assert got.item.model_dump() == done.response.output[0].model_dump()
