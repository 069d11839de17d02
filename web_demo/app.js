// The Voxgate demo page: one WebSocket session (docs/protocol.md), text or microphone in, streamed
// audio out through a jitter buffer, live readouts. Counters are mirrored on
// window.voxgateStats for the browser test.

import * as P from "./protocol.js";
import { hasOpusDecoder, hasWorklet, Player } from "./player.js";
import { chooseInputFormat, hasMicrophone, Microphone } from "./mic.js";
import { ConversationLog, listenState } from "./conversation.js";
import { Settings } from "./settings.js";
import { Voices } from "./voices.js";
import { $, clearNotice, log, notice, Waveform } from "./ui.js";

const stats = (window.voxgateStats = {
  framesReceived: 0,
  framesDecoded: 0,
  framesPlayed: 0,
  samplesPlayed: 0,
  bufferedMs: 0,
  drained: true,
  underruns: 0,
  ttfaMs: null,
  errors: [], // JavaScript errors on this page
  serverErrors: [], // `error` events from the server
  responses: [], // response.done events
  closes: [], // {code, reason} of every socket close
  outputFormat: null,
  speed: null, // the speed session.started echoed (null: the default, 1)
  speechStarted: 0, // input.speech_started events (turn-based models: the server's VAD)
  speechStopped: 0,
  bargeIns: 0, // replies the user interrupted by speaking over them
  playbackReports: 0, // `playback` events sent
  lastPlaybackMs: null, // the current response's last reported played_ms
  bargeInHeardMs: [], // per barge-in: the interrupted reply's last reported played_ms
  listenState: "off", // the microphone card's state pill (off/listening/speaking/waiting/replying)
  voices: [], // the voice picker's names (GET /v1/voices)
  voiceErrors: [], // codes of clips POST /v1/voices refused
  inputTranscripts: [], // input.transcript texts (spoken turns' words, where the server transcribes)
  ready: false,
});

function recordError(message) {
  stats.errors.push(String(message));
  notice(String(message), "error");
  log("err", String(message));
}
window.addEventListener("error", (e) => recordError(e.message || String(e.error)));
window.addEventListener("unhandledrejection", (e) =>
  recordError(`unhandled: ${e.reason && e.reason.message ? e.reason.message : e.reason}`),
);

const params = new URLSearchParams(location.search);
const settings = new Settings(params);
const voices = new Voices(settings, params, stats);
const el = {
  text: $("text"), speak: $("speak"), stop: $("stop"), connect: $("connect"), conn: $("conn-state"),
  mic: $("mic"), micNote: $("mic-note"), micLevel: $("mic-level"), transcript: $("transcript"),
  speakNote: $("speak-note"), speakTitle: $("speak-title"), listen: $("listen-state"),
};
const conversationLog = new ConversationLog($("conversation"));
const SPEAK_HINT = el.speakNote.textContent;

let ws = null; // the live socket, or null
let session = null; // the session.started event of `ws`
let model = null; // P.modelInfo(session)
let connecting = null; // Promise while a socket is opening
let sessionDirty = false; // a session setting changed: reconnect before the next Speak
let inputFormat = null; // how the microphone would be sent (decided once per page)
let wantInput = false; // declare input_audio in session.start (only once the mic is used)
let mic = null;
let userSpeaking = false; // between input.speech_started and input.speech_stopped
let worklet = { gen: -1, genPlayedSamples: 0, bufferedSamples: 0 };
// The current turn: text sent → response.started → frames → response.done.
const turn = { starting: false, pending: false, open: false, t0: 0, awaitingFirst: false, cancelled: false };

const player = new Player({
  onDecoded: (n) => (stats.framesDecoded += n),
  onStats: (s) => {
    worklet = s;
    stats.samplesPlayed = s.playedSamples;
    stats.underruns = s.underruns;
    stats.bufferedMs = (s.bufferedSamples * 1000) / player.sampleRate;
    // The last response is complete and all of it has played.
    stats.drained = s.drained && s.endedGen === player.gen;
    const frameMs = (session && session.output_audio && session.output_audio.frame_ms) || 20;
    stats.framesPlayed = Math.floor(s.playedSamples / ((player.sampleRate * frameMs) / 1000));
  },
  onError: recordError,
});

// --- connection ---------------------------------------------------------------------------------

function setConn(state, label) {
  el.conn.dataset.state = state;
  el.conn.textContent = label;
  el.connect.textContent = state === "open" || state === "connecting" ? "Disconnect" : "Connect";
}

/** Resolves once a session is started on a socket whose settings are current. */
async function connect() {
  if (connecting) return connecting;
  if (ws && session && !sessionDirty) return;
  if (ws) await disconnect();
  connecting = openSocket().finally(() => (connecting = null));
  return connecting;
}

/** Ask for the words of spoken turns: once the microphone is wanted, where a session showed
 * the server transcribes this model's turns (session.started `transcribes`), unless the URL
 * says ?input_transcription=0. */
function wantsTranscripts() {
  return wantInput && Boolean(model && model.transcribes) &&
    settings.inputTranscription() !== undefined;
}

function openSocket() {
  return new Promise((resolve, reject) => {
    const url = P.streamUrl(location.href, params.get("ws"));
    let sock;
    try {
      sock = new WebSocket(url, P.subprotocols(settings.apiKey.value));
    } catch (err) {
      // e.g. an API key with characters a subprotocol token cannot hold
      reject(new Error(`Cannot open the WebSocket: ${err.message}`));
      return;
    }
    sock.binaryType = "arraybuffer";
    ws = sock;
    sessionDirty = false;
    setConn("connecting", "Connecting…");
    log("note", `connecting to ${url}`);
    sock.onopen = () => {
      const config = settings.sessionConfig(wantInput ? inputFormat : undefined, wantsTranscripts());
      const start = P.sessionStart(config);
      sock.send(start);
      log("out", start);
    };
    sock.onmessage = (ev) => {
      if (sock !== ws) return;
      if (typeof ev.data !== "string") onAudio(ev.data);
      else onEvent(ev.data, resolve);
    };
    sock.onclose = (ev) => {
      onClose(sock, ev);
      const err = new Error(`closed before the session started (${ev.code})`);
      err.shown = true; // onClose already told the user
      reject(err); // a no-op once the session started
    };
  });
}

function disconnect() {
  const sock = ws;
  if (!sock) return Promise.resolve();
  sock.clientClosing = true;
  return new Promise((resolve) => {
    sock.addEventListener("close", () => resolve(), { once: true });
    if (sock.readyState === WebSocket.OPEN && session) {
      send(P.sessionEnd()); // the server answers session.ended and closes with 1000
      setTimeout(() => sock.readyState < WebSocket.CLOSING && sock.close(1000), 2000);
    } else {
      sock.close(1000);
    }
  });
}

function onClose(sock, ev) {
  if (sock !== ws) return;
  ws = null;
  session = null;
  stats.closes.push({ code: ev.code, reason: ev.reason });
  if (turn.open || turn.pending) player.endResponse(); // let what arrived play out
  Object.assign(turn, { pending: false, open: false, awaitingFirst: false, cancelled: false });
  userSpeaking = false;
  conversationLog.forgetUnheard();
  if (mic && mic.active) mic.stop().catch((err) => recordError(err.message));
  const reason = ev.reason ? ` — “${ev.reason}”` : "";
  const text = `Connection closed: ${ev.code} ${P.describeClose(ev.code)}${reason}`;
  log(ev.code === 1000 ? "note" : "err", text);
  if (ev.code === 1000) {
    setConn("idle", "Not connected");
    if (!sock.clientClosing) notice(`${text}. Speak again to start a new session.`, "info", "close");
  } else {
    setConn("closed", `Closed (${ev.code})`);
    notice(text, "error", "close");
  }
  updateMicAvailability();
}

// --- server → page ------------------------------------------------------------------------------

function onAudio(buffer) {
  stats.framesReceived += 1;
  if (turn.awaitingFirst) {
    turn.awaitingFirst = false;
    stats.ttfaMs = Math.round(performance.now() - turn.t0);
    log("in", `first audio frame (${buffer.byteLength} bytes) · TTFA ${stats.ttfaMs} ms`);
  }
  player.handleFrame(buffer);
}

function onEvent(data, resolveStarted) {
  let ev;
  try {
    ev = P.parseEvent(data);
  } catch (err) {
    recordError(`bad server event: ${err.message}`);
    return;
  }
  log("in", data.length > 300 ? data.slice(0, 300) + "…" : data);
  switch (ev.type) {
    case P.S.SESSION_STARTED:
      return onSessionStarted(ev, resolveStarted);
    case P.S.RESPONSE_STARTED:
      turn.open = true;
      stats.lastPlaybackMs = null;
      player.beginResponse();
      if (turn.cancelled) player.cancel(); // Stop was pressed before the response began
      el.transcript.textContent = "";
      el.transcript.hidden = true;
      updateListenState();
      return;
    case P.S.TRANSCRIPT_DELTA:
      el.transcript.hidden = false;
      el.transcript.textContent += ev.text;
      return;
    case P.S.SPEECH_STARTED:
      return onSpeechStarted(ev);
    case P.S.SPEECH_STOPPED:
      // A spoken turn ended: time to first audio counts from here.
      stats.speechStopped += 1;
      userSpeaking = false;
      Object.assign(turn, { t0: performance.now(), awaitingFirst: true });
      // Its words replace the line when they come (input.transcript), in sessions that asked.
      if (model && model.turns) {
        addToConversation("user", `(spoken turn, ${seconds(ev.audio_ms - speechFromMs)})`, model.inputTranscripts);
      }
      updateListenState();
      return;
    case P.S.INPUT_TRANSCRIPT:
      stats.inputTranscripts.push(ev.text);
      conversationLog.heard(ev.error ? `(not transcribed: ${ev.error})` : ev.text.trim() || "(no words heard)");
      return;
    case P.S.RESPONSE_DONE:
      if (!turn.cancelled) player.endResponse();
      stats.responses.push(ev);
      if (model && model.turns) {
        const said = el.transcript.textContent.trim() || "(no text)";
        const why = { cancelled: " [interrupted]", length: " [cut at max tokens]", failed: " [failed]" };
        addToConversation("model", said + (why[ev.status] || ""));
      }
      Object.assign(turn, { pending: false, open: false, awaitingFirst: false, cancelled: false });
      updateButtons();
      updateListenState();
      return;
    case P.S.ERROR:
      stats.serverErrors.push(ev);
      notice(P.describeError(ev), "error");
      // A refused text opens no response, so nothing else will end this turn.
      if (turn.pending && !turn.open) {
        turn.pending = false;
        if (model && model.turns) conversationLog.markLastRefused();
      }
      return;
    default:
      return; // speech_started, session.ended and future events: the log shows them
  }
}

let speechFromMs = 0; // audio_ms of the last input.speech_started

function onSpeechStarted(ev) {
  stats.speechStarted += 1;
  userSpeaking = true;
  speechFromMs = ev.audio_ms || 0;
  // Barge-in: the server cancels the reply playing when the user speaks; silence it here at
  // once rather than after the frames already sent (up to the server's lead) have played.
  if (turn.open && !turn.cancelled) {
    stats.bargeIns += 1;
    stats.bargeInHeardMs.push(stats.lastPlaybackMs);
    turn.cancelled = true;
    turn.awaitingFirst = false;
    player.cancel();
    log("note", "barge-in: you spoke over the reply, so it stops");
  } else if (turn.pending && !turn.open && model && model.turns) {
    forgetUnansweredTurn();
  }
  updateListenState();
}

const seconds = (ms) => `${(Math.max(0, ms) / 1000).toFixed(1)} s`;

function addToConversation(who, text, awaitsWords = false) {
  conversationLog.add(who, model && model.name, text, awaitsWords);
}

/** The microphone card's pill: what the conversation is waiting for. */
function updateListenState() {
  const { state, label } = listenState({ model, micOn: Boolean(mic && mic.active), userSpeaking, turn });
  if (state === stats.listenState && el.listen.textContent === label) return;
  stats.listenState = state;
  el.listen.dataset.state = state;
  el.listen.textContent = label;
}

function onSessionStarted(ev, resolveStarted) {
  session = ev;
  model = P.modelInfo(ev);
  const output = ev.output_audio || settings.sessionConfig().outputAudio;
  try {
    player.configure(output);
  } catch (err) {
    recordError(err.message);
  }
  stats.outputFormat = output.format;
  stats.speed = typeof ev.speed === "number" ? ev.speed : null;
  settings.allowSpeed(!model.fullDuplex);
  setConn("open", `Connected · ${model.name || "model"} · ${output.format}`);
  clearNotice("close");
  settings.fillVoices(model.voices, model.defaultVoice);
  // The picker from GET /v1/voices, once a session shows the key is good (no 401 to log).
  voices.load();
  updateMicAvailability();
  // Now, not at the next animation frame (which a background tab may hold back): Speak is off
  // for a model that takes no text from the moment the page knows it.
  updateButtons();
  resolveStarted();
}

// --- page → server ------------------------------------------------------------------------------

function send(message) {
  if (!ws || ws.readyState !== WebSocket.OPEN) throw new Error("not connected");
  ws.send(message);
  if (typeof message === "string") log("out", message);
}

async function speak() {
  const value = el.text.value.trim();
  if (!value) {
    notice("Type some text to speak first.", "info", "empty");
    el.text.focus();
    return;
  }
  turn.starting = true;
  try {
    await player.start(settings.prebufferMs()); // inside the click: satisfies autoplay rules
    await connect();
    if (!model.acceptsText) {
      notice(`This model (${model.name || "current model"}) takes no text: use the microphone.`, "info", "empty");
      return;
    }
    Object.assign(turn, { pending: true, t0: performance.now(), awaitingFirst: true, cancelled: false });
    send(P.text(value, true));
    if (model.turns) addToConversation("user", value);
  } catch (err) {
    if (!err.shown) recordError(err.message);
  } finally {
    turn.starting = false;
    updateButtons();
  }
}

function stop() {
  if (mic && mic.active && model && model.fullDuplex) {
    // Full duplex: the microphone is the conversation. Left running, its next packet would open
    // a new conversation right after the cancel, so it stops too, and its last packets are
    // dropped rather than sent behind the cancel.
    mic.stop({ discardTail: true }).catch((err) => recordError(err.message));
    setMicButton(false);
  }
  if (ws && (turn.pending || turn.open)) {
    send(P.responseCancel());
    if (turn.open || !(model && model.turns)) turn.cancelled = true;
    else forgetUnansweredTurn();
  }
  turn.awaitingFirst = false;
  player.cancel();
  updateButtons();
  updateListenState();
}

/** Turn-based models: a cancel or new speech before a reply began means that reply never
 * comes (the server answers the next turn instead), so the typed turn stops waiting for it. */
function forgetUnansweredTurn() {
  Object.assign(turn, { pending: false, awaitingFirst: false, cancelled: false });
}

function reportPlayback() {
  if (!ws || ws.readyState !== WebSocket.OPEN || !turn.open || turn.cancelled) return;
  const played = worklet.gen === player.gen ? worklet.genPlayedSamples : 0;
  const playedMs = Math.round((played * 1000) / player.sampleRate);
  ws.send(P.playback(playedMs)); // not logged: 4 a second
  stats.playbackReports += 1;
  stats.lastPlaybackMs = playedMs;
}

// --- microphone ---------------------------------------------------------------------------------

function updateMicAvailability() {
  let note;
  let usable = false;
  if (!hasMicrophone()) {
    note = "This browser offers no microphone capture here (it needs https or localhost).";
  } else if (!session) {
    note = "Connect to find out whether the model takes spoken input.";
  } else if (!model.acceptsAudio) {
    note = `This model (${model.name || "current model"}) takes text only, so the microphone is disabled.`;
  } else {
    usable = true;
    note = inputFormat.format === P.FORMAT.OPUS
      ? "Start it and speak; audio is sent as Opus."
      : "Start it and speak; WebCodecs AudioEncoder is missing, so audio is sent as PCM16 16 kHz.";
    if (model.fullDuplex) note += " The model listens and talks at once; stop it to end the conversation.";
    else if (settings.pushToTalk) note += " Stop it to end your turn; start it again for the next one.";
    else if (model.turns) {
      note += " Pause and the server's voice detection ends your turn; the model answers." +
        " Speak over a reply to interrupt it (use headphones, so the reply does not reach the microphone).";
    }
  }
  el.mic.disabled = !usable;
  el.micNote.textContent = note;
  el.listen.hidden = !usable; // the conversation's state: speech models only
  if (model && model.fullDuplex) {
    el.speakNote.textContent = `This model (${model.name || "current model"}) converses through the microphone only: it takes no text.`;
  } else if (model && model.turns) {
    el.speakNote.textContent = "Typed text is a turn of the conversation, like a spoken one. Stop interrupts the reply.";
  } else {
    el.speakNote.textContent = SPEAK_HINT;
  }
  el.speakTitle.textContent = model && model.turns ? "Type a turn" : "Text to speech";
  el.speak.textContent = model && model.turns ? "Send" : "Speak";
  if (!mic || !mic.active) setMicButton(false);
}

function setMicButton(on) {
  el.mic.setAttribute("aria-pressed", String(on));
  el.mic.textContent = on ? "Stop microphone" : "Start microphone";
}

const sameFormat = (a, b) => a && b && a.format === b.format && a.sample_rate === b.sample_rate;

async function toggleMic() {
  try {
    if (mic && mic.active) {
      await mic.stop();
      setMicButton(false);
      // Turn-based models: the end of the user's turn (push-to-talk, or speech the VAD has not
      // yet seen end). Full-duplex models (Moshi): the end of the conversation, whose
      // response.done then arrives.
      if (ws && (settings.pushToTalk || model.fullDuplex || userSpeaking)) send(P.inputCommit());
      userSpeaking = false;
      updateListenState();
      if (settings.pushToTalk && ws) {
        Object.assign(turn, { t0: performance.now(), awaitingFirst: true });
      }
      return;
    }
    await player.start(settings.prebufferMs());
    // The first session leaves input_audio to the server; if it chose a format this page does
    // not send, start a session that declares the page's format.
    if (session && !sameFormat(session.input_audio, inputFormat)) sessionDirty = true;
    wantInput = true;
    await connect();
    // The spoken turns' words, where the server makes them: a session that did not ask (the
    // first, before the server was known to transcribe) is replaced by one that does.
    if (wantsTranscripts() && !model.inputTranscripts) {
      sessionDirty = true;
      await connect();
    }
    if (!model.acceptsAudio) return;
    mic = new Microphone(inputFormat, {
      send: (packet) => ws && ws.readyState === WebSocket.OPEN && ws.send(packet),
      onLevel: (v) => (el.micLevel.value = Math.min(1, v * 4)),
      onError: recordError,
    });
    await mic.start();
    setMicButton(true);
    updateListenState();
    // Full duplex: the conversation starts now; time to first audio counts from here.
    if (model.fullDuplex) Object.assign(turn, { t0: performance.now(), awaitingFirst: true });
  } catch (err) {
    if (!err.shown) notice(`Microphone: ${err.message}`, "error", "mic");
    setMicButton(false);
  }
}

// --- rendering ----------------------------------------------------------------------------------

function updateButtons() {
  const busy = turn.pending || turn.open;
  el.speak.disabled = busy || turn.starting || Boolean(model && !model.acceptsText);
  el.stop.disabled = !(busy || worklet.bufferedSamples > 0);
}

const waveform = new Waveform($("wave"));
const waveBytes = new Uint8Array(2048);

function render() {
  $("stat-ttfa").textContent = stats.ttfaMs === null ? "–" : `${stats.ttfaMs} ms`;
  $("stat-buffered").textContent = `${Math.round(stats.bufferedMs)} ms`;
  $("stat-underruns").textContent = String(stats.underruns);
  $("stat-received").textContent = String(stats.framesReceived);
  $("stat-decoded").textContent = String(stats.framesDecoded);
  $("stat-played").textContent = String(stats.framesPlayed);
  waveform.draw(player.waveform(waveBytes) ? waveBytes : null);
  updateButtons();
  updateListenState();
  requestAnimationFrame(render);
}

// --- start-up -----------------------------------------------------------------------------------

async function checkCapabilities() {
  if (typeof WebSocket !== "function") notice("This browser has no WebSocket support.", "error");
  if (!hasWorklet()) notice("This browser has no AudioWorklet: audio cannot be played.", "error");
  let opus = hasOpusDecoder();
  if (opus) {
    const probe = { codec: "opus", sampleRate: 48000, numberOfChannels: 1 };
    opus = (await AudioDecoder.isConfigSupported(probe).catch(() => ({}))).supported === true;
  }
  if (!opus) {
    settings.forcePcm();
    const why = window.isSecureContext ? "this browser" : "an insecure origin (use https or localhost)";
    notice(`WebCodecs Opus decoding is unavailable in ${why}; playing PCM16 48 kHz instead.`, "info", "codec");
  }
  inputFormat = await chooseInputFormat();
}

function bind() {
  $("settings").addEventListener("submit", (e) => e.preventDefault());
  el.speak.addEventListener("click", speak);
  el.stop.addEventListener("click", stop);
  el.mic.addEventListener("click", toggleMic);
  el.connect.addEventListener("click", () => {
    if (ws) disconnect();
    else connect().catch((err) => err.shown || recordError(err.message));
  });
  el.text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !el.speak.disabled) speak();
  });
  settings.onSessionChange(() => (sessionDirty = ws !== null));
  settings.prebuffer.addEventListener("change", () => player.setPrebuffer(settings.prebufferMs()));
  setInterval(reportPlayback, 250);
  window.addEventListener("pagehide", () => ws && ws.close(1000));
}

async function main() {
  bind();
  requestAnimationFrame(render);
  await checkCapabilities();
  updateMicAvailability();
  stats.ready = true;
  // Connect at once, so that the voice list and the microphone state are known before Speak.
  if (params.get("autoconnect") !== "0") connect().catch((err) => err.shown || recordError(err.message));
}

main().catch((err) => recordError(err.message));
