"""A client's voice clip, checked (gateway/clip_audio.py): each kind of bad clip gets its own
code and a message that says what to send instead; good clips in the formats browsers and
people have decode to the clip's own samples; session.start's voice_clip object is checked
for shape before any of it is decoded."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from clip_files import b64, encoded_bytes, noise, wav_bytes

from engine.api import ModelFacts
from gateway.clip_audio import (
    MAX_TRANSCRIPT_CHARS,
    ClipError,
    check_request,
    decode_base64,
    read_clip,
)
from gateway.protocol import ClipUpload, ErrorCode, ProtocolError, decode_text_frame
from models.voice_clip import ClipRules

CLONES = ModelFacts("cloner", 24000, 12.5, (), 1, 1, voice_cloning=True)
NO_TRANSCRIPT = ModelFacts(
    "embedder", 24000, 12.5, (), 1, 1, voice_cloning=True,
    clip_rules=ClipRules(needs_transcript=False),
)  # fmt: skip
CAP = 2 * 2**20


def refused(call, *args) -> ClipError:
    with pytest.raises(ClipError) as caught:
        call(*args)
    return caught.value


def test_a_wav_clip_decodes_to_its_samples_at_its_rate():
    audio = noise(3.0, 16000)
    clip = read_clip(wav_bytes(audio, 16000), "Hello.", CLONES, CAP)
    assert clip.sample_rate == 16000 and clip.transcript == "Hello."
    np.testing.assert_allclose(clip.audio, audio, atol=1e-4)  # int16 steps


@pytest.mark.parametrize("container", ["webm", "ogg"])
def test_browser_recordings_decode(container):
    """MediaRecorder's WebM (Chrome) and Ogg (Firefox) Opus, at Opus's 48 kHz."""
    data = encoded_bytes(noise(3.0, 48000), 48000, container, "libopus")
    clip = read_clip(data, "Hello.", CLONES, CAP)
    assert clip.sample_rate == 48000 and 2.9 < clip.seconds < 3.1


def test_the_model_cannot_clone():
    facts = ModelFacts("tts", 24000, 12.5, (), 1, 1)
    error = refused(check_request, facts, "Hello.")
    assert error.code == "cloning_unsupported" and "tts cannot make a voice" in error.message


def test_transcript_missing_where_the_model_needs_one():
    for missing in (None, "", "   "):
        error = refused(check_request, CLONES, missing)
        assert error.code == "transcript_required" and "transcript" in error.message
    assert check_request(NO_TRANSCRIPT, None) == ""  # a model that takes the voice alone


def test_transcript_too_long():
    error = refused(check_request, CLONES, "a" * (MAX_TRANSCRIPT_CHARS + 1))
    assert error.code == "transcript_too_long"


def test_too_big_is_refused_before_decoding():
    """The cap is checked on the base64 text: nothing of it is decoded (not even its base64)."""
    text = "A" * (4 * CAP // 3 + 8)  # valid base64 of CAP + 6 bytes
    error = refused(decode_base64, text, CAP)
    assert error.code == "clip_too_large" and error.status == 413
    assert str(CAP) in error.message
    assert len(decode_base64(b64(bytes(CAP)), CAP)) == CAP  # the cap itself is accepted


def test_not_base64():
    for bad in ("not base64!", 42, "", None):
        assert refused(decode_base64, bad, CAP).code == "clip_not_base64"


def test_not_audio():
    for data in (b"just some text, no audio in it" * 20, bytes(2000), b"RIFF" + bytes(100)):
        error = refused(read_clip, data, "Hi.", CLONES, CAP)
        assert error.code == "clip_not_audio", data[:8]


def test_a_file_without_an_audio_stream_is_not_audio():
    import io

    import av

    out = io.BytesIO()
    with av.open(out, "w", format="webm") as c:
        stream = c.add_stream("libvpx", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode(None):
            c.mux(packet)
    error = refused(read_clip, out.getvalue(), "Hi.", CLONES, CAP)
    assert error.code == "clip_not_audio" and "no audio stream" in error.message


def test_unsupported_format():
    data = encoded_bytes(noise(3.0, 16000), 16000, "au", "pcm_s16be")
    error = refused(read_clip, data, "Hi.", CLONES, CAP)
    assert error.code == "clip_unsupported_format"
    assert "WAV" in error.message and "WebM" in error.message


@pytest.mark.parametrize("rate", [8000, 96000])
def test_unsupported_rate(rate):
    error = refused(read_clip, wav_bytes(noise(3.0, rate), rate), "Hi.", CLONES, CAP)
    assert error.code == "clip_unsupported_rate" and f"{rate} Hz" in error.message


def test_too_short():
    error = refused(read_clip, wav_bytes(noise(1.0, 16000), 16000), "Hi.", CLONES, CAP)
    assert error.code == "clip_too_short" and "at least 2 s" in error.message


def test_too_long():
    rules = CLONES.clip_rules
    error = refused(read_clip, wav_bytes(noise(rules.max_s + 2, 16000), 16000), "Hi.", CLONES, CAP)
    assert error.code == "clip_too_long" and f"{rules.max_s:g} s" in error.message


def test_silent():
    for audio in (np.zeros(48000, np.float32), noise(3.0, 16000, level=0.001)):
        error = refused(read_clip, wav_bytes(audio, 16000), "Hi.", CLONES, CAP)
        assert error.code == "clip_silent"


def test_mostly_silent_with_a_little_speech_is_accepted():
    audio = np.zeros(48000, np.float32)
    audio[16000:32000] = noise(1.0, 16000)
    assert read_clip(wav_bytes(audio, 16000), "Hi.", CLONES, CAP).seconds == 3.0


def test_the_size_cap_holds_for_decoded_bytes_too():
    data = wav_bytes(noise(3.0, 16000), 16000)
    error = refused(read_clip, data, "Hi.", CLONES, len(data) - 1)
    assert error.code == "clip_too_large"
    assert base64.b64decode(b64(data)) == data


@pytest.mark.parametrize(
    ("voice_clip", "named"),
    [
        ("AAAA", "`voice_clip` must be an object"),
        ({"transcript": "Hi."}, "`voice_clip.audio`"),
        ({"audio": 42}, "`voice_clip.audio`"),
        ({"audio": "AAAA", "transcript": 1}, "`voice_clip.transcript`"),
        ({"audio": "AAAA", "name": ["me"]}, "`voice_clip.name`"),
        ({"audio": "AAAA", "speaker": 1}, "`voice_clip.speaker`"),
    ],
)
def test_session_start_voice_clip_shape_is_checked(voice_clip, named):
    frame = json.dumps({"type": "session.start", "voice_clip": voice_clip})
    with pytest.raises(ProtocolError) as caught:
        decode_text_frame(frame)
    assert caught.value.code is ErrorCode.BAD_FIELD and named in caught.value.message


def test_session_start_takes_a_voice_or_a_clip():
    clip = {"audio": "AAAA", "transcript": "Hi.", "name": "me"}
    start = decode_text_frame(json.dumps({"type": "session.start", "voice_clip": clip}))
    assert start.voice_clip == ClipUpload("AAAA", "Hi.", "me") and start.voice is None
    with pytest.raises(ProtocolError, match="not both"):
        decode_text_frame(json.dumps({"type": "session.start", "voice": "0", "voice_clip": clip}))
