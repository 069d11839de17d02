"""What the engine pushed to a Chatterbox model's S3Gen streamer, stream by stream, to replay
each stream alone through a fresh streamer: the engine's audio for a request must be exactly
what the streamer makes of that request's pushes (the streamer itself is checked against the
official streaming decode in test_chatterbox_s3gen_stream.py).

Not the whole decode: a streamed chunk lacks the flow's attention to the tokens after its
look-ahead, a gap whose size depends on the weights."""

from __future__ import annotations

import numpy as np

from models.chatterbox.config import SPEECH_CODES
from models.chatterbox.s3gen import S3Gen, S3GenVoice
from models.chatterbox.s3gen_stream import S3GenStreamer


class S3GenPushLog:
    def __init__(self, model, monkeypatch) -> None:
        self._pushes: dict[int, list[tuple[list[int], bool]]] = {}
        self._streams: dict[int, object] = {}  # held, so no stream's id is reused meanwhile
        decode = model.streamer.decode

        def logged(streams, codes, final, detok=None):
            for stream, new, last in zip(streams, codes, final, strict=True):
                self._streams[id(stream)] = stream
                self._pushes.setdefault(id(stream), []).append((list(new), last))
            return decode(streams, codes, final, detok)

        monkeypatch.setattr(model.streamer, "decode", logged)

    def replay(self, s3gen: S3Gen, voice: S3GenVoice, codes: list[int]) -> np.ndarray:
        """The audio a fresh streamer makes, alone, of the one stream whose pushed speech codes
        are `codes`, pushed as the engine pushed them."""
        matches = [p for p in self._pushes.values() if _speech(p) == codes]
        assert len(matches) == 1, f"{len(matches)} streams were pushed these codes"
        streamer = S3GenStreamer(s3gen)
        stream = streamer.new_stream(voice)
        return np.concatenate([streamer.decode([stream], [c], [f])[0] for c, f in matches[0]])


def _speech(pushes: list[tuple[list[int], bool]]) -> list[int]:
    return [c for new, _ in pushes for c in new if 0 <= c < SPEECH_CODES]
