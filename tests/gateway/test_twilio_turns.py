"""`/v1/twilio` with a turn-based speech-to-speech model (tiny-glm-voice): a caller speaks
(flite speech as μ-law 8 kHz media, exactly as Twilio sends it), the answer comes back as
μ-law media with marks; the caller talks over it → `clear`, and the reply stays in the history
only up to the last mark Twilio echoed."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import websockets
from gateway_testkit import expect_close, flite_speech, quiet_room, wait_engine_idle
from test_twilio import ACCOUNT_SID, CALL_SID, STREAM_SID, FakeTwilio

from gateway.audio import make_encoder
from gateway.protocol import AudioFormat, AudioSpec

pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")

RATE = 8000


def mulaw_chunks(text: str, tmp_path, seed: int, before_s: float = 0.5) -> list[bytes]:
    """The caller's words as Twilio's 20 ms μ-law media payloads (160 bytes each)."""
    pcm = np.concatenate(
        [
            quiet_room(before_s, RATE, seed),
            flite_speech(text, tmp_path, RATE),
            quiet_room(1.0, RATE, seed + 1),
        ]
    )
    encoder = make_encoder(AudioSpec(AudioFormat.MULAW, RATE, 20), RATE)
    return encoder.encode(pcm) + encoder.flush()


async def test_a_call_with_speech_in_barge_in_clears_and_the_reply_is_cut_at_the_mark(
    glm_server, glm_engine, conversations, tmp_path
):
    model = glm_engine.core.model
    url = glm_server.url.replace("/v1/stream", "/v1/twilio")
    async with websockets.connect(url) as ws:
        twilio = FakeTwilio(ws)
        # ~5 s of reply: GLM-4-Voice's blocks of 13 text and 26 speech tokens, 61 speech tokens
        # (4.88 s) in 100, played in real time: still playing when the caller talks over it.
        await twilio.open(temperature="0", max_tokens="100")
        for payload in mulaw_chunks("What is the weather like today?", tmp_path, 1):
            await twilio.caller_speaks(payload)
        # The answer: μ-law media on this stream, a mark every 500 ms of it.
        media = 0
        while (message := await twilio.recv())["event"] != "mark":
            assert message["event"] == "media" and message["streamSid"] == STREAM_SID
            media += len(message["media"]["payload"])
        assert media > 0
        response_id, played = message["mark"]["name"].rsplit(":", 1)
        assert played == "500"
        await twilio.send("mark", mark=message["mark"])  # Twilio: the caller heard 500 ms
        # The caller talks over the answer: Twilio is told to drop what it buffered.
        for payload in mulaw_chunks("Wait, stop.", tmp_path, 3, before_s=0.1):
            await twilio.caller_speaks(payload)
        while (message := await twilio.recv())["event"] != "clear":
            assert message["event"] in ("media", "mark")
        assert message == {"event": "clear", "streamSid": STREAM_SID}
        # The interruption is answered in turn, to its end mark.
        while True:
            message = await twilio.recv()
            assert message["event"] in ("media", "mark")
            if message["event"] == "mark" and message["mark"]["name"].endswith(":end"):
                break
        await twilio.send("stop", stop={"accountSid": ACCOUNT_SID, "callSid": CALL_SID})
        code, _ = await expect_close(ws)
    assert code == 1000
    (conversation,) = conversations
    user, cut, *_ = conversation.history
    assert sum(model.ids.is_audio(t) for t in cut.token_ids) == int(0.5 * 12.5)
    await wait_engine_idle(glm_engine)
