// The session settings the user (or the page's URL) chooses, turned into a session.start.
// URL query parameters prefill them, so a test or a shared link can say e.g.
// ?max_tokens=80&seed=1&format=pcm16&speed=1.5 ; min_tokens, top_p, top_k and repetition_penalty
// exist only as query parameters, as does input_transcription (1, or a language code such as
// en): transcripts of spoken turns, which only a server started with
// --input-transcription-model makes.

import * as P from "./protocol.js";
import { $ } from "./ui.js";

const DEFAULT_PREBUFFER_MS = 80;

export class Settings {
  constructor(params) {
    this.params = params;
    this.voiceSelect = $("voice-select");
    this.voiceText = $("voice-text");
    this.format = $("format");
    this.speed = $("speed");
    this.speedValue = $("speed-value");
    this.apiKey = $("api-key");
    this.maxTokens = $("max-tokens");
    this.temperature = $("temperature");
    this.seed = $("seed");
    this.prebuffer = $("prebuffer");
    this.turn = $("turn");
    this.prefill();
  }

  prefill() {
    const fields = { max_tokens: this.maxTokens, temperature: this.temperature, seed: this.seed,
      prebuffer_ms: this.prebuffer, turn: this.turn, text: $("text"), voice: this.voiceText,
      speed: this.speed };
    for (const [name, field] of Object.entries(fields)) {
      if (this.params.has(name)) field.value = this.params.get(name);
    }
    this.showSpeed();
    this.speed.addEventListener("input", () => this.showSpeed());
    if (this.params.get("format") === P.FORMAT.PCM16) this.format.value = P.FORMAT.PCM16;
  }

  /** Calls `fn` when a setting that belongs in session.start changes. */
  onSessionChange(fn) {
    for (const field of [this.voiceSelect, this.voiceText, this.format, this.speed, this.apiKey,
      this.maxTokens, this.temperature, this.seed, this.turn]) {
      field.addEventListener("change", fn);
    }
  }

  /** Opus unavailable: play PCM16 and say so in the format menu. */
  forcePcm() {
    this.format.value = P.FORMAT.PCM16;
    this.format.querySelector(`option[value="${P.FORMAT.OPUS}"]`).disabled = true;
  }

  /** The speed slider's value as the label shows it (the slider keeps it within 0.25-4). */
  showSpeed() {
    this.speedValue.value = `${Number(this.speed.value)}×`;
  }

  /** Full-duplex models play in real time and take only speed 1: the slider is off for them. */
  allowSpeed(allowed) {
    this.speed.disabled = !allowed;
    this.speed.title = allowed
      ? "Playback speed, pitch unchanged (session.start's speed)"
      : "This model converses in real time: its speed is fixed";
  }

  /** session.start's speed: left out at 1 (the server's default, and all a full-duplex
   * model takes). */
  speedValueForSession() {
    const speed = Number(this.speed.value);
    return this.speed.disabled || speed === 1 ? undefined : speed;
  }

  prebufferMs() {
    return num(this.prebuffer) ?? DEFAULT_PREBUFFER_MS;
  }

  voice() {
    return (this.voiceSelect.hidden ? this.voiceText.value : this.voiceSelect.value).trim();
  }

  get pushToTalk() {
    return this.turn.value === P.TURN.NONE;
  }

  /** session.start's input_transcription where the server transcribes: the language detected,
   * or the one the URL names (?input_transcription=en); undefined (none asked) for
   * ?input_transcription=0. */
  inputTranscription() {
    const asked = (this.params.get("input_transcription") || "").trim().toLowerCase();
    if (asked === "0" || asked === "off") return undefined;
    return /^[a-z]{2}$/.test(asked) ? { language: asked } : {};
  }

  /** The arguments of P.sessionStart. `inputAudio`: declared only once the mic is wanted;
   * `transcripts`: ask for the spoken turns' words (inputTranscription). */
  sessionConfig(inputAudio, transcripts = false) {
    const q = (name) => (this.params.has(name) ? Number(this.params.get(name)) : undefined);
    const output = this.format.value === P.FORMAT.PCM16
      ? P.audioFormat(P.FORMAT.PCM16, 48000) // the AudioContext's rate: no resampling
      : P.audioFormat(P.FORMAT.OPUS, P.OPUS_RATE);
    return {
      model: this.params.get("model") || undefined,
      voice: this.voice() || undefined,
      outputAudio: output,
      inputAudio,
      sampling: {
        max_tokens: num(this.maxTokens), temperature: num(this.temperature), seed: num(this.seed),
        min_tokens: q("min_tokens"), top_p: q("top_p"), top_k: q("top_k"),
        repetition_penalty: q("repetition_penalty"),
      },
      turnDetection: this.turn.value ? { type: this.turn.value } : undefined,
      speed: this.speedValueForSession(),
      inputTranscription: transcripts ? this.inputTranscription() : undefined,
    };
  }

  /** Turn the free-text voice field into a menu once the server names the voices: names, or
   * {name, label} (GET /v1/voices). `wanted`: the voice to select (else the current one). */
  fillVoices(voices, defaultVoice, wanted) {
    if (voices.length === 0) return;
    const entries = voices.map((v) => (typeof v === "string" ? { name: v, label: v } : v));
    const names = entries.map((v) => v.name);
    const current = this.voice();
    const choose = wanted || (names.includes(current) ? current : defaultVoice);
    this.voiceSelect.replaceChildren(
      ...entries.map((v) => new Option(v.label, v.name, false, v.name === choose)),
    );
    this.voiceSelect.hidden = false;
    this.voiceText.hidden = true;
    $("voice-label").htmlFor = "voice-select";
  }
}

function num(field) {
  return field.value.trim() === "" ? undefined : Number(field.value);
}
