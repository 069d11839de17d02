"""The web demo's microphone in a full-duplex conversation, end to end in headless Chromium: a
real uvicorn server with the tiny-moshi engine, Chromium's fake microphone playing a WAV made
here, the page loaded from `/`, the microphone started and stopped as a user would, and the
page's own readouts (`window.voxgateStats`, the transcript, the notices) and the engine's frame
accounting read back. Runs on CPU; skipped when Debian's Chromium or playwright is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from browser_testkit import PageProblems, chromium_missing, launch
from gateway_testkit import write_wav

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

if chromium_missing():
    pytest.skip(chromium_missing(), allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")

MIC_RATE = 48000
MIC_SECONDS = 3.0  # Chromium loops the file for as long as the microphone runs
MOSHI_FRAME_MS = 80
# Generous: a loaded 2-core machine runs tiny-moshi slower than real time.
WAIT_MS = 60_000
# How much of Moshi's reply to hear before stopping the microphone (a few seconds of talk).
FRAMES_BEFORE_STOP = 40  # 20 ms wire frames: 0.8 s of output, i.e. 10 Moshi frames


def write_microphone_wav(path: Path) -> Path:
    """Speech-like input: a voiced buzz (120 Hz with harmonics) whose loudness comes and goes
    in syllables, 48 kHz mono 16-bit."""
    rng = np.random.default_rng(0)
    t = np.arange(int(MIC_SECONDS * MIC_RATE)) / MIC_RATE
    voiced = sum(np.sin(2 * np.pi * 120 * k * t) / k for k in range(1, 8))
    syllables = np.clip(np.sin(2 * np.pi * 3 * t), 0, None)
    pcm = 0.25 * voiced * syllables + 0.01 * rng.standard_normal(t.size)
    return write_wav(path, pcm, MIC_RATE)


@pytest.fixture(scope="module")
def mic_context(tmp_path_factory: pytest.TempPathFactory):
    """Chromium whose microphone is the WAV above, granted without a prompt."""
    folder = tmp_path_factory.mktemp("chromium-duplex")
    wav = write_microphone_wav(folder / "mic.wav")
    profile = folder / "profile"
    fake_mic = (
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
    )
    with sync_api.sync_playwright() as pw:
        context = launch(pw, str(profile), fake_mic)
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(folder, ignore_errors=True)


def test_microphone_conversation_with_moshi(moshi_server, moshi_engine, mic_context) -> None:
    duplex = moshi_engine.core
    ended_before = set(duplex.recent_stats)
    page = mic_context.new_page()
    problems = PageProblems(page)
    page.goto(moshi_server.http + "/?temperature=0")
    page.wait_for_function("window.voxgateStats && window.voxgateStats.ready", timeout=10_000)
    page.wait_for_selector("#conn-state[data-state=open]", timeout=10_000)
    # The page serves whatever model the server runs; session.started names it and, by stating
    # an input format, enables the microphone.
    assert "tiny-moshi" in page.inner_text("#conn-state")
    assert page.is_enabled("#mic"), page.inner_text("#mic-note")
    assert "Opus" in page.inner_text("#mic-note")
    # Moshi takes no text: Speak is off, and the page says why.
    assert page.is_disabled("#speak")
    assert "microphone only" in page.inner_text("#speak-note")

    page.click("#mic")
    page.wait_for_selector("#mic[aria-pressed=true]", timeout=10_000)
    # Moshi answers while the user talks: audio frames arrive and play, text is shown.
    page.wait_for_function(
        f"""() => {{ const s = window.voxgateStats;
                    return s.framesReceived >= {FRAMES_BEFORE_STOP} && s.samplesPlayed > 0 }}""",
        timeout=WAIT_MS,
    )
    page.wait_for_selector("#transcript:not([hidden])", timeout=WAIT_MS)
    page.wait_for_function("document.getElementById('mic-level').value > 0", timeout=10_000)
    assert page.inner_text("#listen-state") == "Conversing"  # one conversation, no turns

    page.click("#mic")  # stop: the end of the conversation
    page.wait_for_selector("#mic[aria-pressed=false]", timeout=10_000)
    page.wait_for_function(
        "() => { const s = window.voxgateStats; return s.responses.length > 0 && s.drained }",
        timeout=WAIT_MS,
    )
    stats = page.evaluate("window.voxgateStats")

    # The conversation ended cleanly, and the page is still connected and usable.
    assert stats["errors"] == [], stats["errors"]
    assert stats["serverErrors"] == [], stats["serverErrors"]
    assert problems.items == [], problems.items
    assert stats["closes"] == [], f"the socket closed: {stats['closes']}"
    assert page.inner_text("#notices").strip() == ""
    assert page.get_attribute("#conn-state", "data-state") == "open"
    done = stats["responses"][0]
    assert len(stats["responses"]) == 1
    assert done["status"] == "completed", done

    # Every frame the server sent was received, decoded and played.
    assert stats["outputFormat"] == "opus"
    assert stats["framesReceived"] * 20 == done["audio_ms"], (stats["framesReceived"], done)
    assert stats["framesDecoded"] == stats["framesReceived"]
    assert abs(stats["samplesPlayed"] / 48 - done["audio_ms"]) <= 20, (stats, done)
    assert page.inner_text("#stat-received") == str(stats["framesReceived"])
    assert stats["ttfaMs"] is not None and stats["ttfaMs"] > 0  # from the microphone's start
    assert page.inner_text("#transcript").strip() != ""

    # Server side: the microphone's Opus reached the model — the session stepped on real input
    # frames, not only on silence padded in for input that never came.
    new = [s for sid, s in duplex.recent_stats.items() if sid not in ended_before]
    assert len(new) == 1, new
    session = new[0]
    assert session.frames_out > 0
    assert session.frames_out - session.input_late > 0, session
    # The wire carries exactly the engine's frames (the resampler's tail: one more packet).
    assert 0 <= done["audio_ms"] - session.frames_out * MOSHI_FRAME_MS <= 20, (session, done)
    page.close()


def test_stop_ends_the_conversation_and_the_microphone(moshi_server, moshi_engine, mic_context):
    # Stop is barge-in: Moshi falls silent at once. In full duplex the microphone is the
    # conversation, so it stops too; left running, it used to open a new conversation at once.
    page = mic_context.new_page()
    problems = PageProblems(page)
    page.goto(moshi_server.http + "/?temperature=0")
    page.wait_for_selector("#conn-state[data-state=open]", timeout=10_000)
    page.click("#mic")
    page.wait_for_function("window.voxgateStats.framesReceived > 0", timeout=WAIT_MS)
    page.click("#stop")
    page.wait_for_function("window.voxgateStats.responses.length > 0", timeout=WAIT_MS)
    assert page.get_attribute("#mic", "aria-pressed") == "false"
    # Give a microphone left running time to show itself: its packets flow every 20 ms.
    page.wait_for_timeout(2_000)
    stats = page.evaluate("window.voxgateStats")
    assert [r["status"] for r in stats["responses"]] == ["cancelled"]
    assert page.inner_text("#log").count("response.started") == 1
    assert stats["bufferedMs"] < 50  # the jitter buffer was flushed
    assert not moshi_engine.core.sessions, "no conversation is left in the engine"
    assert stats["errors"] == [] and stats["serverErrors"] == [] and problems.items == []
    assert page.is_enabled("#mic")
    page.close()


def test_microphone_without_webcodecs_sends_pcm16(moshi_server, moshi_engine, mic_context) -> None:
    # A browser without WebCodecs: the page asks for PCM16 in (16 kHz, reconnecting with that
    # input_audio) and out (48 kHz), and the conversation works the same.
    duplex = moshi_engine.core
    ended_before = set(duplex.recent_stats)
    page = mic_context.new_page()
    problems = PageProblems(page)
    page.add_init_script("delete window.AudioDecoder; delete window.AudioEncoder;")
    page.goto(moshi_server.http + "/?temperature=0")
    page.wait_for_selector("#conn-state[data-state=open]", timeout=10_000)
    assert "PCM16 16 kHz" in page.inner_text("#mic-note")
    page.click("#mic")
    page.wait_for_function(
        f"window.voxgateStats.framesReceived >= {FRAMES_BEFORE_STOP}", timeout=WAIT_MS
    )
    page.click("#mic")
    page.wait_for_function(
        "() => { const s = window.voxgateStats; return s.responses.length > 0 && s.drained }",
        timeout=WAIT_MS,
    )
    stats = page.evaluate("window.voxgateStats")
    assert stats["errors"] == [] and stats["serverErrors"] == [] and problems.items == []
    # The one close is the page's own: the session that did not declare PCM16 input.
    assert [c["code"] for c in stats["closes"]] == [1000]
    assert stats["outputFormat"] == "pcm16"
    done = stats["responses"][0]
    assert done["status"] == "completed"
    assert stats["framesReceived"] * 20 == done["audio_ms"]
    assert abs(stats["samplesPlayed"] / 48 - done["audio_ms"]) <= 20, (stats, done)
    new = [s for sid, s in duplex.recent_stats.items() if sid not in ended_before]
    assert len(new) == 1 and new[0].frames_out - new[0].input_late > 0, new
    page.close()
