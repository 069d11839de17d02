// Jitter buffer on the audio thread: decoded Float32 chunks queue here and play out at the
// AudioContext rate. Playback starts (and restarts after an underrun) only once `prebufferMs`
// of audio is queued, so network jitter is absorbed instead of heard as clicks.
//
// Messages in:  {type:"push", gen, samples: Float32Array}   audio of response `gen`
//               {type:"end", gen}      the response is complete: drain without counting underruns
//               {type:"flush"}         barge-in: drop everything queued now
//               {type:"config", prebufferMs}
// Messages out: {type:"stats", bufferedSamples, playedSamples, underruns, gen, genPlayedSamples,
//                playing, drained, endedGen}

const REPORT_EVERY = 8; // render quanta (8 × 128 samples ≈ 21 ms at 48 kHz)

class JitterBufferProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.prebuffer = Math.round(((opts.prebufferMs ?? 60) * sampleRate) / 1000);
    this.queue = []; // [{gen, samples, offset}]
    this.buffered = 0;
    this.playing = false;
    this.ended = new Set(); // generations whose input is complete
    this.played = 0;
    this.underruns = 0;
    this.gen = -1; // generation of the last sample played
    this.endedGen = -1; // newest generation whose input is complete
    this.genPlayed = 0;
    this.quanta = 0;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(msg) {
    switch (msg.type) {
      case "push":
        if (msg.samples.length === 0) return;
        this.queue.push({ gen: msg.gen, samples: msg.samples, offset: 0 });
        this.buffered += msg.samples.length;
        break;
      case "end":
        this.ended.add(msg.gen);
        this.endedGen = Math.max(this.endedGen, msg.gen);
        for (const g of this.ended) if (g < msg.gen - 8) this.ended.delete(g);
        break;
      case "flush":
        this.queue = [];
        this.buffered = 0;
        this.playing = false;
        break;
      case "config":
        this.prebuffer = Math.round((msg.prebufferMs * sampleRate) / 1000);
        break;
    }
  }

  // Input of everything queued is complete, so waiting for more would only add silence.
  tailComplete() {
    return this.queue.length > 0 && this.ended.has(this.queue[this.queue.length - 1].gen);
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    let written = 0;
    if (!this.playing && this.buffered > 0 && (this.buffered >= this.prebuffer || this.tailComplete())) {
      this.playing = true;
    }
    if (this.playing) {
      while (written < out.length && this.queue.length > 0) {
        const head = this.queue[0];
        if (head.gen !== this.gen) {
          this.gen = head.gen;
          this.genPlayed = 0;
        }
        const n = Math.min(out.length - written, head.samples.length - head.offset);
        out.set(head.samples.subarray(head.offset, head.offset + n), written);
        head.offset += n;
        written += n;
        this.buffered -= n;
        this.genPlayed += n;
        if (head.offset >= head.samples.length) this.queue.shift();
      }
      this.played += written;
      if (written < out.length) {
        this.playing = false;
        // Running dry before the response said it was complete is an audible gap.
        if (!this.ended.has(this.gen)) this.underruns += 1;
      }
    }
    out.fill(0, written);
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);

    if (++this.quanta % REPORT_EVERY === 0) this.report();
    return true;
  }

  report() {
    this.port.postMessage({
      type: "stats",
      bufferedSamples: this.buffered,
      playedSamples: this.played,
      underruns: this.underruns,
      gen: this.gen,
      genPlayedSamples: this.genPlayed,
      playing: this.playing,
      drained: this.queue.length === 0,
      endedGen: this.endedGen,
    });
  }
}

registerProcessor("jitter-buffer", JitterBufferProcessor);
