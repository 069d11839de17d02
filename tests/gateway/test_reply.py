"""The reply lifecycle every TTS response, spoken turn and duplex conversation goes through
(gateway/reply.py), without a server: status mapping, refused submits, a dead encoder process,
cancelling (also while a submit is in flight), pacing and the metrics."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import pytest

from engine.api import (
    EngineDead,
    EngineOverloaded,
    Finished,
    FinishReason,
    ModelInputError,
    ResponseStream,
    SpeechRequest,
)
from gateway.audio import ChunkEncoder, make_off_loop_encoder
from gateway.codec_workers import CodecProcessFailed
from gateway.metrics import GatewayMetrics
from gateway.protocol import (
    AudioFormat,
    AudioSpec,
    ErrorCode,
    ErrorEvent,
    ResponseDone,
    ResponseStarted,
    ResponseStatus,
)
from gateway.reply import (
    STATUS_OF,
    Emitter,
    ReplyLifecycle,
    ReplyState,
    combined,
)

RATE = 24000
PCM16 = AudioSpec(AudioFormat.PCM16, RATE, 20)


class Facts:
    sample_rate = RATE


class RecordingEngine:
    """The engine surface a reply uses. It records the commands it gets; `refusal` makes the
    next submit raise; while `admitting` is clear, submits wait to be admitted."""

    def __init__(self) -> None:
        self.ready = True
        self.facts = Facts()
        self.commands: list[tuple[str, str]] = []
        self.refusal: Exception | None = None
        self.admitting = asyncio.Event()
        self.admitting.set()
        self.streams: dict[str, ResponseStream] = {}

    async def submit(self, request: SpeechRequest) -> ResponseStream:
        self.commands.append(("submit", request.request_id))
        await self.admitting.wait()
        if self.refusal is not None:
            raise self.refusal
        stream = ResponseStream(asyncio.get_running_loop(), request.request_id)
        self.streams[request.request_id] = stream
        self.commands.append(("admitted", request.request_id))
        return stream

    def cancel(self, request_id: str) -> None:
        self.commands.append(("cancel", request_id))

    def report_playback(self, request_id: str, played_s: float) -> None:
        self.commands.append(("playback", request_id))


class Client:
    """What the reply sent, in order: events, and frames as ("audio", bytes)."""

    def __init__(self) -> None:
        self.sent: list[object] = []
        self.emit = Emitter(self.sent.append, lambda frame, ms: self.sent.append(("audio", frame)))

    @property
    def events(self) -> list[object]:
        return [item for item in self.sent if not isinstance(item, tuple)]

    @property
    def frames(self) -> int:
        return sum(isinstance(item, tuple) for item in self.sent)


class DeadEncoder(ChunkEncoder):
    """An encoder whose worker process has died: every call raises, as PooledEncoder's do."""

    def __init__(self, spec: AudioSpec, source_rate: int) -> None:
        self.spec, self.source_rate = spec, source_rate
        self.closed = False

    async def encode(self, pcm: np.ndarray) -> list[bytes]:
        raise CodecProcessFailed("output encoder process voxgate-encoder-0 exited")

    async def flush(self) -> list[bytes]:
        raise CodecProcessFailed("output encoder process voxgate-encoder-0 exited")

    def close(self) -> None:
        self.closed = True


def make_reply(engine, client, metrics, open_encoder=make_off_loop_encoder, lead_s=0.2):
    return ReplyLifecycle(
        "resp_test",
        engine,
        PCM16,
        client.emit,
        metrics,
        open_encoder,
        logging.getLogger("test.reply"),
        lead_s=lead_s,
    )


def responses(metrics: GatewayMetrics, status: str) -> float:
    value = metrics.registry.get_sample_value("voxgate_responses_total", {"status": status})
    return value or 0.0


async def until(condition) -> None:
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


def request(request_id: str = "resp_test") -> SpeechRequest:
    return SpeechRequest("Hello.", None, request_id=request_id)


def test_every_finish_reason_has_a_status_and_the_first_final_one_wins():
    assert set(STATUS_OF) == set(FinishReason)
    completed, length = ResponseStatus.COMPLETED, ResponseStatus.LENGTH
    cancelled, failed = ResponseStatus.CANCELLED, ResponseStatus.FAILED
    assert combined(completed, length) is length
    assert combined(length, completed) is length  # one truncated segment makes it `length`
    assert combined(length, failed) is failed
    assert combined(failed, cancelled) is failed
    assert combined(cancelled, failed) is cancelled


async def test_a_failed_generation_is_a_model_error_then_done_failed():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    reply = make_reply(engine, client, metrics)
    reply.start()
    assert await reply.submit(request("a")) is not None
    assert await reply.submit(request("b")) is not None
    assert reply.finished(Finished("a", FinishReason.LENGTH, 5)) is ResponseStatus.LENGTH
    assert reply.finished(Finished("b", FinishReason.FAILED, 0, "nan in logits")) is (
        ResponseStatus.FAILED
    )
    assert reply.done() is ResponseStatus.FAILED
    started, error, done = client.events
    assert started == ResponseStarted("resp_test")
    assert error == ErrorEvent(ErrorCode.MODEL_ERROR, "nan in logits")
    assert done == ResponseDone("resp_test", ResponseStatus.FAILED, 0, None)
    assert responses(metrics, "failed") == 1
    assert ("cancel", "a") not in engine.commands  # both ended on their own: nothing to free


@pytest.mark.parametrize(
    ("refusal", "code"),
    [
        (EngineOverloaded("no KV pages free"), ErrorCode.OVERLOADED),
        (ModelInputError("unknown voice 'x'"), ErrorCode.BAD_FIELD),
        (ValueError("turns must end with a user turn"), ErrorCode.BAD_FIELD),
        (RuntimeError("the engine is not running"), ErrorCode.INTERNAL),
    ],
)
async def test_a_refused_submit_says_why_once_and_the_reply_fails(refusal, code):
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    engine.refusal = refusal
    reply = make_reply(engine, client, metrics)
    reply.start()
    assert await reply.submit(request()) is None
    # The refused request's end, played in its turn, does not repeat the error.
    reply.finished(Finished("resp_test", FinishReason.FAILED, 0))
    reply.cancel_engine_requests()
    reply.done()
    assert client.events[1:] == [
        ErrorEvent(code, str(refusal), fatal=False),
        ResponseDone("resp_test", ResponseStatus.FAILED, 0, None),
    ]
    assert ("cancel", "resp_test") not in engine.commands  # never admitted: nothing to free


async def test_a_barge_in_before_a_refused_segment_is_reached_ends_the_reply_cancelled():
    # A TTS response plays its first segment while its second was refused: the refusal's
    # error is out at once, but the response fails only when the player reaches that segment.
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    reply = make_reply(engine, client, metrics)
    reply.start()
    assert await reply.submit(request("s0")) is not None
    engine.refusal = EngineOverloaded("no KV pages free")
    assert await reply.submit(request("s1")) is None
    assert reply.status is ResponseStatus.COMPLETED
    reply.cancel()
    assert reply.done() is ResponseStatus.CANCELLED
    assert engine.commands[-1] == ("cancel", "s0")
    assert [type(e) for e in client.events] == [ResponseStarted, ErrorEvent, ResponseDone]


async def test_a_dead_encoder_fails_that_reply_alone_and_frees_its_request():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    encoders: list[DeadEncoder] = []

    def open_dead(spec, rate):
        encoders.append(DeadEncoder(spec, rate))
        return encoders[-1]

    reply = make_reply(engine, client, metrics, open_encoder=open_dead)
    reply.start()

    async def body(encoder: ChunkEncoder) -> None:
        stream = await reply.submit(request())
        assert stream is not None
        await reply.send(await encoder.encode(np.zeros(RATE // 10, np.float32)))

    await reply.play(body)  # does not raise: the session goes on
    assert reply.done() is ResponseStatus.FAILED
    error = client.events[1]
    assert error.code is ErrorCode.INTERNAL and not error.fatal
    assert "encoder process" in error.message
    assert client.events[2] == ResponseDone("resp_test", ResponseStatus.FAILED, 0, None)
    assert engine.commands[-1] == ("cancel", "resp_test")
    assert encoders[0].closed


async def test_an_encoder_that_cannot_be_opened_fails_the_reply_before_any_submit():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)

    def no_encoder(spec, rate):
        raise CodecProcessFailed("no output encoder process is running")

    reply = make_reply(engine, client, metrics, open_encoder=no_encoder)
    reply.start()
    await reply.play(lambda encoder: reply.submit(request()))
    assert reply.done() is ResponseStatus.FAILED
    assert engine.commands == []


async def test_a_cancel_while_the_submit_is_in_flight_waits_for_admission():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    engine.admitting.clear()
    reply = make_reply(engine, client, metrics)
    reply.start()
    submit = asyncio.create_task(reply.submit(request()))
    await until(lambda: engine.commands)  # the engine has the submit, and holds it
    reply.cancel()
    assert engine.commands == [("submit", "resp_test")]  # a cancel now could overtake it
    engine.admitting.set()
    stream = await submit
    assert stream is not None  # the caller may still read its Finished (a turn's output ids)
    assert engine.commands == [
        ("submit", "resp_test"),
        ("admitted", "resp_test"),
        ("cancel", "resp_test"),
    ]
    reply.finished(Finished("resp_test", FinishReason.CANCELLED, 3))
    reply.cancel()  # again: nothing more is sent to the engine
    assert reply.done() is ResponseStatus.CANCELLED
    assert engine.commands.count(("cancel", "resp_test")) == 1
    assert client.events[-1] == ResponseDone("resp_test", ResponseStatus.CANCELLED, 0, None)


async def test_a_caller_that_gives_up_on_a_submit_frees_the_request_once_admitted():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    engine.admitting.clear()
    reply = make_reply(engine, client, metrics)
    submit = asyncio.create_task(reply.submit(request()))
    await until(lambda: engine.commands)  # the engine has the submit, and holds it
    submit.cancel()  # the session went away
    with pytest.raises(asyncio.CancelledError):
        await submit
    assert ("cancel", "resp_test") not in engine.commands
    engine.admitting.set()
    await until(lambda: ("cancel", "resp_test") in engine.commands)
    assert engine.commands[-2:] == [("admitted", "resp_test"), ("cancel", "resp_test")]


async def test_a_reply_cancelled_before_its_submit_submits_nothing():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    reply = make_reply(engine, client, metrics)
    reply.start()
    reply.cancel()
    assert await reply.submit(request()) is None
    assert reply.done() is ResponseStatus.CANCELLED
    assert engine.commands == []
    assert [type(e) for e in client.events] == [ResponseStarted, ResponseDone]  # no error


async def test_a_cancel_stops_paced_audio_at_once():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    reply = make_reply(engine, client, metrics, lead_s=0.1)
    reply.start()
    await reply.submit(request())
    frames = [bytes(960)] * 50  # 1 s of 20-ms frames: only the lead may leave at once
    sending = asyncio.create_task(reply.send(frames))
    await asyncio.sleep(0.05)
    reply.cancel()
    assert await asyncio.wait_for(sending, 1.0) is False  # not after the whole second
    sent = client.frames
    assert 5 <= sent < 50
    assert await reply.send([bytes(960)]) is False
    reply.finished(Finished("resp_test", FinishReason.CANCELLED, 0))
    reply.done()
    done = client.events[-1]
    assert (done.status, done.audio_ms) == (ResponseStatus.CANCELLED, sent * 20)
    assert 0 <= done.ttfa_ms < 1000  # from the submit to the first frame
    assert client.frames == sent
    audio_s = metrics.registry.get_sample_value("voxgate_audio_sent_seconds_total")
    assert audio_s == pytest.approx(sent * 0.02)
    assert metrics.registry.get_sample_value("voxgate_ttfa_seconds_count") == 1


async def test_an_engine_lost_stops_paced_audio_at_once():
    """The engine dies with audio still waiting for its pacing slots: those frames are dropped
    and the stream's failed end comes next, so the session is told now, not after up to the
    lead of audio already made has played out."""
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    reply = make_reply(engine, client, metrics, lead_s=0.1)
    reply.start()
    stream = await reply.submit(request())
    sending = asyncio.create_task(reply.send([bytes(960)] * 50))  # 1 s of 20-ms frames
    await asyncio.sleep(0.05)
    stream.lose(Finished("resp_test", FinishReason.FAILED, 0, "the engine process exited"))
    assert await asyncio.wait_for(sending, 0.5) is False  # not after the whole second
    assert 5 <= client.frames < 50 and not reply.cancelled
    assert await reply.send([bytes(960)]) is False
    event = await stream.get()
    assert (event.reason, event.error) == (FinishReason.FAILED, "the engine process exited")
    assert reply.finished(event) is ResponseStatus.FAILED
    assert client.events[-1] == ErrorEvent(ErrorCode.MODEL_ERROR, "the engine process exited")


async def test_a_stream_lost_before_its_consumer_watches_it_says_so_at_once():
    stream = ResponseStream(asyncio.get_running_loop(), "r")
    stream.lose(Finished("r", FinishReason.FAILED, 0, "gone"))
    await until(lambda: stream.lost)
    told = []
    stream.on_lost(lambda: told.append(True))
    assert told == [True]
    assert (await stream.get()).reason is FinishReason.FAILED


async def test_what_the_user_heard_is_their_report_capped_at_what_was_sent():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    reply = make_reply(engine, client, metrics, lead_s=0.2)
    reply.start()
    await reply.send([bytes(960)] * 5)  # 100 ms, within the lead: at once
    assert reply.heard_s(0.04) == pytest.approx(0.04)
    assert reply.heard_s(5.0) == pytest.approx(0.1)
    assert 0 <= reply.heard_s(None) <= 0.1  # the send clock: time since the first frame


@pytest.mark.parametrize("lead_s", [1.0, None])
async def test_a_replys_encoder_knows_when_its_listener_needs_the_next_chunk(lead_s):
    """A reply hands its encoder its listener's need (the encoder processes rank the calls
    waiting together by it): a paced reply by its playback clock, an unpaced one as its
    listener plays from the first frame; both now, before any audio."""
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    encoders: list[ChunkEncoder] = []

    def opened(spec, rate):
        encoders.append(make_off_loop_encoder(spec, rate))
        return encoders[-1]

    needs: list[float | None] = []

    async def play(encoder: ChunkEncoder) -> None:
        needs.append(encoders[-1].needed_by() if encoders[-1].needed_by else None)
        await reply.send([bytes(960)] * 10)  # 200 ms, within the lead: at once
        needs.append(encoders[-1].needed_by())

    reply = make_reply(engine, client, metrics, opened, lead_s=lead_s)
    reply.start()
    start = time.monotonic()
    await reply.play(play)
    assert start <= needs[0] <= time.monotonic()  # no audio yet: needed now
    assert needs[1] == pytest.approx(start + 0.2, abs=0.05)  # when the 200 ms run out


async def test_an_unpaced_reply_sends_as_frames_come():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    reply = make_reply(engine, client, metrics, lead_s=None)
    reply.start()
    assert await reply.send([bytes(960)] * 100)  # 2 s, far past any lead
    assert reply.underruns == 0 and reply.audio_ms == 2000


async def test_a_playback_report_reaches_only_a_request_still_generating():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    reply = make_reply(engine, client, metrics)
    reply.report_playback("resp_test", 0.5)  # not submitted yet
    await reply.submit(request())
    reply.report_playback("resp_test", 0.5)
    reply.request_ended("resp_test")
    reply.report_playback("resp_test", 0.7)
    assert engine.commands.count(("playback", "resp_test")) == 1


async def test_the_end_of_a_reply_with_the_engine_gone_ends_the_session():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    reply = make_reply(engine, client, metrics)
    reply.start()
    engine.ready = False
    with pytest.raises(EngineDead):
        reply.done()
    assert isinstance(client.events[-1], ResponseDone)  # the reply's end is told first
    assert reply.state is ReplyState.DONE


async def test_a_reply_never_started_ends_without_a_word():
    engine, client, metrics = RecordingEngine(), Client(), GatewayMetrics(lambda: None)
    engine.refusal = EngineOverloaded("at capacity")
    reply = make_reply(engine, client, metrics, lead_s=None)
    assert await reply.submit(request()) is None  # a duplex conversation is refused
    reply.done()
    assert client.events == [ErrorEvent(ErrorCode.OVERLOADED, "at capacity")]
    assert responses(metrics, "failed") == 0
