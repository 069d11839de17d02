"""The first-chunk lane's tests on the CPU (a threaded detokenizer, the GPU's pipeline without
streams): a codec that logs every push and can hold its jobs, and an engine stepped until a
condition holds."""

from __future__ import annotations

import threading

from engine.core import EngineCore
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
