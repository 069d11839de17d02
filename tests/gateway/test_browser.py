"""The web demo, end to end in headless Chromium: a real uvicorn server with the real app and the
tiny-orpheus engine, the page loaded from `/`, text typed, Speak clicked, and the page's own
counters (`window.voxgateStats`) read back: frames received, decoded and played, no JavaScript
errors. Runs on CPU; skipped when Debian's Chromium or playwright is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from browser_testkit import PageProblems, chromium_missing, launch

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

# The random-weight model never emits its stop token: a small max_tokens ends each response
# (96 tokens: about 1 s of audio) and greedy sampling keeps the run repeatable.
PAGE_QUERY = "?max_tokens=96&temperature=0"
SPEAK_TIMEOUT_MS = 30_000

if chromium_missing():
    pytest.skip(chromium_missing(), allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")


@pytest.fixture(scope="module")
def server_url(server) -> str:
    """The page's address on the shared test gateway (tests/gateway/conftest.py): real uvicorn,
    real app, the tiny-orpheus engine."""
    return server.http + "/"


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory):
    """Chromium with a fresh profile."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as pw:
        context = launch(pw, str(profile))
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(profile, ignore_errors=True)


def open_demo(context, url: str, init_script: str | None = None):
    page = context.new_page()
    problems = PageProblems(page)
    if init_script:
        page.add_init_script(init_script)
    page.goto(url)
    page.wait_for_function("window.voxgateStats && window.voxgateStats.ready", timeout=10_000)
    # The page connects by itself; session.started turns the pill "open".
    page.wait_for_selector("#conn-state[data-state=open]", timeout=10_000)
    return page, problems


def speak_and_wait(page, text: str) -> dict:
    page.fill("#text", text)
    page.click("#speak")
    # Done, and everything that arrived has played out of the jitter buffer.
    page.wait_for_function(
        """() => { const s = window.voxgateStats;
                   return s.responses.length > 0 && s.samplesPlayed > 0 && s.drained }""",
        timeout=SPEAK_TIMEOUT_MS,
    )
    return page.evaluate("window.voxgateStats")


def assert_played(stats: dict, problems: PageProblems, output_format: str) -> None:
    assert stats["errors"] == [], stats["errors"]
    assert problems.items == [], problems.items
    assert stats["serverErrors"] == [], stats["serverErrors"]
    assert stats["closes"] == [], f"the socket closed: {stats['closes']}"
    assert stats["outputFormat"] == output_format
    done = stats["responses"][0]
    assert done["status"] in ("completed", "length"), done
    assert stats["framesReceived"] > 0
    # Every received frame was decoded (Opus: one AudioData per packet; PCM: one chunk each).
    assert stats["framesDecoded"] == stats["framesReceived"]
    assert stats["samplesPlayed"] > 0
    # Played audio matches what the server says it sent, to within one frame of rounding.
    played_ms = stats["samplesPlayed"] / 48
    assert abs(played_ms - done["audio_ms"]) <= 20, (played_ms, done)
    assert stats["ttfaMs"] is not None and stats["ttfaMs"] > 0


def test_demo_speaks_opus(server_url: str, browser_context, tmp_path: Path) -> None:
    page, problems = open_demo(browser_context, server_url + PAGE_QUERY)
    has_webcodecs = page.evaluate("typeof AudioDecoder === 'function'")
    assert has_webcodecs, "Chromium on http://127.0.0.1 should offer WebCodecs AudioDecoder"
    # The tiny model takes text only: the microphone is shown, disabled, with a note.
    assert page.is_disabled("#mic")
    assert "text only" in page.inner_text("#mic-note")
    assert not page.is_visible("#listen-state")  # no spoken conversation with a TTS model
    assert page.inner_text("#speak") == "Speak"

    stats = speak_and_wait(page, "Hello from the browser test.")
    assert_played(stats, problems, "opus")
    assert page.inner_text("#stat-played") == str(stats["framesPlayed"])

    shot = Path(os.environ.get("VOXGATE_BROWSER_SCREENSHOT", tmp_path / "web_demo.png"))
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    page.close()


def test_demo_pcm_fallback_without_webcodecs(server_url: str, browser_context) -> None:
    # A browser without WebCodecs: the page asks for pcm16 at 48 kHz and plays it directly.
    no_webcodecs = (
        "delete window.AudioDecoder; delete window.AudioEncoder; delete window.AudioData;"
    )
    page, problems = open_demo(browser_context, server_url + PAGE_QUERY, no_webcodecs)
    assert page.input_value("#format") == "pcm16"
    assert "PCM16" in page.inner_text("#notices")

    stats = speak_and_wait(page, "No codecs here.")
    assert_played(stats, problems, "pcm16")
    page.close()


def test_demo_speed_slider_sets_the_sessions_speed(server_url: str, browser_context) -> None:
    """The Speed slider: moved to 2, the next Speak opens a session with `speed` 2 (echoed in
    session.started) and the same greedy reply plays in half the time."""
    page, problems = open_demo(browser_context, server_url + PAGE_QUERY)
    assert page.input_value("#speed") == "1" and page.inner_text("#speed-value") == "1×"
    first = speak_and_wait(page, "The same words twice.")
    assert_played(first, problems, "opus")
    assert first["speed"] is None  # speed 1 is not sent: the server's default
    page.eval_on_selector(
        "#speed",
        """el => { el.value = "2"; el.dispatchEvent(new Event("input"));
                  el.dispatchEvent(new Event("change")); }""",
    )
    assert page.inner_text("#speed-value") == "2×"
    page.fill("#text", "The same words twice.")
    page.click("#speak")
    page.wait_for_function(
        "() => { const s = window.voxgateStats; return s.responses.length > 1 && s.drained }",
        timeout=SPEAK_TIMEOUT_MS,
    )
    second = page.evaluate("window.voxgateStats")
    assert second["speed"] == 2
    assert second["errors"] == [] and second["serverErrors"] == [] and problems.items == []
    normal_ms, fast_ms = (r["audio_ms"] for r in second["responses"][:2])
    assert abs(fast_ms - normal_ms / 2) <= 40, (normal_ms, fast_ms)
    played_ms = second["samplesPlayed"] / 48  # both replies, as played
    assert abs(played_ms - (normal_ms + fast_ms)) <= 40, (played_ms, normal_ms, fast_ms)
    page.close()


def test_demo_stop_cancels(server_url: str, browser_context) -> None:
    # Long enough not to end by itself before Stop is pressed.
    page, problems = open_demo(browser_context, server_url + "?max_tokens=2000&temperature=0")
    page.fill("#text", "This response is interrupted.")
    page.click("#speak")
    page.wait_for_function("window.voxgateStats.framesReceived > 0", timeout=SPEAK_TIMEOUT_MS)
    page.click("#stop")
    page.wait_for_function("window.voxgateStats.responses.length > 0", timeout=10_000)
    stats = page.evaluate("window.voxgateStats")
    assert stats["responses"][0]["status"] == "cancelled"
    # The jitter buffer was flushed at once. Its level reaches the page in the audio thread's
    # next report (every ~21 ms; later on a loaded machine), so wait a little for it: far less
    # than playing out what was buffered would take (a CI run once read a stale 271 ms).
    page.wait_for_function("window.voxgateStats.bufferedMs < 50", timeout=150)
    assert stats["errors"] == [] and problems.items == []
    page.wait_for_selector("#speak:not([disabled])", timeout=2_000)
    page.close()


def test_demo_api_key_subprotocol(make_server, browser_context) -> None:
    # Browsers cannot set headers: the key rides in the offered subprotocol bearer.<key>.
    srv = make_server(api_keys=("demo-key-1",))
    page = browser_context.new_page()
    problems = PageProblems(page)
    page.goto(srv.http + "/?autoconnect=0")
    page.wait_for_function("window.voxgateStats && window.voxgateStats.ready", timeout=10_000)
    page.click("#advanced > summary")

    page.fill("#api-key", "wrong-key")
    page.click("#connect")
    page.wait_for_selector("#conn-state[data-state=closed]", timeout=10_000)
    # A refused handshake reaches a page only as 1006; the notice says what to check.
    assert "1006" in page.inner_text("#notices") and "API key" in page.inner_text("#notices")

    page.fill("#api-key", "demo-key-1")
    page.click("#connect")
    page.wait_for_selector("#conn-state[data-state=open]", timeout=10_000)
    stats = page.evaluate("window.voxgateStats")
    assert [c["code"] for c in stats["closes"]] == [1006]
    assert stats["errors"] == []
    # Chromium logs the refused handshake itself; nothing else may be wrong.
    assert all("WebSocket connection" in p for p in problems.items), problems.items
    page.close()


@pytest.fixture(scope="module")
def default_voice_server():
    """What `make demo` serves: the default model (the shipped voxgate-tiny voice), with the
    serving defaults `voxgate serve` gives it on a CPU (its own engine process included)."""
    import asyncio
    import threading

    from gateway_testkit import start_server

    from engine.factory import build_engine
    from gateway.config import GatewaySettings
    from models.registry import DEFAULT_MODEL
    from models.voxgate_tiny.loading import SHIPPED_WEIGHTS

    if not (SHIPPED_WEIGHTS / "config.json").exists():
        pytest.skip("voxgate-tiny weights not shipped (training/README.md)")
    engine = build_engine(DEFAULT_MODEL)
    server = start_server(GatewaySettings(), engine)
    try:
        yield server
    finally:
        server.stop()
        # On a thread of its own: pytest-asyncio may have an event loop running on this one
        # when a module-scoped fixture is torn down, and asyncio.run refuses to nest.
        closer = threading.Thread(target=asyncio.run, args=(engine.shutdown(),))
        closer.start()
        closer.join(timeout=60)


def test_demo_speaks_with_the_default_voice(default_voice_server, browser_context) -> None:
    page, problems = open_demo(browser_context, default_voice_server.http + "/")
    stats = speak_and_wait(page, "Please call me back when you get home tonight.")
    assert_played(stats, problems, "opus")
    done = stats["responses"][0]
    # A trained voice ends the sentence itself (random weights run to max_tokens: "length"),
    # after about as long as the teacher takes to say it (~2.6 s).
    assert done["status"] == "completed", done
    assert 1500 <= done["audio_ms"] <= 5000, done
    page.close()


@pytest.fixture(scope="module")
def chatterbox_server(tmp_path_factory):
    """`voxgate serve --model tiny-chatterbox`: T3 with CFG, S3Gen streamed; real-time
    admission off, as in the gateway's other engines (conftest.py): its calibration bursts
    took ~7 s of the engine's start."""
    import asyncio
    import threading

    from gateway_testkit import start_server

    from engine.config import EngineConfig
    from engine.factory import build_engine
    from gateway.config import GatewaySettings

    mp = pytest.MonkeyPatch()
    mp.setenv("VOXGATE_CACHE", str(tmp_path_factory.mktemp("cache")))
    engine = build_engine(
        "tiny-chatterbox", config=EngineConfig(kv_cache_mb=64, realtime_admission=False)
    )
    server = start_server(GatewaySettings(model="tiny-chatterbox"), engine)
    try:
        yield server
    finally:
        server.stop()
        closer = threading.Thread(target=asyncio.run, args=(engine.shutdown(),))
        closer.start()
        closer.join(timeout=60)
        mp.undo()


@pytest.mark.timeout(300)  # the engine's start-up included
def test_demo_speaks_with_tiny_chatterbox(chatterbox_server, browser_context) -> None:
    # 60 tokens: the first streamed chunk after 23, the rest at the end (2.4 s of audio).
    page, problems = open_demo(
        browser_context, chatterbox_server.http + "/?max_tokens=60&min_tokens=60&temperature=0"
    )
    stats = speak_and_wait(page, "Hello from Chatterbox in the browser.")
    assert_played(stats, problems, "opus")
    assert stats["responses"][0]["audio_ms"] > 1000
    page.close()
