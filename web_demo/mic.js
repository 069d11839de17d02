// Audio in: microphone → capture worklet (20 ms frames) → Opus (WebCodecs AudioEncoder) or
// raw PCM16 → one binary WebSocket frame per packet/frame.

import { audioFormat, DEFAULT_FRAME_MS, FORMAT, OPUS_RATE } from "./protocol.js";

const PCM_RATE = 16000; // the fallback sends 16 kHz: speech needs no more, and it is 1/3 the bytes

const opusEncoderConfig = {
  codec: "opus",
  sampleRate: OPUS_RATE,
  numberOfChannels: 1,
  bitrate: 32000,
  opus: { frameDuration: DEFAULT_FRAME_MS * 1000, application: "voip" },
};

export const hasMicrophone = () =>
  Boolean(navigator.mediaDevices && navigator.mediaDevices.getUserMedia);

/** Decide once per page how the microphone will be sent: the session.start input_audio. */
export async function chooseInputFormat() {
  if (typeof AudioEncoder === "function") {
    try {
      const { supported } = await AudioEncoder.isConfigSupported(opusEncoderConfig);
      if (supported) return audioFormat(FORMAT.OPUS, OPUS_RATE);
    } catch {
      // isConfigSupported rejects on configs it cannot parse: use the PCM fallback.
    }
  }
  return audioFormat(FORMAT.PCM16, PCM_RATE);
}

export class Microphone {
  /**
   * @param {object} inputAudio  the format chosen by chooseInputFormat()
   * @param {object} hooks  send(ArrayBuffer), onLevel(rms 0..1), onError(message)
   */
  constructor(inputAudio, hooks) {
    this.inputAudio = inputAudio;
    this.hooks = hooks;
    this.stream = null;
    this.ctx = null;
    this.encoder = null;
    this.timestampUs = 0;
    this.discarding = false; // stop({discardTail}): packets still inside the encoder are dropped
  }

  get active() {
    return this.stream !== null;
  }

  async start() {
    if (!hasMicrophone()) throw new Error("this browser (or an insecure origin) has no microphone API");
    const rate = this.inputAudio.sample_rate;
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    try {
      // The context runs at the wire rate, so the browser does the resampling.
      this.ctx = new AudioContext({ sampleRate: rate });
      await this.ctx.audioWorklet.addModule(new URL("capture-worklet.js", import.meta.url));
      const frameSamples = (rate * (this.inputAudio.frame_ms || DEFAULT_FRAME_MS)) / 1000;
      const node = new AudioWorkletNode(this.ctx, "capture", {
        numberOfOutputs: 0,
        channelCount: 1,
        channelCountMode: "explicit",
        processorOptions: { frameSamples },
      });
      node.port.onmessage = (e) => this.onFrame(e.data);
      this.ctx.createMediaStreamSource(this.stream).connect(node);
      if (this.inputAudio.format === FORMAT.OPUS) this.openEncoder();
    } catch (err) {
      await this.stop();
      throw err;
    }
  }

  openEncoder() {
    this.timestampUs = 0;
    this.discarding = false;
    this.encoder = new AudioEncoder({
      output: (chunk) => {
        if (this.discarding) return;
        const packet = new ArrayBuffer(chunk.byteLength);
        chunk.copyTo(packet);
        this.hooks.send(packet);
      },
      error: (err) => this.hooks.onError(`Opus encoder: ${err.message || err}`),
    });
    this.encoder.configure(opusEncoderConfig);
  }

  onFrame(samples) {
    let sum = 0;
    for (let i = 0; i < samples.length; i++) sum += samples[i] * samples[i];
    this.hooks.onLevel(Math.sqrt(sum / samples.length));
    if (!this.stream) return; // a frame that raced stop()
    if (this.inputAudio.format === FORMAT.OPUS) {
      const data = new AudioData({
        format: "f32-planar",
        sampleRate: OPUS_RATE,
        numberOfFrames: samples.length,
        numberOfChannels: 1,
        timestamp: this.timestampUs,
        data: samples,
      });
      this.timestampUs += (samples.length * 1e6) / OPUS_RATE;
      this.encoder.encode(data);
      data.close();
    } else {
      this.hooks.send(floatToPcm16(samples));
    }
  }

  /**
   * Release the microphone. The encoder's last packets are still sent, unless `discardTail`:
   * after a barge-in they would reach the server behind the cancel and, in a full-duplex
   * session, open a new conversation.
   */
  async stop({ discardTail = false } = {}) {
    const { stream, ctx, encoder } = this;
    this.stream = this.ctx = this.encoder = null;
    if (stream) for (const track of stream.getTracks()) track.stop();
    if (discardTail) this.discarding = true;
    if (encoder && encoder.state === "configured") {
      try {
        if (!discardTail) await encoder.flush(); // the last packets still go out
      } finally {
        encoder.close(); // drops whatever is still queued
      }
    }
    if (ctx) await ctx.close();
    this.hooks.onLevel(0);
  }
}

function floatToPcm16(samples) {
  const buffer = new ArrayBuffer(samples.length * 2);
  const view = new DataView(buffer);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    view.setInt16(2 * i, s < 0 ? s * 0x8000 : s * 0x7fff, true);
  }
  return buffer;
}
