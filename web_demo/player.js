// Audio out: server frames → decoder (WebCodecs Opus, or raw PCM16) → jitter-buffer worklet →
// analyser (waveform) → speakers. One Player per page; `beginResponse` starts a new
// generation so that stale frames of a cancelled response are never played.

import { FORMAT } from "./protocol.js";

export const hasOpusDecoder = () => typeof AudioDecoder === "function";
export const hasWorklet = () =>
  typeof AudioContext === "function" && typeof AudioWorkletNode === "function";

export class Player {
  /**
   * @param {object} hooks  onDecoded(count), onStats(workletStats), onError(message)
   */
  constructor(hooks) {
    this.hooks = hooks;
    this.ctx = null;
    this.node = null;
    this.analyser = null;
    this.decoder = null;
    this.format = null; // session's output_audio
    this.gen = 0;
    this.accepting = false; // false while a cancelled response's frames still arrive
    this.timestampUs = 0;
  }

  /** Create the AudioContext and worklet. Call from a user gesture (autoplay policy). */
  async start(prebufferMs) {
    if (this.ctx) {
      if (this.ctx.state !== "running") await this.ctx.resume();
      return;
    }
    if (!hasWorklet()) throw new Error("this browser has no AudioWorklet: audio cannot play");
    // 48 kHz is Opus's native rate: no resampling between decoder and speakers.
    this.ctx = new AudioContext({ sampleRate: 48000, latencyHint: "interactive" });
    await this.ctx.audioWorklet.addModule(new URL("jitter-worklet.js", import.meta.url));
    this.node = new AudioWorkletNode(this.ctx, "jitter-buffer", {
      numberOfInputs: 0,
      outputChannelCount: [1],
      processorOptions: { prebufferMs },
    });
    this.node.port.onmessage = (e) => this.hooks.onStats(e.data);
    this.analyser = this.ctx.createAnalyser();
    this.analyser.fftSize = 2048;
    this.node.connect(this.analyser);
    this.analyser.connect(this.ctx.destination);
    if (this.ctx.state !== "running") await this.ctx.resume();
  }

  get sampleRate() {
    return this.ctx ? this.ctx.sampleRate : 48000;
  }

  setPrebuffer(prebufferMs) {
    if (this.node) this.node.port.postMessage({ type: "config", prebufferMs });
  }

  /** The session's negotiated output format (from session.started). */
  configure(outputAudio) {
    this.format = outputAudio;
    this.closeDecoder();
    if (outputAudio.format === FORMAT.OPUS) this.openOpusDecoder();
    else if (outputAudio.format !== FORMAT.PCM16) {
      throw new Error(`the page cannot play output format "${outputAudio.format}"`);
    }
  }

  openOpusDecoder() {
    if (!hasOpusDecoder()) throw new Error("WebCodecs AudioDecoder is missing: cannot decode Opus");
    const gen = this.gen;
    const decoder = new AudioDecoder({
      // Cancel closes the decoder, so every output here belongs to a live response.
      output: (data) => {
        try {
          this.pushAudioData(data, gen);
        } finally {
          data.close();
        }
      },
      error: (err) => {
        this.hooks.onError(`Opus decoder: ${err.message || err}`);
        if (this.decoder === decoder) this.decoder = null; // replaced on the next frame
      },
    });
    this.decoder = decoder;
    this.decoder.configure({ codec: "opus", sampleRate: 48000, numberOfChannels: 1 });
  }

  closeDecoder() {
    const decoder = this.decoder;
    this.decoder = null;
    if (decoder && decoder.state !== "closed") decoder.close();
  }

  beginResponse() {
    this.gen += 1;
    this.accepting = true;
    this.timestampUs = 0;
    // A fresh decoder per response, like the server's encoder; the previous one is flushing
    // its tail (endResponse) or was closed by cancel.
    this.decoder = null;
    if (this.format && this.format.format === FORMAT.OPUS) this.openOpusDecoder();
  }

  endResponse() {
    this.accepting = false;
    const gen = this.gen;
    const decoder = this.decoder;
    const done = () => {
      // Frames still inside the decoder reach the worklet before "end" does.
      if (this.node) this.node.port.postMessage({ type: "end", gen });
      if (decoder && decoder.state !== "closed") decoder.close();
    };
    if (decoder && decoder.state === "configured") decoder.flush().then(done, done);
    else done();
  }

  /** Barge-in: silence now and ignore the rest of this response's frames. */
  cancel() {
    this.accepting = false;
    this.closeDecoder(); // drops its queued work: no output of this response follows
    if (this.node) {
      this.node.port.postMessage({ type: "flush" });
      this.node.port.postMessage({ type: "end", gen: this.gen });
    }
  }

  /** One binary frame from the server. Returns false if it was dropped. */
  handleFrame(buffer) {
    if (!this.accepting || !this.format) return false;
    if (this.format.format === FORMAT.OPUS) {
      if (!this.decoder) this.openOpusDecoder();
      const durationUs = (this.format.frame_ms || 20) * 1000;
      this.decoder.decode(
        new EncodedAudioChunk({ type: "key", timestamp: this.timestampUs, duration: durationUs, data: buffer }),
      );
      this.timestampUs += durationUs;
    } else {
      this.pushSamples(pcm16ToFloat(buffer, this.format.sample_rate || 48000, this.sampleRate));
    }
    return true;
  }

  pushAudioData(data, gen) {
    const samples = new Float32Array(data.numberOfFrames);
    data.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
    this.pushSamples(samples, gen);
  }

  pushSamples(samples, gen = this.gen) {
    this.hooks.onDecoded(1);
    if (this.node) {
      this.node.port.postMessage({ type: "push", gen, samples }, [samples.buffer]);
    }
  }

  /** Fill `out` (Uint8Array, analyser size) with the current waveform; false before start. */
  waveform(out) {
    if (!this.analyser) return false;
    this.analyser.getByteTimeDomainData(out);
    return true;
  }
}

/** Little-endian PCM16 at `fromRate` → Float32 at `toRate` (linear interpolation). */
export function pcm16ToFloat(buffer, fromRate, toRate) {
  const view = new DataView(buffer);
  const n = buffer.byteLength >> 1;
  const src = new Float32Array(n);
  for (let i = 0; i < n; i++) src[i] = view.getInt16(2 * i, true) / 32768;
  if (fromRate === toRate) return src;
  const outLen = Math.floor((n * toRate) / fromRate);
  const out = new Float32Array(outLen);
  const step = fromRate / toRate;
  for (let i = 0; i < outLen; i++) {
    const x = i * step;
    const j = Math.floor(x);
    const f = x - j;
    out[i] = src[j] * (1 - f) + (j + 1 < n ? src[j + 1] : src[j]) * f;
  }
  return out;
}
