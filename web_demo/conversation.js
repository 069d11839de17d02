// The spoken conversation's readouts (turn-based and full-duplex models): the microphone card's
// state pill and the list of turns under Playback.

const LABELS = Object.freeze({
  off: "Microphone off",
  listening: "Listening…",
  speaking: "You are speaking",
  waiting: "Waiting for the reply",
  replying: "Replying — speak to interrupt",
});

/**
 * What the conversation is waiting for, and how the pill says it.
 * @param {object} s  {model (P.modelInfo or null), micOn, userSpeaking, turn (app.js's turn)}
 */
export function listenState({ model, micOn, userSpeaking, turn }) {
  const turns = Boolean(model && model.turns);
  // Full duplex: the whole conversation is one response, while the microphone runs.
  if (model && model.fullDuplex && micOn) return { state: "listening", label: "Conversing" };
  if (turn.open && !turn.cancelled) {
    // Barge-in is by voice, so the hint only holds while the microphone listens.
    return { state: "replying", label: micOn && turns ? LABELS.replying : "Replying" };
  }
  let state = "listening";
  if (!micOn) state = "off";
  else if (userSpeaking) state = "speaking";
  else if (turns && (turn.pending || turn.awaitingFirst)) state = "waiting";
  return { state, label: LABELS[state] };
}

const MAX_LINES = 40;
const MAX_CHARS = 300;

const clip = (text) => (text.length > MAX_CHARS ? `${text.slice(0, MAX_CHARS)}…` : text);

/** Turn-based models: one line per turn, the user's and the model's, newest last. */
export class ConversationLog {
  constructor(list) {
    this.list = list;
    this.unheard = []; // spoken turns' text nodes waiting for their words (input.transcript)
  }

  /** `who`: "user" or "model"; `name`: the model's name for its lines; `awaitsWords`: a spoken
   * turn whose transcript will come (the session asked for them). */
  add(who, name, text, awaitsWords = false) {
    const item = document.createElement("li");
    item.className = who;
    const label = document.createElement("strong");
    label.textContent = who === "user" ? "You: " : `${name || "Model"}: `;
    const words = document.createTextNode(clip(text));
    item.append(label, words);
    this.list.append(item);
    this.list.hidden = false;
    while (this.list.children.length > MAX_LINES) this.list.firstElementChild.remove();
    if (awaitsWords) this.unheard.push(words);
  }

  /** A spoken turn's words (input.transcript), in place of the oldest spoken turn's line still
   * without them, or a line of their own (a turn ended by input.commit has no line yet). */
  heard(text) {
    const words = this.unheard.shift();
    if (words) words.textContent = clip(text);
    else this.add("user", "", text);
  }

  /** The session ended: transcripts still due will not come. */
  forgetUnheard() {
    this.unheard = [];
  }

  /** The last line was a turn the server refused (an `error`, no response). */
  markLastRefused() {
    if (this.list.lastElementChild) this.list.lastElementChild.append(" [refused]");
  }
}
