"""Output encoders: exact frame sizes, and Opus that decodes back to what went in."""

from __future__ import annotations

import av
import numpy as np
import pytest
from gateway_testkit import decode_opus, resample

from gateway.audio import make_encoder
from gateway.protocol import AudioFormat, AudioSpec

SOURCE_RATE = 24000


def tone(seconds: float, rate: int = SOURCE_RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1250 * t)).astype(
        np.float32
    )


def encode_all(spec: AudioSpec, pcm: np.ndarray, pieces: int = 9) -> list[bytes]:
    enc = make_encoder(spec, SOURCE_RATE)
    frames: list[bytes] = []
    for piece in np.array_split(pcm, pieces):  # uneven engine chunks, as in production
        frames += enc.encode(piece)
    return frames + enc.flush()


def best_alignment(
    decoded: np.ndarray, reference: np.ndarray, max_lag: int = 2000
) -> tuple[float, float]:
    """(correlation, SNR dB) of decoded vs reference at the lag that fits best (Opus delays its
    output by its lookahead, ~6.5 ms)."""
    best = (-1.0, -np.inf)
    n = len(reference) - max_lag
    for lag in range(0, max_lag):
        a = decoded[lag : lag + n]
        b = reference[:n]
        if len(a) < n:
            break
        corr = float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
        if corr > best[0]:
            snr = 10 * np.log10(np.sum(b**2) / (np.sum((a - b) ** 2) + 1e-12))
            best = (corr, snr)
    return best


@pytest.mark.parametrize(
    "spec, frame_bytes",
    [
        (AudioSpec(AudioFormat.PCM16, 8000, 20), 320),
        (AudioSpec(AudioFormat.PCM16, 16000, 20), 640),
        (AudioSpec(AudioFormat.PCM16, 24000, 10), 480),
        (AudioSpec(AudioFormat.PCM16, 48000, 60), 5760),
        (AudioSpec(AudioFormat.MULAW, 8000, 20), 160),
        (AudioSpec(AudioFormat.MULAW, 8000, 40), 320),
    ],
)
def test_pcm_frames_have_exact_sizes(spec, frame_bytes):
    seconds = 1.013  # not a whole number of frames: the last one is padded
    frames = encode_all(spec, tone(seconds))
    assert {len(f) for f in frames} == {frame_bytes}
    assert len(frames) == int(np.ceil(seconds * 1000 / spec.frame_ms))


def test_pcm16_is_the_resampled_signal():
    pcm = tone(0.5)
    frames = encode_all(AudioSpec(AudioFormat.PCM16, 16000, 20), pcm)
    got = np.frombuffer(b"".join(frames), dtype="<i2").astype(np.float32) / 32768
    want = resample(pcm, SOURCE_RATE, 16000)
    n = len(want) - 100
    assert np.max(np.abs(got[:n] - want[:n])) < 2e-3  # only int16 rounding apart


def test_mulaw_decodes_back():
    pcm = tone(0.5)
    frames = encode_all(AudioSpec(AudioFormat.MULAW, 8000, 20), pcm)
    dec = av.CodecContext.create("pcm_mulaw", "r")
    dec.sample_rate = 8000
    dec.layout = "mono"
    got = np.concatenate(
        [f.to_ndarray().reshape(-1) for f in dec.decode(av.Packet(b"".join(frames)))]
    )
    want = resample(pcm, SOURCE_RATE, 8000)
    n = len(want) - 100
    # μ-law keeps ~8 bits of log-scaled precision: a few percent of full scale at most.
    assert np.max(np.abs(got[:n].astype(np.float32) / 32768 - want[:n])) < 0.03


@pytest.mark.parametrize("frame_ms", [10, 20, 40, 60])
def test_opus_one_packet_per_frame_and_round_trip(frame_ms):
    pcm = tone(1.0)
    packets = encode_all(AudioSpec(AudioFormat.OPUS, 48000, frame_ms), pcm)
    # One packet per frame_ms of audio, plus the codec's lookahead flushed at the end.
    frames = -(-1000 // frame_ms)  # the partial last frame is padded to a whole one
    assert len(packets) in (frames, frames + 1)
    decoded = decode_opus(packets)
    assert len(decoded) == len(packets) * 48 * frame_ms
    corr, snr = best_alignment(decoded, resample(pcm, SOURCE_RATE, 48000))
    assert corr > 0.98 and snr > 12, (corr, snr)


def test_opus_from_a_native_rate_calls_libopus_directly_and_holds_no_frame_back(monkeypatch):
    """24 kHz (the models' rate) goes straight into libopus (gateway.opus_lib): a chunk's
    frames all come out of its own encode. A rate Opus does not take goes through the
    resampler, which keeps its last frame back; both decode to what went in. Without a usable
    libopus, the PyAV encoder takes over."""
    from gateway import opus_lib
    from gateway.audio import DirectOpusEncoder, OpusEncoder

    spec = AudioSpec(AudioFormat.OPUS, 48000, 20)
    direct = make_encoder(spec, 24000)
    assert isinstance(direct, DirectOpusEncoder)
    assert len(direct.encode(tone(0.64))) == 32  # all of the chunk's 20-ms frames
    assert len(direct.encode(tone(0.01))) == 0 and len(direct.flush()) == 1  # padded tail
    resampled = make_encoder(spec, 22050)
    assert isinstance(resampled, OpusEncoder)
    assert len(resampled.encode(tone(0.64, 22050))) == 31
    pcm = tone(1.0, 22050)
    packets = resampled.encode(pcm) + resampled.flush()
    corr, snr = best_alignment(decode_opus(packets), resample(pcm, 22050, 48000))
    assert corr > 0.98 and snr > 12, (corr, snr)

    monkeypatch.setattr(opus_lib, "_candidates", lambda: ["/nonexistent/libopus.so"])
    opus_lib.load_opus.cache_clear()
    try:
        assert opus_lib.load_opus() is None
        assert isinstance(make_encoder(spec, 24000), OpusEncoder)
    finally:
        monkeypatch.undo()
        opus_lib.load_opus.cache_clear()


def test_non_finite_samples_are_sanitised():
    pcm = tone(0.1)
    pcm[10:20] = np.nan
    pcm[30] = np.inf
    frames = encode_all(AudioSpec(AudioFormat.PCM16, 24000, 20), pcm)
    got = np.frombuffer(b"".join(frames), dtype="<i2")
    assert np.all(np.abs(got) <= 32767)


def test_the_off_loop_encoder_gives_the_same_frames_and_serialises_its_calls():
    """OffLoopEncoder (what sessions use): the same Opus packets as the encoder run inline, and
    a call whose caller was cancelled (barge-in) finishes before the next one starts."""
    import asyncio

    from gateway.audio import make_off_loop_encoder

    spec = AudioSpec(AudioFormat.OPUS, 48000, 20)
    rng = np.random.default_rng(4)
    chunks = [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in (24000, 7000, 12345)]
    inline = make_encoder(spec, 24000)
    expected = [p for c in chunks for p in inline.encode(c)] + inline.flush()

    async def off_loop() -> list[bytes]:
        encoder = make_off_loop_encoder(spec, 24000)
        out = []
        for c in chunks:
            out += await encoder.encode(c)
        out += await encoder.flush()
        assert await encoder.encode(np.zeros(0, np.float32)) == []
        return out

    assert asyncio.run(off_loop()) == expected

    async def cancelled_then_flushed() -> int:
        encoder = make_off_loop_encoder(spec, 24000)
        task = asyncio.create_task(encoder.encode(chunks[0]))
        await asyncio.sleep(0)  # the thread has the chunk
        task.cancel()
        tail = await encoder.flush()  # waits for the cancelled call's thread, then flushes
        return len(tail)

    # Either the cancelled call ran (its thread had started) and the flush drained after it,
    # or it never started; never both at once on the codec.
    ran = make_encoder(spec, 24000)
    ran.encode(chunks[0])
    assert asyncio.run(cancelled_then_flushed()) in (
        len(ran.flush()),
        len(make_encoder(spec, 24000).flush()),
    )


@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_a_chunk_is_encoded_head_first_with_the_same_bytes(fmt):
    """encode_parts, how responses encode their chunks: a head of at most HEAD_FRAMES frames
    (at least HEAD_FRAMES - 1, the resampler keeping one back: the playback that covers the
    rest's encoding), then the rest in one piece, byte for byte what one encode gives; and
    every encode's time queued and running reaches the observer (the gateway's metrics)."""
    import asyncio

    from gateway.audio import HEAD_FRAMES, make_off_loop_encoder

    rng = np.random.default_rng(3)
    pcm = (rng.standard_normal(24000 * 128 // 100) * 0.1).astype(np.float32)  # 1.28 s
    timings: list[tuple[float, float]] = []

    async def pieces(chunk: np.ndarray) -> tuple[list[list[bytes]], list[bytes]]:
        spec = AudioSpec(format=fmt)
        parts = make_off_loop_encoder(spec, 24000, observe=lambda q, r, h: timings.append((q, r)))
        whole = make_off_loop_encoder(spec, 24000)
        split = [part async for part in parts.encode_parts(chunk)] + [await parts.flush()]
        return split, await whole.encode(chunk) + await whole.flush()

    split, whole = asyncio.run(pieces(pcm))
    assert HEAD_FRAMES - 1 <= len(split[0]) <= HEAD_FRAMES
    assert len(split) == 3 and len(split[1]) > len(split[0])  # head, rest, flush
    assert [f for part in split for f in part] == whole
    assert len(timings) == 3 and all(q >= 0 and r > 0 for q, r in timings)
    # A chunk no longer than two heads is encoded in one go.
    short, _ = asyncio.run(pieces(pcm[: 24000 * 2 * HEAD_FRAMES * AudioSpec().frame_ms // 1000]))
    assert len(short) == 2  # the chunk, then the flush


def _opus_at(complexities: list[int], chunks: list[np.ndarray]) -> list[bytes]:
    """libopus itself, chunk i's frames at complexities[i]: what a hurrying encoder must give."""
    import ctypes

    from gateway.opus_lib import MAX_PACKET, load_opus

    lib = load_opus()
    encoder = lib.create(SOURCE_RATE, 32000)
    out = ctypes.create_string_buffer(MAX_PACKET)
    packets = []
    for complexity, chunk in zip(complexities, chunks, strict=True):
        lib.set_complexity(encoder, complexity)
        packets += [lib.encode(encoder, f, out) for f in chunk.reshape(-1, 480)]
    lib.destroy(encoder)
    return packets


def _speechlike(seconds: float, seed: int) -> np.ndarray:
    """Voiced harmonics under a syllable envelope, with a little noise: where Opus's complexity
    settings encode differently (a pure tone can come out the same)."""
    t = np.arange(int(seconds * SOURCE_RATE)) / SOURCE_RATE
    voiced = sum(np.sin(2 * np.pi * 130 * k * t) / k for k in range(1, 15))
    noise = np.random.default_rng(seed).standard_normal(len(t))
    return (0.15 * np.abs(np.sin(2 * np.pi * 3 * t)) * voiced + 0.01 * noise).astype(np.float32)


def test_an_encode_that_waited_runs_at_the_hurried_complexity_and_the_next_one_does_not():
    """DirectOpusEncoder.waited: a call that waited its threshold or more encodes at
    HURRIED_COMPLEXITY, the next one that did not at FULL_COMPLEXITY again; the packets are
    libopus's own at those settings, one decodable stream; with no threshold it never hurries."""
    from gateway.audio import FULL_COMPLEXITY, HURRIED_COMPLEXITY, DirectOpusEncoder, run_encode

    chunks = [_speechlike(0.48, seed) for seed in range(3)]
    encoder = make_encoder(AudioSpec(AudioFormat.OPUS), SOURCE_RATE, hurry_after_s=0.02)
    assert isinstance(encoder, DirectOpusEncoder)
    got, flags = [], []
    for chunk, queued_s in zip(chunks, (0.0, 0.02, 0.019), strict=True):
        frames, hurried = run_encode(encoder, chunk, queued_s)
        got, flags = got + frames, flags + [hurried]
    assert flags == [False, True, False]
    assert run_encode(encoder, None, 0.5) == ([], True)  # whole frames: nothing to flush
    full, hurried = FULL_COMPLEXITY, HURRIED_COMPLEXITY
    assert got == _opus_at([full, hurried, full], chunks)
    assert got != _opus_at([full, full, full], chunks)  # the hurried chunk really differs
    decoded = decode_opus(got)
    corr, _ = best_alignment(decoded, resample(np.concatenate(chunks), SOURCE_RATE, 48000))
    assert corr > 0.8

    patient = make_encoder(AudioSpec(AudioFormat.OPUS), SOURCE_RATE)  # no threshold
    calm = [p for chunk in chunks for p in run_encode(patient, chunk, 60.0)[0]]
    assert calm == _opus_at([full, full, full], chunks)


def test_the_off_loop_encoder_hurries_by_its_threshold():
    """Sessions' encoders on threads: every call waits at least 0 s, none waits an hour."""
    import asyncio

    from gateway.audio import FULL_COMPLEXITY, HURRIED_COMPLEXITY, make_off_loop_encoder

    chunks = [_speechlike(0.32, seed) for seed in range(2)]
    flags: list[bool] = []  # what the observer (the gateway's metrics) hears of each call

    async def encoded(hurry_after_s: float) -> list[bytes]:
        encoder = make_off_loop_encoder(
            AudioSpec(),
            SOURCE_RATE,
            observe=lambda q, r, hurried: flags.append(hurried),
            hurry_after_s=hurry_after_s,
        )
        return [p for chunk in chunks for p in await encoder.encode(chunk)]

    assert asyncio.run(encoded(0.0)) == _opus_at([HURRIED_COMPLEXITY] * 2, chunks)
    assert asyncio.run(encoded(3600.0)) == _opus_at([FULL_COMPLEXITY] * 2, chunks)
    assert flags == [True, True, False, False]
