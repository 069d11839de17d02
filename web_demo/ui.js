// Small DOM helpers: element lookup, notices, the event log, the waveform canvas.

export const $ = (id) => document.getElementById(id);

const MAX_LOG = 300;
const MAX_NOTICES = 4;

/** Show a dismissible notice. A `key` replaces the previous notice with the same key. */
export function notice(message, kind = "info", key = "") {
  const box = $("notices");
  if (key) box.querySelector(`[data-key="${key}"]`)?.remove();
  const item = document.createElement("div");
  item.className = "notice";
  item.dataset.kind = kind;
  if (key) item.dataset.key = key;
  item.setAttribute("role", kind === "error" ? "alert" : "status");
  const text = document.createElement("span");
  text.textContent = message;
  const close = document.createElement("button");
  close.type = "button";
  close.textContent = "×";
  close.setAttribute("aria-label", "Dismiss");
  close.addEventListener("click", () => item.remove());
  item.append(text, close);
  box.append(item);
  while (box.children.length > MAX_NOTICES) box.firstElementChild.remove();
}

export function clearNotice(key) {
  $("notices").querySelector(`[data-key="${key}"]`)?.remove();
}

/** Append a line to the event log. `dir`: "in" (server), "out" (page), "err", "note". */
export function log(dir, message) {
  const list = $("log");
  const item = document.createElement("li");
  const time = document.createElement("time");
  time.textContent = new Date().toLocaleTimeString([], { hour12: false }) + "." +
    String(Date.now() % 1000).padStart(3, "0");
  const arrow = { in: "← ", out: "→ ", err: "✕ ", note: "· " }[dir] || "";
  const body = document.createElement("span");
  body.className = `dir-${dir}`;
  body.textContent = arrow + message;
  item.append(time, body);
  const atBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 4;
  list.append(item);
  while (list.children.length > MAX_LOG) list.firstElementChild.remove();
  if (atBottom) list.scrollTop = list.scrollHeight;
}

/** Draws 8-bit time-domain samples (128 = silence) across the canvas. */
export class Waveform {
  constructor(canvas) {
    this.canvas = canvas;
    this.g = canvas.getContext("2d");
    this.color = getComputedStyle(document.documentElement).getPropertyValue("--wave").trim() || "#3d5afe";
    this.grid = getComputedStyle(document.documentElement).getPropertyValue("--line").trim() || "#ddd";
  }

  draw(samples) {
    const { canvas, g } = this;
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(canvas.clientWidth * dpr));
    const h = Math.max(1, Math.round(canvas.clientHeight * dpr));
    if (canvas.width !== w || canvas.height !== h) {
      canvas.width = w;
      canvas.height = h;
    }
    g.clearRect(0, 0, w, h);
    g.strokeStyle = this.grid;
    g.lineWidth = dpr;
    g.beginPath();
    g.moveTo(0, h / 2);
    g.lineTo(w, h / 2);
    g.stroke();
    if (!samples) return;
    g.strokeStyle = this.color;
    g.lineWidth = 1.5 * dpr;
    g.beginPath();
    for (let i = 0; i < samples.length; i++) {
      const x = (i / (samples.length - 1)) * w;
      const y = (samples[i] / 255) * h;
      if (i === 0) g.moveTo(x, y);
      else g.lineTo(x, y);
    }
    g.stroke();
  }
}
