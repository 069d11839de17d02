"""`/v1/realtime` turn detection's `create_response` and `interrupt_response` on a turn-based
speech-to-speech model (tiny-glm-voice), with the official `openai` client and flite speech:
turns the server's VAD ends are held for the client's `response.create` (create_response
false), as are the turns the client commits with turn detection off, and speech during a
response leaves it playing (interrupt_response false)."""

from __future__ import annotations

import asyncio
import base64
import shutil

import pytest
from gateway_testkit import until_event, wait_engine_idle
from realtime_testkit import append, realtime_client, speak, utterance

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")

# Greedy, and replies of about 3 s of speech (40 of the 60 tokens), long enough to cut.
FAST = {"temperature": 0.0, "max_output_tokens": 60}
MODEL = "tiny-glm-voice"


async def set_vad(conn, **fields) -> object:
    """session.update with server VAD (400 ms of silence) and `fields`; what session.updated
    shows of the turn detection."""
    vad = {"type": "server_vad", "silence_duration_ms": 400, **fields}
    session = {"type": "realtime", "audio": {"input": {"turn_detection": vad}}, **FAST}
    await conn.send({"type": "session.update", "session": session})
    updated, _ = await until_event(conn, "session.updated")
    return updated.session.audio.input.turn_detection


async def held_turn(conn, text: str, tmp_path, seed: int) -> str:
    """Speak a turn; the server commits it and creates its user item, and starts no response
    (none within a second). The item's id."""
    await speak(conn, text, tmp_path, seed)
    committed, seen = await until_event(conn, "input_audio_buffer.committed")
    kinds = [e.type for e in seen]
    assert kinds[:2] == ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped"]
    created, _ = await until_event(conn, "conversation.item.created")
    assert created.item.id == committed.item_id and created.item.role == "user"
    await no_response_within(conn)  # no response.created: the client asks for it
    return committed.item_id


async def no_response_within(conn, seconds: float = 1.0) -> None:
    """Nothing comes (no response.created) until the client asks."""
    with pytest.raises(TimeoutError):
        event = await asyncio.wait_for(conn.recv(), seconds)
        pytest.fail(f"{event.type} after a turn held for response.create")


async def ask_for_a_spoken_reply(conn):
    """response.create; the response it starts ends with audio. Its response.done."""
    await conn.response.create()
    created, _ = await until_event(conn, "response.created")
    done, seen = await until_event(conn, "response.done")
    assert done.response.id == created.response.id
    assert done.response.status in ("completed", "incomplete")
    assert len(audio_of(seen)) > 0
    return done


def audio_of(events) -> bytes:
    return b"".join(
        base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta"
    )


def speech_tokens(model, turn) -> int:
    return sum(model.ids.is_audio(t) for t in turn.token_ids)


async def test_create_response_false_holds_turns_until_response_create(
    glm_server, glm_engine, conversations, tmp_path
):
    model = glm_engine.core.model
    async with realtime_client(glm_server).realtime.connect(model=MODEL) as conn:
        await until_event(conn, "session.created")
        shown = await set_vad(conn, create_response=False)
        assert shown.create_response is False and shown.interrupt_response is True
        (conversation,) = conversations

        # Nothing said yet: response.create is the client's error, and says what to do.
        await conn.response.create()
        error, _ = await until_event(conn, "error")
        assert error.error.code == "bad_field" and "nothing to answer" in error.error.message

        # A spoken turn is committed and held; response.create answers it.
        await held_turn(conn, "What is the weather like today?", tmp_path, 1)
        assert conversation.replies == 0 and len(conversation.history) == 1
        done = await ask_for_a_spoken_reply(conn)
        assert len(conversation.history) == 2
        reply_item = done.response.output[0].id

        # A second turn is held after the reply: truncating the reply cuts the reply, not
        # the newest turn (the user heard 400 ms of it: 5 speech tokens).
        await held_turn(conn, "And tomorrow?", tmp_path, 3)
        await conn.conversation.item.truncate(item_id=reply_item, content_index=0, audio_end_ms=400)
        await until_event(conn, "conversation.item.truncated")
        history = conversation.history
        assert len(history) == 3 and speech_tokens(model, history[1]) == 5
        assert history[2].speech_tokens  # the held user turn, untouched

        # A third turn before any response.create: one response answers both turns.
        await held_turn(conn, "Tell me about the weekend.", tmp_path, 5)
        await conn.response.create()
        done, _ = await until_event(conn, "response.done")
        assert done.response.status in ("completed", "incomplete")
        history = conversation.history
        # user, reply (cut), user, (no reply), user, reply
        assert len(history) == 6 and history[3].token_ids == () and history[4].speech_tokens
        assert conversation.replies == 2
    await wait_engine_idle(glm_engine)


async def test_manual_turns_are_committed_and_wait_for_response_create(
    glm_server, glm_engine, conversations, tmp_path
):
    """turn_detection null: as with OpenAI, input_audio_buffer.commit commits the buffer and
    creates the user item but starts no response; response.create answers the turns
    committed since the last response, once (a client written for OpenAI sends both)."""
    async with realtime_client(glm_server).realtime.connect(model=MODEL) as conn:
        await until_event(conn, "session.created")
        session = {"type": "realtime", "audio": {"input": {"turn_detection": None}}, **FAST}
        await conn.send({"type": "session.update", "session": session})
        updated, _ = await until_event(conn, "session.updated")
        assert updated.session.audio.input.turn_detection is None
        (conversation,) = conversations

        for seed, text in ((1, "What is the weather like today?"), (3, "And tomorrow?")):
            await speak(conn, text, tmp_path, seed)
            await conn.input_audio_buffer.commit()
            committed, seen = await until_event(conn, "input_audio_buffer.committed")
            assert not seen  # no speech events with turn detection off
            created, _ = await until_event(conn, "conversation.item.created")
            assert created.item.id == committed.item_id and created.item.role == "user"
            await no_response_within(conn)
        assert conversation.replies == 0

        # One response.create: one response, to both turns.
        await ask_for_a_spoken_reply(conn)
        history = conversation.history
        # user, (no reply), user, reply
        assert len(history) == 4 and history[1].token_ids == () and history[2].speech_tokens
        assert conversation.replies == 1

        # Nothing waits now: a second response.create is the client's error, not a reply,
        # naming the event that asked (the conversation answers it after the event was read).
        await conn.response.create(event_id="ask_again")
        error, seen = await until_event(conn, "error")
        assert not seen and "nothing to answer" in error.error.message
        assert error.error.event_id == "ask_again"
        assert conversation.replies == 1
    await wait_engine_idle(glm_engine)


@pytest.mark.parametrize("interrupt", [None, False], ids=["default", "interrupt_response-false"])
async def test_speech_during_a_response_cancels_it_unless_interrupt_response_is_false(
    glm_server, glm_engine, conversations, tmp_path, interrupt
):
    async with realtime_client(glm_server).realtime.connect(model=MODEL) as conn:
        await until_event(conn, "session.created")
        fields = {} if interrupt is None else {"interrupt_response": interrupt}
        shown = await set_vad(conn, **fields)
        assert shown.interrupt_response is (interrupt is None)

        interruption = utterance("Stop. What about tomorrow?", tmp_path, 3)
        await speak(conn, "What is the weather like today?", tmp_path, 1)
        await until_event(conn, "response.created")
        await until_event(conn, "response.output_audio.delta")  # the reply is playing
        await append(conn, interruption)  # its speech starts within ~0.1 s; the reply is ~2 s
        done, seen = await until_event(conn, "response.done")
        assert "input_audio_buffer.speech_started" in [e.type for e in seen]
        if interrupt is None:
            assert done.response.status == "cancelled"
        else:
            assert done.response.status in ("completed", "incomplete")
        # Either way the user's turn is answered, after the first response.
        await until_event(conn, "response.created")
        done, _ = await until_event(conn, "response.done")
        assert done.response.status in ("completed", "incomplete")
        (conversation,) = conversations
        assert conversation.replies == 2 and len(conversation.history) == 4
        # Both answers are done: a response.create now asks anew and, with no turn waiting,
        # is the client's error (it was silently dropped, as if asking for the VAD's answer).
        await conn.response.create()
        error, seen = await until_event(conn, "error")
        assert not seen and "nothing to answer" in error.error.message
    await wait_engine_idle(glm_engine)


async def test_session_update_round_trips_the_response_flags(glm_server):
    async with realtime_client(glm_server).realtime.connect(model=MODEL) as conn:
        created, _ = await until_event(conn, "session.created")
        shown = created.session.audio.input.turn_detection
        assert shown.create_response is True and shown.interrupt_response is True

        shown = await set_vad(conn, create_response=False, interrupt_response=False)
        assert shown.create_response is False and shown.interrupt_response is False
        assert shown.silence_duration_ms == 400

        # Not a boolean: refused, naming the field.
        await conn.send(
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "audio": {"input": {"turn_detection": {"create_response": "no"}}},
                },
            }
        )
        error = await asyncio.wait_for(conn.recv(), 10)
        assert error.type == "error", error
        assert error.error.code == "bad_field"
        assert "turn_detection.create_response" in error.error.message
        assert error.error.param == "session.audio.input.turn_detection.create_response"

        # A turn_detection object replaces the one in force: left out, OpenAI's defaults.
        shown = await set_vad(conn)
        assert shown.create_response is True and shown.interrupt_response is True


async def test_changing_only_the_flags_mid_turn_keeps_the_turn(glm_server, glm_engine, tmp_path):
    """The VAD is unchanged, so the speech in progress goes on as one turn (a new VAD setting
    would drop it and start over), and the new flag applies to it."""
    data = utterance("What is the weather like today?", tmp_path, 1)
    half = len(data) // 4 * 2  # into the words, on a whole sample
    async with realtime_client(glm_server).realtime.connect(model=MODEL) as conn:
        await until_event(conn, "session.created")
        await set_vad(conn)
        await append(conn, data[:half])
        await until_event(conn, "input_audio_buffer.speech_started")
        shown = await set_vad(conn, create_response=False)
        assert shown.create_response is False
        await append(conn, data[half:])
        committed, seen = await until_event(conn, "input_audio_buffer.committed")
        assert [e.type for e in seen] == ["input_audio_buffer.speech_stopped"]
        created, _ = await until_event(conn, "conversation.item.created")
        assert created.item.id == committed.item_id
        with pytest.raises(TimeoutError):  # held: create_response false applies to it
            event = await asyncio.wait_for(conn.recv(), 1.0)
            pytest.fail(f"{event.type} after a turn held for response.create")
    await wait_engine_idle(glm_engine)
