// The voice picker and "Add my voice": the voices come from GET /v1/voices (the model's and the
// ones this API key added), asked once a session has started (so the key is known to be good);
// with a model that clones, the button records a few seconds of the
// user reading a sentence (MediaRecorder) and uploads the clip with that sentence as its
// transcript (POST /v1/voices, docs/gateway.md "Voices"), then selects the new voice.
// window.voxgateStats.voices mirrors what the picker holds, for the browser test.

import { $, log, notice } from "./ui.js";

export const READ_ALOUD = "The quick brown fox jumps over the lazy dog, and then it rests in the sun.";
const DEFAULT_RECORD_S = 6;

/** The HTTP base of the server the page talks to (the `ws` override's host, else the page's). */
function httpBase(wsOverride) {
  const url = new URL(wsOverride || "/", location.href);
  if (url.protocol === "ws:") url.protocol = "http:";
  else if (url.protocol === "wss:") url.protocol = "https:";
  return url.origin;
}

export class Voices {
  /** `settings`: the page's Settings; `stats`: window.voxgateStats. */
  constructor(settings, params, stats) {
    this.settings = settings;
    this.stats = stats;
    this.base = httpBase(params.get("ws"));
    this.recordSeconds = Number(params.get("record_s")) || DEFAULT_RECORD_S;
    this.button = $("add-voice");
    this.note = $("voice-note");
    this.recorder = null;
    this.button.addEventListener("click", () => (this.recorder ? this.recorder.stop() : this.record()));
  }

  headers(json = false) {
    const key = this.settings.apiKey.value.trim();
    return { ...(key ? { Authorization: `Bearer ${key}` } : {}), ...(json ? { "Content-Type": "application/json" } : {}) };
  }

  /** Fill the picker from GET /v1/voices; `select`: the voice to choose. */
  async load(select) {
    let body;
    try {
      const response = await fetch(`${this.base}/v1/voices`, { headers: this.headers() });
      if (!response.ok) return; // e.g. a key is needed: the free-text field stays
      body = await response.json();
    } catch (err) {
      log("note", `voices not listed: ${err.message}`);
      return;
    }
    const voices = body.voices.map((v) => ({
      name: v.name,
      label: v.source === "client" ? `${v.label} (your voice)` : v.name,
    }));
    this.stats.voices = voices.map((v) => v.name);
    this.settings.fillVoices(voices, body.default_voice || "", select);
    this.button.hidden = !body.cloning || !(window.MediaRecorder && navigator.mediaDevices);
  }

  async record() {
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (err) {
      notice(`The microphone is not available: ${err.message}`, "error", "voice");
      return;
    }
    const chunks = [];
    const recorder = new MediaRecorder(stream);
    this.recorder = recorder;
    recorder.ondataavailable = (e) => e.data.size && chunks.push(e.data);
    const timer = setTimeout(() => recorder.state === "recording" && recorder.stop(), this.recordSeconds * 1000);
    recorder.onstop = () => {
      clearTimeout(timer);
      stream.getTracks().forEach((t) => t.stop());
      this.recorder = null;
      this.button.textContent = "Add my voice";
      this.note.hidden = true;
      this.upload(new Blob(chunks, { type: recorder.mimeType }));
    };
    recorder.start();
    this.button.textContent = "Stop recording";
    this.note.textContent = `Recording (${this.recordSeconds} s): read aloud “${READ_ALOUD}”`;
    this.note.hidden = false;
  }

  async upload(blob) {
    const bytes = new Uint8Array(await blob.arrayBuffer());
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    }
    const body = JSON.stringify({ audio: btoa(binary), transcript: READ_ALOUD, name: "my voice" });
    log("out", `POST /v1/voices (${bytes.length} bytes of ${blob.type || "audio"})`);
    const response = await fetch(`${this.base}/v1/voices`, { method: "POST", headers: this.headers(true), body });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) {
      const error = answer.error || {};
      this.stats.voiceErrors = [...(this.stats.voiceErrors || []), error.code || String(response.status)];
      notice(`Your voice was not added: ${error.message || response.status}`, "error", "voice");
      return;
    }
    log("in", `voice added: ${answer.name}`);
    notice("Your voice was added and selected: the next Speak uses it.", "info", "voice");
    await this.load(answer.name);
    this.settings.voiceSelect.dispatchEvent(new Event("change")); // a new session takes it
  }
}
