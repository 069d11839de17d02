"""A client's voice clip, checked: the encoded file (base64 in JSON, on both routes) → a
`VoiceClip` the model can encode, or a `ClipError` that says what to change.

Checks, in order, each with its own code (docs/gateway.md lists them):
the model cannot clone (`cloning_unsupported`) · no transcript where the model needs one
(`transcript_required`) or a transcript too long (`transcript_too_long`) · not base64
(`clip_not_base64`) · over the size cap, checked on the base64 text before anything is decoded
(`clip_too_large`) · not audio PyAV can open, or no audio stream in it (`clip_not_audio`) · a
container other than WAV, FLAC, MP3, Ogg, WebM or MP4/M4A (`clip_unsupported_format`) · a rate
outside 16-48 kHz (`clip_unsupported_rate`: a telephone-band clip cannot give a voice) ·
shorter or longer than the model's ClipRules (`clip_too_short`, `clip_too_long`; decoding stops
just past the longest allowed, so a small file of hours of audio costs no more) · silent
(`clip_silent`).

Pure and blocking (PyAV decodes): callers run `read_clip` off the event loop.
"""

from __future__ import annotations

import base64
import binascii
import io

import numpy as np

from engine.api import ModelFacts, VoiceClip
from models.families import cloning_families

# PyAV's container names of the formats accepted (browsers' MediaRecorder writes WebM or Ogg
# Opus, Safari MP4/AAC; files people keep are WAV, FLAC, MP3).
CONTAINERS = {
    "wav": "WAV",
    "flac": "FLAC",
    "mp3": "MP3",
    "ogg": "Ogg",
    "matroska,webm": "WebM",
    "mov,mp4,m4a,3gp,3g2,mj2": "MP4/M4A",
}
MIN_RATE, MAX_RATE = 16000, 48000
MAX_TRANSCRIPT_CHARS = 1000
# A clip needs this much sound louder than SILENCE_DBFS (in 20 ms frames) to carry a voice.
MIN_VOICED_S = 0.5
SILENCE_DBFS = -45.0


class ClipError(ValueError):
    """A clip the server will not make a voice from. `code` names the check (stable, for
    clients); `status` is the HTTP status POST /v1/voices answers with."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def check_request(facts: ModelFacts, transcript: str | None) -> str:
    """What can be refused before the audio is looked at; returns the transcript to use."""
    if not facts.voice_cloning:
        raise ClipError(
            "cloning_unsupported",
            f"{facts.name} cannot make a voice from a clip; pick one of its voices "
            f"(GET /v1/voices) or serve a model that clones ({cloning_families()})",
        )
    transcript = (transcript or "").strip()
    if facts.clip_rules.needs_transcript and not transcript:
        raise ClipError(
            "transcript_required",
            f"{facts.name} continues the clip's speech: send `transcript`, the words said in it",
        )
    if len(transcript) > MAX_TRANSCRIPT_CHARS:
        raise ClipError(
            "transcript_too_long",
            f"the transcript is {len(transcript)} characters; the limit is {MAX_TRANSCRIPT_CHARS}",
        )
    return transcript


def decode_base64(text: object, max_bytes: int) -> bytes:
    """The clip file's bytes; the size cap is checked on the base64 text, before decoding."""
    if not isinstance(text, str) or not text:
        raise ClipError("clip_not_base64", "`audio` must be the clip file, base64-encoded")
    if len(text) * 3 // 4 > max_bytes + 2:
        raise ClipError(
            "clip_too_large",
            f"the clip is over {max_bytes} bytes; send a shorter clip or a compressed one "
            "(Opus, MP3, FLAC)",
            413,
        )
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ClipError(
            "clip_not_base64", "`audio` is not valid base64 (standard alphabet, padded)"
        ) from None


def read_clip(data: bytes, transcript: str, facts: ModelFacts, max_bytes: int) -> VoiceClip:
    """Decode and check a clip file (blocking). Raises ClipError."""
    if len(data) > max_bytes:
        raise ClipError("clip_too_large", f"the clip is over {max_bytes} bytes", 413)
    audio, rate = _decode(data, facts.clip_rules.max_s)
    rules = facts.clip_rules
    seconds = len(audio) / rate
    if seconds > rules.max_s:
        raise ClipError(
            "clip_too_long", f"the clip is over {rules.max_s:g} s; {facts.name} takes at most that"
        )
    if seconds < rules.min_s:
        raise ClipError(
            "clip_too_short",
            f"the clip is {seconds:.2f} s; {facts.name} needs at least {rules.min_s:g} s of speech",
        )
    if voiced_seconds(audio, rate) < MIN_VOICED_S:
        raise ClipError(
            "clip_silent",
            "the clip is silent (or nearly): record it again, closer to the microphone",
        )
    return VoiceClip(audio, rate, transcript)


def voiced_seconds(audio: np.ndarray, rate: int) -> float:
    """Seconds of 20 ms frames louder than SILENCE_DBFS."""
    frame = rate // 50
    n = len(audio) // frame
    if n == 0:
        return 0.0
    frames = audio[: n * frame].reshape(n, frame).astype(np.float64)
    rms = np.sqrt(np.mean(frames**2, axis=1))
    return float(np.count_nonzero(rms > 10 ** (SILENCE_DBFS / 20))) * 0.02


def _decode(data: bytes, max_s: float) -> tuple[np.ndarray, int]:
    """float32 mono at the clip's own rate, at most a little past `max_s` seconds of it."""
    import av

    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.FFmpegError, ValueError, OSError, UnicodeDecodeError):
        raise ClipError(
            "clip_not_audio", "the clip is not an audio file (send WAV, FLAC, MP3, Ogg, WebM)"
        ) from None
    with container:
        if container.format.name not in CONTAINERS:
            raise ClipError(
                "clip_unsupported_format",
                f"clips in {container.format.long_name or container.format.name} are not "
                f"accepted; send one of {', '.join(CONTAINERS.values())}",
            )
        if not container.streams.audio:
            raise ClipError("clip_not_audio", "the file holds no audio stream")
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate or 0
        if not MIN_RATE <= rate <= MAX_RATE:
            raise ClipError(
                "clip_unsupported_rate",
                f"the clip is sampled at {rate} Hz; record at {MIN_RATE} to {MAX_RATE} Hz "
                "(telephone-band audio cannot give a voice)",
            )
        limit = int((max_s + 0.5) * rate)
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        chunks: list[np.ndarray] = []
        total = 0
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
                    total += len(chunks[-1])
                if total > limit:
                    break
            else:
                chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
        except (av.FFmpegError, ValueError):
            raise ClipError("clip_not_audio", "the clip's audio could not be decoded") from None
    if not chunks:
        raise ClipError("clip_not_audio", "the file holds no audio")
    audio = np.concatenate(chunks).astype(np.float32)
    return np.clip(np.nan_to_num(audio), -1.0, 1.0), rate
