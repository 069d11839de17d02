"""Qwen3-TTS (12 Hz): a Qwen3 talker that predicts each frame's first codebook on the engine's
paged KV, a multi-token predictor for the other 15 as a batched depth stage, and the 12 Hz
speech tokenizer's causal decoder streamed at 24 kHz."""
