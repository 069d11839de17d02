// The Voxgate native WebSocket protocol, version 1 (docs/protocol.md), as data.
// Every event name, close code and message shape the page speaks lives here, so the rest of
// the page never spells a wire string itself.

export const SUBPROTOCOL = "voxgate.v1";
export const BEARER_PREFIX = "bearer.";
export const STREAM_PATH = "v1/stream"; // relative: the page is served by the gateway itself

// Client → server event types.
export const C = Object.freeze({
  SESSION_START: "session.start",
  TEXT: "text",
  RESPONSE_CANCEL: "response.cancel",
  PLAYBACK: "playback",
  INPUT_COMMIT: "input.commit",
  SESSION_END: "session.end",
});

// Server → client event types.
export const S = Object.freeze({
  SESSION_STARTED: "session.started",
  RESPONSE_STARTED: "response.started",
  TRANSCRIPT_DELTA: "transcript.delta",
  SPEECH_STARTED: "input.speech_started",
  SPEECH_STOPPED: "input.speech_stopped",
  RESPONSE_DONE: "response.done",
  ERROR: "error",
  SESSION_ENDED: "session.ended",
});

export const FORMAT = Object.freeze({ OPUS: "opus", PCM16: "pcm16", MULAW: "mulaw" });
export const TURN = Object.freeze({ VAD: "vad", NONE: "none" });
export const OPUS_RATE = 48000;
export const DEFAULT_FRAME_MS = 20;

export const CLOSE_CODES = Object.freeze({
  1000: "normal closure",
  1001: "going away",
  1003: "unsupported data",
  1005: "no status code",
  1006: "closed abnormally (no close frame: server unreachable, or the handshake was refused, e.g. a missing or wrong API key, or a disallowed origin)",
  1007: "invalid payload",
  1008: "policy violation (auth, origin or protocol misuse)",
  1009: "message too big",
  1011: "internal server error",
  1013: "try again later (the server has no capacity)",
});

export function describeClose(code) {
  return CLOSE_CODES[code] || "unknown close code";
}

/** The ws:// or wss:// URL of the stream endpoint, relative to the page (or an override). */
export function streamUrl(base, override) {
  const url = new URL(override || STREAM_PATH, base);
  if (url.protocol === "http:") url.protocol = "ws:";
  else if (url.protocol === "https:") url.protocol = "wss:";
  return url.toString();
}

/** Subprotocols to offer: always voxgate.v1, plus bearer.<key> when the user gave a key. */
export function subprotocols(apiKey) {
  const key = (apiKey || "").trim();
  return key ? [SUBPROTOCOL, BEARER_PREFIX + key] : [SUBPROTOCOL];
}

export function audioFormat(format, sampleRate, frameMs = DEFAULT_FRAME_MS) {
  return { format, sample_rate: sampleRate, frame_ms: frameMs };
}

// --- message builders (client → server). Each returns the JSON text to send. ---------------

function drop(obj) {
  // Optional fields are omitted rather than sent as null: the server's defaults then apply.
  const out = {};
  for (const [k, v] of Object.entries(obj)) {
    if (v === undefined || v === null || v === "") continue;
    if (typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 0) continue;
    out[k] = v;
  }
  return out;
}

export function sessionStart({ model, voice, inputAudio, outputAudio, sampling, turnDetection } = {}) {
  return JSON.stringify({
    type: C.SESSION_START,
    ...drop({
      model,
      voice,
      input_audio: inputAudio,
      output_audio: outputAudio,
      sampling: sampling ? drop(sampling) : undefined,
      turn_detection: turnDetection,
    }),
  });
}

export const text = (value, final = true) => JSON.stringify({ type: C.TEXT, text: value, final });
export const responseCancel = () => JSON.stringify({ type: C.RESPONSE_CANCEL });
export const playback = (playedMs) =>
  JSON.stringify({ type: C.PLAYBACK, played_ms: Math.round(playedMs) });
export const inputCommit = () => JSON.stringify({ type: C.INPUT_COMMIT });
export const sessionEnd = () => JSON.stringify({ type: C.SESSION_END });

// --- server → client --------------------------------------------------------------------------

/** Parse a text frame. Returns the event object, or throws with a readable message. */
export function parseEvent(data) {
  const event = JSON.parse(data);
  if (!event || typeof event !== "object" || typeof event.type !== "string") {
    throw new Error("server event without a type: " + String(data).slice(0, 120));
  }
  return event;
}

export const KIND = Object.freeze({ TTS: "tts", TURNS: "turns", FULL_DUPLEX: "full_duplex" });

/** What session.started says about the model, tolerant of a name string or a facts object. */
export function modelInfo(started) {
  const model = started.model;
  const facts = model && typeof model === "object" ? model : {};
  const name = typeof model === "string" ? model : facts.name || facts.id || "";
  const voices = started.voices || facts.voices || [];
  const defaultVoice = started.default_voice || facts.default_voice || "";
  // `model_kind` says how to converse: text (tts), spoken or typed turns, or full duplex.
  let kind = Object.values(KIND).includes(started.model_kind) ? started.model_kind : null;
  if (!kind) {
    // An older server: it serves audio input to full-duplex models only, so an input format
    // means duplex.
    const duplex = [facts.full_duplex, started.full_duplex].find((v) => typeof v === "boolean");
    kind = (duplex !== undefined ? duplex : Boolean(started.input_audio)) ? KIND.FULL_DUPLEX : KIND.TTS;
  }
  const acceptsAudio = kind !== KIND.TTS && Boolean(started.input_audio);
  return {
    name,
    voices: Array.isArray(voices) ? voices : [],
    defaultVoice,
    kind,
    acceptsAudio,
    fullDuplex: kind === KIND.FULL_DUPLEX,
    turns: kind === KIND.TURNS, // spoken turns ended by the server's VAD (or input.commit)
    acceptsText: kind !== KIND.FULL_DUPLEX,
  };
}

// What a user can do about each error code (docs/protocol.md), shown after the server's message.
const ERROR_HINTS = Object.freeze({
  unsupported_input: "This model does not take that kind of input.",
  unsupported_audio: "The server could not decode the microphone's audio.",
  overloaded: "The server is busy: try again in a moment.",
  rate_limited: "Too many turns are waiting: wait for the reply to finish.",
  too_large: "Send a shorter text.",
  model_error: "The model failed on this turn; the session is still usable.",
  internal: "The server hit an internal error.",
});

/** A readable one-line description of a server `error` event. */
export function describeError(ev) {
  const hint = ERROR_HINTS[ev.code];
  const base = `Server error (${ev.code || "unknown"}): ${ev.message || "no message"}`;
  const tail = ev.fatal ? " The session has ended." : "";
  return hint ? `${base} — ${hint}${tail}` : base + tail;
}
