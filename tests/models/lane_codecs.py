"""The first-chunk lane's tests (on the CPU a threaded detokenizer is the GPU's pipeline without
streams): a codec that logs every push and can hold its jobs, an engine with a held steady
codec and its lane, an engine stepped until a condition holds, and the check that every
request's audio is an eager decode of its own pushes."""

from __future__ import annotations

import threading

import numpy as np

from engine.core import EngineCore
from engine.detok_threads import ThreadedDetokenizer
from engine.outputs import AudioChunk


class LoggedCodec:
    """A codec that logs each call's pushes as (state id, tokens, final, lane) and, when
    gated, holds every call until the gate opens (a steady job kept in flight)."""

    def __init__(self, codec, log: list, lane: bool, gated: bool = False) -> None:
        self.codec, self.log, self.lane = codec, log, lane
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.max_rows = getattr(codec, "max_rows", 0)

    def detokenize(self, states, new_tokens, final):
        if not self.gate.wait(timeout=120):
            raise TimeoutError("the test never opened the steady codec's gate")
        for state, toks, fin in zip(states, new_tokens, final, strict=True):
            self.log.append((id(state), list(toks), fin, self.lane))
        return self.codec.detokenize(states, new_tokens, final)

    def hand_over(self, states, stream) -> None:
        self.codec.hand_over(states, stream)


def run_until(core: EngineCore, done, audio: dict, limit: int = 3000) -> None:
    """Step the engine until done(), collecting each request's audio chunks into `audio`."""
    for _ in range(limit):
        if done():
            return
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio.setdefault(event.request_id, []).append(event.pcm)
    raise AssertionError("the engine never got there")


def held_lane_engine(model, core: EngineCore, device) -> tuple[list[tuple], LoggedCodec]:
    """`core`'s detokenizer replaced by a threaded one whose steady codec logs its pushes and
    holds every job until its gate opens, beside the model's lane (logged, never held).
    Returns the push log and the steady codec."""
    pushes: list[tuple] = []
    steady = LoggedCodec(model, pushes, lane=False, gated=True)
    lane = LoggedCodec(model.first_chunk_lane_codec(), pushes, lane=True)
    core.detok = ThreadedDetokenizer(steady, core.clock, device, lane)
    return pushes, steady


def assert_audio_is_eager_decode_of_pushes(
    model, requests, state_ids: dict, pushes: list[tuple], audio: dict, urgent: bool
) -> None:
    """After a served run whose codec calls `pushes` logged (LoggedCodec): the lane continued
    streams only when every chunk counted as urgent, every token was pushed once, and each
    request's audio equals an eager decode (the model's lane context, no graphs) of its own
    pushes, within a tolerance on the signal's scale (graphs captured at padded batch sizes
    may pick other kernels than the eager calls)."""
    continued = [
        on_lane
        for i, (sid, *_, on_lane) in enumerate(pushes)
        if any(earlier[0] == sid for earlier in pushes[:i])
    ]
    assert any(continued) == urgent
    eager = model.first_chunk_lane_codec()
    for r in requests:
        mine = [(t, fin) for sid, t, fin, _ in pushes if sid == state_ids[r.request_id]]
        assert sum(len(t) for t, _ in mine) == len(r.output_ids)
        state = model.stream_state_for(r.extras)
        expected = np.concatenate([eager.detokenize([state], [t], [fin])[0] for t, fin in mine])
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(np.concatenate(audio[r.request_id]), expected, atol=1e-4 * scale)
