"""`/v1/realtime` with audio in: the official `openai` package's Realtime client talks to a
turn-based speech-to-speech model (tiny-glm-voice) with speech synthesized by flite — server
VAD turns, truncate, manual commit + response.create, cancel."""

from __future__ import annotations

import asyncio
import base64
import shutil

import pytest
from gateway_testkit import until_event, wait_engine_idle
from realtime_testkit import realtime_client, speak

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")

# Greedy; replies of 60 tokens (GLM-4-Voice's blocks of 13 text and 26 speech tokens: 34
# speech tokens, 2.72 s, played out in real time), past the 400 ms a truncate keeps.
FAST = {"temperature": 0.0, "max_output_tokens": 60}


async def test_audio_in_server_vad_truncate_manual_commit_and_cancel(
    glm_server, glm_engine, conversations, tmp_path
):
    model = glm_engine.core.model
    async with realtime_client(glm_server).realtime.connect(model="tiny-glm-voice") as conn:
        created, _ = await until_event(conn, "session.created")
        assert created.session.audio.input.turn_detection.type == "server_vad"
        vad = {"type": "server_vad", "silence_duration_ms": 400}
        session = {"type": "realtime", "audio": {"input": {"turn_detection": vad}}, **FAST}
        await conn.send({"type": "session.update", "session": session})
        await until_event(conn, "session.updated")

        # Server VAD: speech → speech_started / stopped / committed → a spoken answer.
        await speak(conn, "What is the weather like today?", tmp_path, 1)
        done, seen = await until_event(conn, "response.done")
        kinds = [e.type for e in seen]
        order = [
            "input_audio_buffer.speech_started",
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "response.created",
        ]
        assert [k for k in kinds if k in order] == order
        user_item = seen[kinds.index("input_audio_buffer.committed")].item_id
        assert seen[0].item_id == user_item
        created_items = [e.item for e in seen if e.type == "conversation.item.created"]
        assert created_items[0].id == user_item and created_items[0].role == "user"
        audio = b"".join(
            base64.b64decode(e.delta) for e in seen if e.type == "response.output_audio.delta"
        )
        assert len(audio) > 0 and len(audio) % 2 == 0
        assert "response.output_audio_transcript.delta" in kinds
        assert done.response.status in ("completed", "incomplete")
        reply_item = done.response.output[0].id

        # The user heard 400 ms of it: the history keeps 5 speech tokens of the reply.
        await conn.conversation.item.truncate(item_id=reply_item, content_index=0, audio_end_ms=400)
        truncated, _ = await until_event(conn, "conversation.item.truncated")
        assert truncated.item_id == reply_item and truncated.audio_end_ms == 400
        (conversation,) = conversations
        kept = conversation.history[-1]
        assert sum(model.ids.is_audio(t) for t in kept.token_ids) == 5

        # Turn detection off: the client commits, then asks for the response; then cancels it.
        await conn.send(
            {
                "type": "session.update",
                "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
            }
        )
        await until_event(conn, "session.updated")
        await speak(conn, "And tomorrow?", tmp_path, 3)
        await conn.input_audio_buffer.commit()
        committed, seen = await until_event(conn, "input_audio_buffer.committed")
        assert not any(e.type.startswith("input_audio_buffer.speech") for e in seen)
        await conn.response.create()
        await until_event(conn, "response.created")
        await conn.response.cancel()
        done, _ = await until_event(conn, "response.done")
        assert done.response.status == "cancelled"
        # An empty commit is the client's error; the session carries on.
        await conn.input_audio_buffer.commit()
        error, _ = await until_event(conn, "error")
        assert error.error.type == "invalid_request_error"
    await wait_engine_idle(glm_engine)


async def test_an_append_of_seconds_of_audio_is_taken_whole(glm_server, glm_engine, tmp_path):
    """OpenAI takes appends up to 15 MiB; the gateway splits one into its audio frames (a
    3-s append is 144,000 bytes, the session's frames at most 16,384)."""
    async with realtime_client(glm_server).realtime.connect(model="tiny-glm-voice") as conn:
        await until_event(conn, "session.created")
        session = {"type": "realtime", "audio": {"input": {"turn_detection": None}}, **FAST}
        await conn.send({"type": "session.update", "session": session})
        await until_event(conn, "session.updated")
        await speak(conn, "What is the weather like today?", tmp_path, 1, chunk_s=10.0)
        await conn.input_audio_buffer.commit()
        first = await asyncio.wait_for(conn.recv(), 30)
        assert first.type == "input_audio_buffer.committed", first  # not error too_large
        await conn.response.create()
        done, seen = await until_event(conn, "response.done")
        assert done.response.status in ("completed", "incomplete")
        assert any(e.type == "response.output_audio.delta" for e in seen)
    await wait_engine_idle(glm_engine)


OPENAI_DEFAULT_VAD = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "create_response": True,
    "interrupt_response": True,
}


@pytest.mark.parametrize(
    "field, value",
    [
        ("threshold", 0.9),
        ("prefix_padding_ms", 0),
        ("idle_timeout_ms", 5000),
    ],
)
async def test_turn_detection_shows_what_is_applied_and_refuses_the_rest(glm_server, field, value):
    """OpenAI's defaults (what the SDK sends) are taken and `silence_duration_ms` is applied
    (`create_response` and `interrupt_response` too: test_realtime_turn_responses.py); a value
    the server's VAD would not act on is an error, never echoed back as taken."""
    async with realtime_client(glm_server).realtime.connect(model="tiny-glm-voice") as conn:
        await until_event(conn, "session.created")
        vad = {**OPENAI_DEFAULT_VAD, "silence_duration_ms": 700}
        await conn.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": vad}}}
        )
        updated, _ = await until_event(conn, "session.updated")
        shown = updated.session.audio.input.turn_detection
        assert shown.type == "server_vad" and shown.silence_duration_ms == 700
        assert shown.create_response is True and shown.interrupt_response is True
        assert shown.prefix_padding_ms == 300
        assert shown.threshold is None  # webrtcvad has none: the client's 0.5 is not shown

        refused = {**OPENAI_DEFAULT_VAD, field: value}
        await conn.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": refused}}}
        )
        error = await asyncio.wait_for(conn.recv(), 10)
        assert error.type == "error", error  # not session.updated
        assert error.error.type == "invalid_request_error" and error.error.code == "bad_field"
        assert f"turn_detection.{field}" in error.error.message
