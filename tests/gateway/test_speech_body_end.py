"""How a `POST /v1/audio/speech` body ends (gateway/speech_http.py, SpeechResponse): whole, or
failed after its first audio — an SSE body says so in an `error` event, an audio body is left
without its last chunk (the server then closes the connection: a cut-off transfer, never a
short file that looks whole) and nothing is raised into the server's log."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gateway.speech_http import SpeechResponse


class Stream:
    def __init__(self, stream_format: str, failed: str | None) -> None:
        self.call = SimpleNamespace(stream_format=stream_format)
        self.response_id = "speech_test"
        self.failed = failed
        self.generated_tokens = 7

    async def file_bytes(self):
        for chunk in (b"RIFF", b"audio"):
            yield chunk


async def body_of(stream: Stream) -> list[dict]:
    response = SpeechResponse.__new__(SpeechResponse)
    response.stream, response.raw_headers = stream, []
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await response._send_body(send)
    return [m for m in sent if m["type"] == "http.response.body"]


async def test_a_whole_audio_body_ends_with_its_last_chunk():
    body = await body_of(Stream("audio", None))
    assert [m["body"] for m in body] == [b"RIFF", b"audio", b""]
    assert body[-1]["more_body"] is False


async def test_an_audio_body_failed_after_its_first_audio_is_left_unfinished_without_raising():
    body = await body_of(Stream("audio", "the engine was shut down"))
    assert [m["body"] for m in body] == [b"RIFF", b"audio"]
    assert all(m["more_body"] for m in body)


@pytest.mark.parametrize("failed", [None, "the engine was shut down"])
async def test_an_sse_body_always_ends_with_an_event_saying_how(failed):
    body = await body_of(Stream("sse", failed))
    assert body[-1]["more_body"] is False
    last = body[-1]["body"].decode()
    assert ('"type": "error"' in last) == (failed is not None)
    assert ('"type": "speech.audio.done"' in last) == (failed is None)
