"""The web demo's voice picker and "Add my voice", end to end in headless Chromium: a real
uvicorn server with tiny-csm (a model that clones; conftest.py `csm_voices`), Chromium's fake
microphone playing a WAV made here. The picker fills from GET /v1/voices; the button records the microphone with
MediaRecorder (WebM Opus) and uploads it; the server makes the voice, the picker selects it,
and the next response is spoken in it. Skipped when Debian's Chromium or playwright is missing."""

from __future__ import annotations

import shutil

import httpx
import numpy as np
import pytest
from browser_testkit import PageProblems, chromium_missing, launch
from clip_files import VOICES_KEYS
from gateway_testkit import write_wav

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

if chromium_missing():
    pytest.skip(chromium_missing(), allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")

MIC_RATE = 48000
PAGE_QUERY = "?autoconnect=0&max_tokens=4&temperature=0&record_s=3"  # 3 s: over CSM's 2 s
KEY = VOICES_KEYS[2]  # the voices server's key for this test (conftest.py `csm_voices`)


@pytest.fixture(scope="module")
def mic_context(tmp_path_factory: pytest.TempPathFactory):
    """Chromium whose microphone plays a voiced buzz in syllables, granted without a prompt."""
    folder = tmp_path_factory.mktemp("chromium-voices")
    t = np.arange(4 * MIC_RATE) / MIC_RATE
    voiced = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 8))
    wav = write_wav(
        folder / "mic.wav", 0.25 * voiced * np.clip(np.sin(6 * np.pi * t), 0, None), MIC_RATE
    )
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


def test_picker_lists_voices_and_add_my_voice_records_one(csm_voices, mic_context) -> None:
    server = csm_voices.server
    page = mic_context.new_page()
    problems = PageProblems(page)
    page.goto(server.http + "/" + PAGE_QUERY)
    page.wait_for_function("window.voxgateStats && window.voxgateStats.ready", timeout=10_000)
    page.click("#advanced > summary")
    page.fill("#api-key", KEY)  # the voices are listed once a session shows the key is good
    page.click("#connect")
    page.wait_for_function("window.voxgateStats.voices.length > 0", timeout=20_000)
    # The picker holds the model's voices (CSM's speaker ids), the default selected.
    assert page.is_visible("#voice-select") and not page.is_visible("#voice-text")
    options = page.eval_on_selector_all("#voice-select option", "os => os.map(o => o.value)")
    assert options == ["0", "1", "narrator"]
    assert page.input_value("#voice-select") == "0"
    assert page.is_visible("#add-voice")  # tiny-csm clones

    page.click("#add-voice")
    page.wait_for_selector("#voice-note:not([hidden])", timeout=10_000)  # recording
    assert "read aloud" in page.inner_text("#voice-note")
    assert page.inner_text("#add-voice") == "Stop recording"
    page.wait_for_function("window.voxgateStats.voices.length === 4", timeout=30_000)
    stats = page.evaluate("window.voxgateStats")
    headers = {"Authorization": f"Bearer {KEY}"}
    added = httpx.get(f"{server.http}/v1/voices", headers=headers, timeout=10).json()["voices"][-1]
    assert added["source"] == "client" and added["label"] == "my voice"
    assert 2.0 <= added["seconds"] <= 3.5
    assert stats["voices"] == ["0", "1", "narrator", added["name"]]
    assert page.input_value("#voice-select") == added["name"]  # selected for the next Speak
    assert stats["voiceErrors"] == []

    page.fill("#text", "Now in my own voice.")
    page.click("#speak")
    page.wait_for_function("window.voxgateStats.responses.length > 0", timeout=60_000)
    stats = page.evaluate("window.voxgateStats")
    assert stats["serverErrors"] == [] and stats["errors"] == [], stats
    assert stats["responses"][0]["status"] == "length" and stats["framesReceived"] > 0
    # The session that spoke was started with the new voice.
    starts = [
        line
        for line in page.eval_on_selector_all("#log li", "ls => ls.map(l => l.textContent)")
        if '"session.start"' in line
    ]
    assert added["name"] in starts[-1], starts
    assert problems.items == [], problems.items
    page.close()
