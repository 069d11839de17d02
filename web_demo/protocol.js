/**
 * The Voxgate native WebSocket protocol, version 1 (docs/protocol.md), as an ES module: event
 * names, codes, message builders and parsers, with no state and no dependency. The demo page
 * speaks the protocol through it, and so can any web app:
 *
 * ```js
 * import * as voxgate from "./protocol.js"; // the gateway serves it at /protocol.js
 *
 * const ws = new WebSocket(voxgate.streamUrl(location.href, "ws://127.0.0.1:8000/v1/stream"),
 *                          voxgate.subprotocols(apiKey));
 * ws.binaryType = "arraybuffer";
 * ws.onopen = () => ws.send(voxgate.sessionStart({ outputAudio: voxgate.audioFormat("pcm16", 24000) }));
 * ws.onmessage = ({ data }) => {
 *   if (typeof data !== "string") return play(data);        // one audio frame
 *   const event = voxgate.parseEvent(data);
 *   if (event.type === voxgate.S.SESSION_STARTED) ws.send(voxgate.text("Hello there."));
 *   if (event.type === voxgate.S.RESPONSE_WORDS) caption(voxgate.wordsText(event.words));
 *   if (event.type === voxgate.S.ERROR) console.warn(voxgate.describeError(event));
 * };
 * ws.onclose = ({ code }) => console.log(code, voxgate.describeClose(code));
 * ```
 *
 * Every wire string lives here, so the rest of a page never spells one itself. The module is
 * plain data and functions: a page builds its own session logic (sockets, audio) on top.
 * @module voxgate/protocol
 */

/** The subprotocol the server selects when it is offered. */
export const SUBPROTOCOL = "voxgate.v1";
/** Browsers cannot set headers on a WebSocket: an API key rides in an offered `bearer.<key>`. */
export const BEARER_PREFIX = "bearer.";
/** The stream endpoint's path, relative to the server's root (see streamUrl). */
export const STREAM_PATH = "v1/stream";

/** Client → server event types. */
export const C = Object.freeze({
  SESSION_START: "session.start",
  TEXT: "text",
  RESPONSE_CANCEL: "response.cancel",
  PLAYBACK: "playback",
  INPUT_COMMIT: "input.commit",
  SESSION_END: "session.end",
});

/** Server → client event types (RESPONSE_WORDS: an optional extension, see modelInfo). */
export const S = Object.freeze({
  SESSION_STARTED: "session.started",
  RESPONSE_STARTED: "response.started",
  TRANSCRIPT_DELTA: "transcript.delta",
  RESPONSE_WORDS: "response.words",
  SPEECH_STARTED: "input.speech_started",
  SPEECH_STOPPED: "input.speech_stopped",
  INPUT_TRANSCRIPT: "input.transcript",
  RESPONSE_DONE: "response.done",
  ERROR: "error",
  SESSION_ENDED: "session.ended",
});

/** `error` event codes. */
export const ERROR = Object.freeze({
  BAD_JSON: "bad_json",
  UNKNOWN_TYPE: "unknown_type",
  BAD_FIELD: "bad_field",
  NOT_STARTED: "not_started",
  ALREADY_STARTED: "already_started",
  UNSUPPORTED_AUDIO: "unsupported_audio",
  UNSUPPORTED_INPUT: "unsupported_input",
  TOO_LARGE: "too_large",
  RATE_LIMITED: "rate_limited",
  OVERLOADED: "overloaded",
  MODEL_ERROR: "model_error",
  INTERNAL: "internal",
});

/** `response.done` statuses. */
export const STATUS = Object.freeze({
  COMPLETED: "completed",
  CANCELLED: "cancelled",
  LENGTH: "length",
  FAILED: "failed",
});

/** Audio formats of `input_audio` / `output_audio`. */
export const FORMAT = Object.freeze({ OPUS: "opus", PCM16: "pcm16", MULAW: "mulaw" });
/** `turn_detection.type` values (turn-based speech-to-speech models). */
export const TURN = Object.freeze({ VAD: "vad", NONE: "none" });
/** Opus on the wire is always 48 kHz. */
export const OPUS_RATE = 48000;
/** The frame length the server uses unless told otherwise, in ms. */
export const DEFAULT_FRAME_MS = 20;

/** Close codes the server uses (and the browser's own 1005/1006), each with what it means. */
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

/**
 * What a close code means, for a person.
 * @param {number} code the CloseEvent's code
 * @returns {string}
 */
export function describeClose(code) {
  return CLOSE_CODES[code] || "unknown close code";
}

/**
 * The ws:// or wss:// URL of the stream endpoint.
 * @param {string} base the page's address (`location.href`) or the server's http(s) URL
 * @param {string} [override] another endpoint, absolute or relative to `base`
 * @returns {string}
 */
export function streamUrl(base, override) {
  const url = new URL(override || STREAM_PATH, base);
  if (url.protocol === "http:") url.protocol = "ws:";
  else if (url.protocol === "https:") url.protocol = "wss:";
  return url.toString();
}

/**
 * Subprotocols to offer: always voxgate.v1, plus bearer.<key> when there is a key (the server
 * never echoes the key back).
 * @param {string} [apiKey]
 * @returns {string[]}
 */
export function subprotocols(apiKey) {
  const key = (apiKey || "").trim();
  return key ? [SUBPROTOCOL, BEARER_PREFIX + key] : [SUBPROTOCOL];
}

/**
 * @typedef {object} AudioFormat
 * @property {"opus"|"pcm16"|"mulaw"} format
 * @property {number} sample_rate opus 48000; pcm16 8000, 16000, 24000 or 48000; mulaw 8000
 * @property {number} frame_ms 10, 20, 40 or 60
 */

/**
 * An `input_audio` / `output_audio` object.
 * @param {"opus"|"pcm16"|"mulaw"} format
 * @param {number} sampleRate
 * @param {number} [frameMs]
 * @returns {AudioFormat}
 */
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

/**
 * The `session.start` event (the first message of a session). Every field is optional; the
 * server's model supplies the defaults.
 * @param {object} [fields]
 * @param {string} [fields.model] the served model's name (a check: the server serves one)
 * @param {string} [fields.voice]
 * @param {AudioFormat} [fields.inputAudio] microphone audio format (speech-to-speech models)
 * @param {AudioFormat} [fields.outputAudio] the audio frames' format (default Opus, 48 kHz, 20 ms)
 * @param {object} [fields.sampling] temperature, top_p, top_k, repetition_penalty, seed,
 *   max_tokens, min_tokens
 * @param {{type: "vad"|"none", silence_ms?: number}} [fields.turnDetection]
 * @param {number} [fields.speed] playback speed of the replies, 0.25-4.0, pitch unchanged
 *   (default 1; full-duplex models take only 1)
 * @param {{language?: string, prompt?: string}} [fields.inputTranscription] transcripts of
 *   the user's spoken turns (`input.transcript`; turn-based models, on a server started with
 *   --input-transcription-model: any other refuses the session); `{}` detects the language
 * @param {object} [fields.extra] more session.start fields, merged in as they are (optional
 *   extensions this module does not name)
 * @returns {string} JSON text
 */
export function sessionStart({ model, voice, inputAudio, outputAudio, sampling, turnDetection, speed, inputTranscription, extra } = {}) {
  return JSON.stringify({
    type: C.SESSION_START,
    ...drop({
      model,
      voice,
      input_audio: inputAudio,
      output_audio: outputAudio,
      sampling: sampling ? drop(sampling) : undefined,
      turn_detection: turnDetection,
      speed,
    }),
    // Sent even empty: `{}` asks for transcripts in the detected language.
    ...(inputTranscription ? { input_transcription: drop(inputTranscription) } : {}),
    ...(extra || {}),
  });
}

/**
 * Text to speak. `final: false` appends to the open response (text streaming in from an LLM);
 * `final: true` closes its input.
 * @param {string} value
 * @param {boolean} [final]
 * @param {object} [extra] more fields of the event, merged in as they are (a response's own
 *   options, on the text that opens it)
 * @returns {string} JSON text
 */
export const text = (value, final = true, extra = undefined) =>
  JSON.stringify({ type: C.TEXT, text: value, final, ...(extra || {}) });
/** Barge-in: stop the current response now. @returns {string} JSON text */
export const responseCancel = () => JSON.stringify({ type: C.RESPONSE_CANCEL });
/**
 * How much of the current response the listener has heard (the scheduler's deadline, and what
 * a barge-in's `heard_words` are judged by).
 * @param {number} playedMs
 * @returns {string} JSON text
 */
export const playback = (playedMs) =>
  JSON.stringify({ type: C.PLAYBACK, played_ms: Math.round(playedMs) });
/** End the user's spoken turn now. @returns {string} JSON text */
export const inputCommit = () => JSON.stringify({ type: C.INPUT_COMMIT });
/** End the session gracefully (`session.ended`, then close 1000). @returns {string} JSON text */
export const sessionEnd = () => JSON.stringify({ type: C.SESSION_END });

// --- server → client --------------------------------------------------------------------------

/**
 * A server event: one JSON object with a `type` (S) and that event's fields (docs/protocol.md),
 * e.g. `{type: "response.done", response_id, status, audio_ms, ttfa_ms, heard_words?}`.
 * @typedef {{type: string, [field: string]: any}} ServerEvent
 */

/**
 * A word and when it is said, in ms from the response's first audio (`response.words`).
 * @typedef {object} Word
 * @property {string} word as the model read it (normalised: lower case, numbers spelled out)
 * @property {number} start_ms
 * @property {number} end_ms
 */

/**
 * Parse a text frame.
 * @param {string} data
 * @returns {ServerEvent}
 * @throws {Error} with a readable message when the frame is not an event
 */
export function parseEvent(data) {
  const event = JSON.parse(data);
  if (!event || typeof event !== "object" || typeof event.type !== "string") {
    throw new Error("server event without a type: " + String(data).slice(0, 120));
  }
  return event;
}

/**
 * The words of a `response.words` event, or a cancelled `response.done`'s `heard_words`, as
 * one string.
 * @param {Word[]} [words]
 * @returns {string}
 */
export function wordsText(words) {
  return (words || []).map((w) => w.word).join(" ");
}

/** `session.started` `model_kind` values: how to converse with the model. */
export const KIND = Object.freeze({ TTS: "tts", TURNS: "turns", FULL_DUPLEX: "full_duplex" });

/**
 * @typedef {object} ModelInfo
 * @property {string} name
 * @property {string[]} voices
 * @property {string} defaultVoice
 * @property {"tts"|"turns"|"full_duplex"} kind
 * @property {boolean} acceptsAudio the session takes microphone audio
 * @property {boolean} fullDuplex one continuous spoken conversation (Moshi)
 * @property {boolean} turns spoken turns ended by the server's VAD (or input.commit)
 * @property {boolean} acceptsText
 * @property {boolean} wordTimings responses carry `response.words` (and barge-in `heard_words`)
 * @property {boolean} inputTranscripts spoken turns' words come as `input.transcript` (the
 *   session asked for them, and the server transcribes)
 * @property {boolean} transcribes the server transcribes this model's spoken turns: a session
 *   may ask for them (`session.started` `transcribes`)
 */

/**
 * What `session.started` says about the model, tolerant of older servers (a name string or a
 * facts object, no `model_kind`).
 * @param {ServerEvent} started
 * @returns {ModelInfo}
 */
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
    turns: kind === KIND.TURNS,
    acceptsText: kind !== KIND.FULL_DUPLEX,
    wordTimings: started.word_timings === true,
    inputTranscripts: Boolean(started.input_transcription),
    // The server transcribes this model's spoken turns: a session may ask (input_transcription).
    transcribes: started.transcribes === true,
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

/**
 * A readable one-line description of a server `error` event, with what the user can do.
 * @param {ServerEvent} ev
 * @returns {string}
 */
export function describeError(ev) {
  const hint = ERROR_HINTS[ev.code];
  const base = `Server error (${ev.code || "unknown"}): ${ev.message || "no message"}`;
  const tail = ev.fatal ? " The session has ended." : "";
  return hint ? `${base} — ${hint}${tail}` : base + tail;
}
