"""The live requests as real-time admission reads them: one array a figure, one entry a request
(no torch).

Admission judges every live stream at each arrival (engine/realtime_admission.py): its
context, the tokens it may still make, the audio its listener holds, how long it has played.
Read request by request through their properties, that was most of a verdict's time at
hundreds of streams, on the engine loop's thread between its turns. `gather` reads each
request's fields once, in one pass; what admission derives from them (the outlook's streams,
the listeners' health: engine/listener_guard.py) is then worked out for all of them at once,
exactly as Request's properties define it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

import numpy as np

from engine.request import Request, RequestStatus

_FINISHED = RequestStatus.FINISHED_STOPPED  # every status from here on is a finished one
# The columns that are not int64.
_DTYPES = {
    "realtime": bool,
    "lead_s": np.float64,
    "playing_since": np.float64,
    "first_chunk_s": np.float64,
}


@dataclass(frozen=True)
class StreamColumns:
    """The requests still making tokens (Request.wants_tokens), figure by figure."""

    realtime: np.ndarray  # bool: someone plays its audio as it is made
    prompt_tokens: np.ndarray  # int64
    generated: np.ndarray  # int64: tokens sampled, those in flight included (num_generated)
    max_tokens: np.ndarray  # int64
    min_tokens: np.ndarray  # int64
    text_chars: np.ndarray  # int64: characters of its text (0: none known whole)
    lead_s: np.ndarray  # float64: Request.audio_lead_s at the time gathered (0 before audio)
    playing_since: np.ndarray  # float64: Request.playing_since, NaN before its first audio
    waiting_tokens: np.ndarray  # int64: tokens made, waiting for a chunk
    in_codec_tokens: np.ndarray  # int64: tokens a codec job is decoding
    first_chunk_s: np.ndarray  # float64: the audio in its first chunk (0: none yet)

    def __len__(self) -> int:
        return len(self.realtime)

    @property
    def context_tokens(self) -> np.ndarray:
        """The KV a step reads for each (Request.num_tokens)."""
        return self.prompt_tokens + self.generated

    @property
    def undecoded_tokens(self) -> np.ndarray:
        """Tokens made whose audio is not out yet (Request.undecoded_tokens)."""
        return self.waiting_tokens + self.in_codec_tokens

    @classmethod
    def empty(cls) -> StreamColumns:
        return cls(*(np.zeros(0, dtype=_DTYPES.get(f.name, np.int64)) for f in fields(cls)))

    def where(self, mask: np.ndarray) -> StreamColumns:
        """The requests `mask` picks, in order."""
        return StreamColumns(*(getattr(self, f.name)[mask] for f in fields(self)))


def gather(requests: Iterable[Request], now: float) -> StreamColumns:
    """The figures of those of `requests` still making tokens, at `now` (engine clock)."""
    rows = [
        (
            r.realtime,
            len(r.prompt_ids),
            len(r.output_ids),
            r.num_inflight,
            r.sampling.max_tokens,
            r.sampling.min_tokens,
            r.text_chars,
            r.first_audio_time,
            r.audible_from,
            r.played_s,
            r.played_report_time,
            r.playback_rate,
            r.audio_emitted_s - r.delivery_hold_s,
            r.num_detokenized,
            r.detok_in_flight_tokens,
            r.first_chunk_s,
        )
        for r in requests
        if r.status < _FINISHED
    ]
    if not rows:
        return StreamColumns.empty()
    (
        realtime,
        prompt,
        resolved,
        inflight,
        max_tokens,
        min_tokens,
        text_chars,
        first_audio,
        audible_from,
        played,
        reported_at,
        rate,
        held_out,
        detokenized,
        in_codec,
        first_chunk,
    ) = zip(*rows, strict=True)
    resolved_a = _ints(resolved)
    generated = resolved_a + _ints(inflight)
    rate_a = np.array(rate, dtype=np.float64)
    # Request.playing_since: its first audio, or the end of its hold if that comes later.
    since = np.maximum(_times(first_audio), np.array(audible_from, dtype=np.float64))
    played_a, reported_a = _times(played), _times(reported_at)
    # Request.audio_lead_s: what was sent, less what the listener holds back and has played
    # (as reported, and at its rate since; else at its rate since it began to play).
    with np.errstate(invalid="ignore"):
        played_now = np.where(
            np.isnan(played_a) | np.isnan(reported_a),
            np.maximum(now - since, 0.0) * rate_a,
            played_a + (now - reported_a) * rate_a,
        )
    lead = np.where(
        np.isnan(since), 0.0, (np.array(held_out, dtype=np.float64) - played_now) / rate_a
    )
    max_a = _ints(max_tokens)
    return StreamColumns(
        np.array(realtime, dtype=bool),
        _ints(prompt),
        generated,
        max_a,
        _ints(min_tokens),
        _ints(text_chars),
        lead,
        since,
        resolved_a - _ints(detokenized),
        _ints(in_codec),
        np.array(first_chunk, dtype=np.float64),
    ).where(generated < max_a)


def _ints(values: tuple[int, ...]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _times(values: tuple[float | None, ...]) -> np.ndarray:
    """Times or figures that may be unknown (None), unknown as NaN."""
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
