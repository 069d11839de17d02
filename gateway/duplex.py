"""A full-duplex conversation on one WebSocket session (Moshi).

How it maps onto PROTOCOL v1 (docs/gateway.md): the user's first binary audio frame opens a
response — `response.started` — which lasts as long as the conversation: the model's audio
flows out as binary frames continuously, its text as `transcript.delta`, while the user's
audio keeps flowing in. `session.end` (or the socket closing) ends it between frames:
`response.done` with `completed`; `response.cancel` ends it at once with `cancelled`; the
model's context running out ends it with `length`. Audio sent after a response is done opens
the next one, a fresh conversation.

Output is not paced here: the engine emits one 80 ms frame per session every 80 ms, on its own
audio clock, so frames are sent as they come (the send queue's bound still closes a client
that stops reading).

Input crosses to the engine in whole model frames (ModelFrames). Where the gateway runs
microphone decoder processes (`--decode-processes`, by default beside a CUDA engine), a
session's Opus packets are decoded there instead of on the event loop, each packet's samples
taken in the order the packets came; an `input.commit` or `session.end` waits for the packets
before it, so the conversation it ends gets all of its audio, and audio still being decoded
when a conversation is cancelled goes with it. A bad packet is an `error`
(`unsupported_audio`) as on the loop; if the decoder's process dies, the session decodes on
the loop from then on, the packets the process took with it and those queued behind them
first, in order. An engine with no room for a
conversation ends the session: error `overloaded` (fatal), close 1013, as a session refused at
`session.start` is; a non-fatal error would leave the microphone streaming into a new attempt
on every frame.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from engine.api import (
    AudioChunk,
    EngineClient,
    Finished,
    FinishReason,
    ResponseStream,
    SpeechRequest,
    TextDelta,
)
from gateway.audio import ChunkEncoder, OpenEncoder
from gateway.audio_in import AudioDecoder, UndecodableAudio
from gateway.codec_workers import CodecProcessFailed, PooledDecoder
from gateway.metrics import GatewayMetrics
from gateway.opus_lib import packet_ms
from gateway.pacing import SendQueueFull
from gateway.protocol import (
    AudioSpec,
    ErrorCode,
    ErrorEvent,
    InputCommit,
    ProtocolError,
    ResponseCancel,
    TextInput,
    TranscriptDelta,
    TurnDetection,
)
from gateway.reply import Emitter, ReplyLifecycle, SpeechOptions

# A session's Opus decoder to the model's rate in the decoder processes, or None where none
# run (gateway.app.Gateway.open_mic_decoder).
OpenMicDecoder = Callable[[int], PooledDecoder | None]


class DuplexConversation:
    """gateway/speech_conversation.py's SpeechConversation for full-duplex models (Moshi)."""

    def __init__(
        self,
        engine: EngineClient,
        emit: Emitter,
        metrics: GatewayMetrics,
        open_encoder: OpenEncoder,
        log: logging.LoggerAdapter,
        finish_timeout_s: float,
        open_mic_decoder: OpenMicDecoder | None = None,
    ) -> None:
        self._engine, self._emit, self._metrics, self._log = engine, emit, metrics, log
        self._open_encoder, self._finish_timeout_s = open_encoder, finish_timeout_s
        self._open_mic_decoder = open_mic_decoder
        self._mic: PooledDecoder | None = None  # the decoder in a process, while it serves
        self._decoding = 0  # packets sent to it whose samples are not back yet
        self._decoded = asyncio.Event()  # set while none is
        self._decoded.set()
        self._generation = 0  # moves on when audio being decoded belongs to nothing any more
        # Packets for the decoder process not sent yet: they go a model frame's worth at a time
        # (one call, not four, for 20-ms packets and Moshi's 80-ms frame; ModelFrames would
        # hold a part frame back anyway).
        self._unsent: list[bytes] = []
        self._unsent_ms = 0.0
        self._frame_ms = 0.0
        self.replies = 0
        self._options: SpeechOptions | None = None
        self._decoder: AudioDecoder | None = None
        self._frames: ModelFrames | None = None
        self._pending: list[np.ndarray] = []  # audio before the engine admitted the session
        self._audio_in = asyncio.Event()
        self._reply: ReplyLifecycle | None = None  # the conversation open (or opening)
        self._stream: ResponseStream | None = None
        self._ending = False  # the open (or opening) conversation was told to end
        self._end_on_open = False  # finished before the engine admitted it
        self.busy = False  # a conversation is open, or being opened
        self.last_played = time.monotonic()
        self._idle = asyncio.Event()  # set while no conversation is open
        self._idle.set()

    def start(
        self, options: SpeechOptions, input_audio: AudioSpec, detection: TurnDetection | None = None
    ) -> None:
        """Full duplex has no turns: `detection` is accepted and ignored."""
        facts = self._engine.facts
        sampling = options.sampling
        if sampling.max_tokens == type(sampling)().max_tokens:
            # No budget asked for: a conversation may use the model's whole context.
            sampling = replace(sampling, max_tokens=facts.max_context - 1)
        self._options = replace(options, sampling=sampling)
        self._decoder = AudioDecoder(input_audio, facts.sample_rate)
        self._frames = ModelFrames(round(facts.sample_rate * facts.seconds_per_token))
        self._frame_ms = 1000 * facts.seconds_per_token
        # Only what libopus decodes in one call a packet goes out; PCM16, μ-law and resampled
        # Opus are cheap or rare, and stay here.
        if self._open_mic_decoder is not None and self._decoder.direct_opus:
            try:
                self._mic = self._open_mic_decoder(facts.sample_rate)
            except CodecProcessFailed as exc:
                self._log.warning("microphone decoded on the event loop: %s", exc)

    # --- input (the session's reader) ----------------------------------------------------------
    def push(self, data: bytes) -> None:
        """One binary frame of user audio; raises UndecodableAudio for a bad frame (decoded
        here; one decoded in a process is answered with an `error` when it comes back)."""
        if self._decoder is None or self._frames is None:
            return
        # While packets are out in a decoder process, later ones queue behind them, also once
        # the process has died (its packets come back to be decoded here first).
        if self._mic is not None or self._decoding:
            self._unsent.append(data)
            ms = packet_ms(data)
            self._unsent_ms += self._frame_ms if ms is None else ms
            if self._mic is not None and (self._unsent_ms >= self._frame_ms or not self.busy):
                self._send_unsent()  # a frame's worth, or the audio that opens a conversation
            return
        self._take(self._decoder.decode(data))

    def _send_unsent(self) -> None:
        """The packets gathered for the decoder process, as one call."""
        if not self._unsent or self._mic is None:
            return
        packets, self._unsent, self._unsent_ms = self._unsent, [], 0.0
        decoding = self._mic.decode(packets)
        self._decoding += 1
        self._decoded.clear()
        decoding.add_done_callback(functools.partial(self._came_back, self._generation, packets))

    def _came_back(self, generation: int, packets: list[bytes], decoding: asyncio.Future) -> None:
        """Packets' samples from the decoder process, in the order the packets went. If the
        process died, they and the packets queued behind them are decoded here instead."""
        self._decoding -= 1
        if not self._decoding:
            self._decoded.set()
        error = decoding.exception()
        if error is not None:
            if self._mic is not None:
                self._log.warning("microphone decoded on the event loop from now: %s", error)
                self._mic = None
            if generation == self._generation:
                self._decode_here(packets)
            if not self._decoding:  # the last call out: the packets queued behind it next
                queued, self._unsent, self._unsent_ms = self._unsent, [], 0.0
                self._decode_here(queued)
            return
        if generation != self._generation:
            return  # the conversation they belonged to was cancelled
        pcm, bad = PooledDecoder.decoded(decoding.result())
        if self._report_bad(bad):
            self._take(pcm)

    def _decode_here(self, packets: list[bytes]) -> None:
        """Packets decoded on the event loop, in order, around the bad ones."""
        assert self._decoder is not None
        for data in packets:
            try:
                pcm = self._decoder.decode(data)
            except UndecodableAudio as exc:
                if not self._report_bad([str(exc)]):
                    return
                continue
            self._take(pcm)

    def _report_bad(self, messages: list[str]) -> bool:
        """A non-fatal `unsupported_audio` error for each bad packet; False once the session
        is closing for a client that does not read."""
        try:
            for message in messages:
                self._emit.event(ErrorEvent(ErrorCode.UNSUPPORTED_AUDIO, message, fatal=False))
        except SendQueueFull:
            return False
        return True

    def _take(self, decoded: np.ndarray) -> None:
        """A packet's samples, in the order the packets came."""
        if self._frames is None:
            return
        pcm = self._frames.add(decoded)
        if self._stream is not None and not self._ending:
            if len(pcm):
                self._engine.push_audio(self._stream.request_id, pcm)
        else:
            self._pending.append(pcm)
            self._audio_in.set()

    def reconfigure(
        self, options: SpeechOptions, input_audio: AudioSpec | None, detection: TurnDetection | None
    ) -> None:
        """`session.update` changes nothing in a conversation already under way."""

    async def handle(self, event: object) -> bool:
        if isinstance(event, TextInput):
            # A full-duplex session plays no text responses: queued, the text would wait forever.
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_INPUT,
                f"{self._engine.facts.name} is a full-duplex speech model and takes no text: "
                "stream the user's audio as binary frames",
            )
        if isinstance(event, ResponseCancel):
            await self.cancel()
            return True
        if isinstance(event, InputCommit):  # the user is done talking: the conversation ends
            await self.finish(self._finish_timeout_s)
            return True
        return False

    async def end(self, timeout_s: float) -> None:
        await self.finish(timeout_s)

    async def finish(self, timeout_s: float) -> None:
        """The user is done: the conversation ends between frames, with the audio the user
        sent before (being decoded in a process, it is waited for), and its `response.done`
        (`completed`) is sent before this returns (or `timeout_s` passes)."""
        self._send_unsent()
        try:
            async with asyncio.timeout(timeout_s):
                await self._decoded.wait()
                self._end(FinishReason.STOP)
                await self._idle.wait()
        except TimeoutError:
            # Audio still being decoded now would open a conversation of its own: it goes.
            self._generation += 1
            self._end(FinishReason.STOP)  # a no-op if it ended above
            self._log.warning("conversation did not end within %.1f s", timeout_s)

    async def cancel(self) -> None:
        self._generation += 1  # what is still being decoded goes with the conversation
        self._unsent, self._unsent_ms = [], 0.0
        self._end(FinishReason.CANCELLED)

    def _end(self, reason: FinishReason) -> None:
        """End the conversation once. Audio not yet handed to the engine belongs to it and goes
        too. While the engine is still admitting it, it ends the moment it is admitted."""
        self._pending.clear()
        if self._frames is not None:
            self._frames.clear()
        if not self.busy or self._ending or self._reply is None:
            return
        self._ending = True
        if reason is not FinishReason.STOP:
            self._reply.cancel()  # also a conversation still being admitted, once it is
        elif self._stream is None:
            self._end_on_open = True
        else:
            self._engine.end_session(self._stream.request_id)

    def stop(self) -> None:
        """The session is going away: free the engine session without a word to the client."""
        self._generation += 1
        self._unsent = []
        if self._mic is not None:
            self._mic.close()
            self._mic = None
        if self._reply is not None:
            self._reply.cancel_engine_requests()
        self._stream = None

    # --- the conversation loop (the session's player task) -------------------------------------
    async def run(self) -> None:
        while True:
            await self._audio_in.wait()
            self._audio_in.clear()
            if not self._pending:
                continue
            await self._converse()

    async def _converse(self) -> None:
        options = self._options
        reply = ReplyLifecycle(
            f"resp_{uuid.uuid4().hex[:16]}",
            self._engine,
            options.output,
            self._emit,
            self._metrics,
            self._open_encoder,
            self._log,
            kind="conversation",
        )
        # Busy from here on, not from admission: an input.commit or response.cancel that comes
        # while the engine admits the conversation must end it, not be lost.
        self._reply, self.busy, self._ending, self._end_on_open = reply, True, False, False
        self.replies += 1
        self._idle.clear()
        try:
            request = SpeechRequest("", None, options.sampling, reply.response_id)
            stream = await reply.submit(request)
            if stream is not None:
                self._stream = stream
                reply.start()
                if self._end_on_open:
                    # Finished while being admitted; audio still pending came after the end
                    # and opens the next conversation, as it would after any response.done.
                    self._engine.end_session(stream.request_id)
                elif not reply.cancelled:
                    for pcm in self._pending:
                        if len(pcm):
                            self._engine.push_audio(stream.request_id, pcm)
                    self._pending.clear()
                await reply.play(lambda encoder: self._play(reply, stream, encoder))
            else:  # refused (the client was told why): its audio goes with it
                self._pending.clear()
        finally:
            self._reply, self._stream = None, None
            self.busy = False
            self.last_played = time.monotonic()
        try:
            reply.done()
        finally:
            self._idle.set()

    async def _play(
        self, reply: ReplyLifecycle, stream: ResponseStream, encoder: ChunkEncoder
    ) -> None:
        """The conversation's output, sent as it comes: the engine's frame clock paces it."""
        async for event in stream:
            if isinstance(event, AudioChunk):
                await reply.send(await encoder.encode(event.pcm), event.made_s)
            elif isinstance(event, TextDelta):
                self._emit.event(TranscriptDelta(reply.response_id, event.text))
            else:
                assert isinstance(event, Finished)
                reply.finished(event)
                await reply.send(await encoder.flush())


class ModelFrames:
    """The user's decoded audio, handed on in whole model frames (Moshi: 80 ms): the engine
    steps on whole frames only, so a 20-ms wire packet that completes none need not cross to
    the engine process. A quarter of the commands at 20-ms packets, and a frame reaches the
    engine the moment its last packet is decoded, as before."""

    def __init__(self, samples_per_frame: int) -> None:
        self.samples_per_frame = max(1, samples_per_frame)
        self._parts: list[np.ndarray] = []
        self._buffered = 0

    def add(self, pcm: np.ndarray) -> np.ndarray:
        """The whole frames `pcm` completes (possibly none: an empty array), in order."""
        if len(pcm):
            self._parts.append(pcm)
            self._buffered += len(pcm)
        whole = self._buffered - self._buffered % self.samples_per_frame
        if not whole:
            return np.zeros(0, np.float32)
        joined = np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0]
        rest = joined[whole:]
        self._parts = [rest] if len(rest) else []
        self._buffered = len(rest)
        return joined[:whole]

    def clear(self) -> None:
        self._parts, self._buffered = [], 0
