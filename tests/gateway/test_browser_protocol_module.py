"""web_demo/protocol.js as a web app uses it: a page of its own imports the module from the
gateway, speaks the protocol with a plain WebSocket (the README's example) and captions the
reply with its word timings, in headless Chromium against the default model (voxgate-tiny)."""

from __future__ import annotations

import shutil

import pytest
from browser_testkit import PageProblems, chromium_missing, launch

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

if chromium_missing():
    pytest.skip(chromium_missing(), allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")

# A web app's own code: nothing of the demo page but the imported module.
SPEAK = """async (text) => {
  const voxgate = await import("/protocol.js");
  const ws = new WebSocket(voxgate.streamUrl(location.href), voxgate.subprotocols(""));
  ws.binaryType = "arraybuffer";
  const got = { frames: 0, bytes: 0, words: [], caption: "", events: [] };
  return await new Promise((resolve, reject) => {
    ws.onopen = () => ws.send(voxgate.sessionStart({
      outputAudio: voxgate.audioFormat(voxgate.FORMAT.PCM16, 24000),
      sampling: { seed: 7 },
    }));
    ws.onmessage = ({ data }) => {
      if (typeof data !== "string") { got.frames += 1; got.bytes += data.byteLength; return; }
      const event = voxgate.parseEvent(data);
      got.events.push(event.type);
      if (event.type === voxgate.S.SESSION_STARTED) {
        got.info = voxgate.modelInfo(event);
        ws.send(voxgate.text(text));
      } else if (event.type === voxgate.S.RESPONSE_WORDS) {
        got.words.push(...event.words);
        got.caption = voxgate.wordsText(got.words);
      } else if (event.type === voxgate.S.RESPONSE_DONE) {
        got.done = event;
        ws.send(voxgate.sessionEnd());
      } else if (event.type === voxgate.S.ERROR) {
        reject(new Error(voxgate.describeError(event)));
      }
    };
    ws.onclose = ({ code }) => { got.close = code; got.closeText = voxgate.describeClose(code); resolve(got); };
  });
}"""


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as pw:
        context = launch(pw, str(profile))
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(profile, ignore_errors=True)


def test_a_web_app_speaks_and_captions_with_the_module(make_tiny_server, browser_context):
    server = make_tiny_server()
    page = browser_context.new_page()
    problems = PageProblems(page)
    missing: list[str] = []
    page.on("response", lambda r: r.status == 404 and missing.append(r.url))
    page.goto(server.http + "/health")  # any page of the gateway's origin: no demo code runs
    got = page.evaluate(SPEAK, "Please call me back when you get home tonight.")
    page.close()
    # The browser asks for a favicon for the JSON page; nothing else may be missing or wrong.
    assert all(url.endswith("/favicon.ico") for url in missing), missing
    assert all("404" in p for p in problems.items), problems.items
    assert got["info"]["name"] == "voxgate-tiny" and got["info"]["wordTimings"] is True
    done = got["done"]
    assert done["status"] == "completed" and got["close"] == 1000
    assert got["bytes"] == done["audio_ms"] * 48  # pcm16 at 24 kHz: 48 bytes a ms
    assert got["caption"] == "please call me back when you get home tonight"
    times = [t for w in got["words"] for t in (w["start_ms"], w["end_ms"])]
    assert times == sorted(times) and times[-1] <= done["audio_ms"]
    # The words came with the audio, before the response ended.
    assert got["events"].index("response.words") < got["events"].index("response.done")
