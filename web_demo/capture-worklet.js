// Microphone capture on the audio thread: collects the mono input into fixed frames
// (`frameSamples` each, e.g. 20 ms) and posts each one to the page as a Float32Array.

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.frameSamples = options.processorOptions.frameSamples;
    this.frame = new Float32Array(this.frameSamples);
    this.filled = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (input.length === 0) return true; // not connected yet
    const mono = input[0];
    let offset = 0;
    while (offset < mono.length) {
      const n = Math.min(mono.length - offset, this.frameSamples - this.filled);
      this.frame.set(mono.subarray(offset, offset + n), this.filled);
      this.filled += n;
      offset += n;
      if (this.filled === this.frameSamples) {
        this.port.postMessage(this.frame, [this.frame.buffer]);
        this.frame = new Float32Array(this.frameSamples);
        this.filled = 0;
      }
    }
    return true;
  }
}

registerProcessor("capture", CaptureProcessor);
