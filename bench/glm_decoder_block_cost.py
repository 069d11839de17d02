"""Per-block cost of GLM-4-Voice's streaming decoder against the block's index, bounded window
(default 60 tokens of context) against the reference's unbounded history.

Builds the decoder from the tiny or the published configuration (config.yaml sizes) with seeded
random weights (no checkpoint needed), streams `--tokens` random speech tokens through
`GlmVoiceDecoder` in blocks of 10, 20, then 40 for `--batch` requests at once, and prints the
wall time and audio seconds of each call.

    PYTHONPATH=$PWD python bench/glm_decoder_block_cost.py --size tiny --tokens 250
    PYTHONPATH=$PWD python bench/glm_decoder_block_cost.py --size real --tokens 400 --batch 8 \
        --device cuda --bf16 [--unbounded]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.masked_flow import MaskedDiffWithXvec
from models.cosyvoice2.config import read_yaml
from models.glm_voice.configs import TINY_GLM_VOICE_DECODER
from models.glm_voice.decoder import GlmVoiceDecoder
from models.glm_voice.decoder_config import decoder_yaml, parse_decoder_config


def build(size: str, device: str, dtype: torch.dtype, context: int | None) -> GlmVoiceDecoder:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(decoder_yaml(TINY_GLM_VOICE_DECODER if size == "tiny" else {}))
        cfg = parse_decoder_config(read_yaml(path))
    torch.manual_seed(0)
    flow, hift = MaskedDiffWithXvec(cfg.flow).eval(), HiFTGenerator(cfg.hift).eval()
    hift.fold_weight_norm()
    return GlmVoiceDecoder(flow.to(device, dtype), hift.to(device), context_tokens=context)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=["tiny", "real"], default="tiny")
    ap.add_argument("--tokens", type=int, default=250)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--unbounded", action="store_true", help="the reference's whole history")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    dec = build(args.size, args.device, dtype, None if args.unbounded else 60)
    vocab = dec.flow.cfg.vocab_size
    rng = np.random.default_rng(0)
    states = [dec.new_stream(seed=i) for i in range(args.batch)]
    print("call  tokens  ms      audio_s")
    at, call = 0, 0
    while at < args.tokens:
        n = dec.block_tokens[min(call, len(dec.block_tokens) - 1)]
        n = min(n, args.tokens - at)
        for s in states:
            dec.push(s, rng.integers(0, vocab, n).tolist())
        at += n
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        began = time.perf_counter()
        pcm = dec.decode(states, [at >= args.tokens] * len(states))
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        ms = 1000 * (time.perf_counter() - began)
        print(f"{call:4d}  {at:6d}  {ms:7.1f} {len(pcm[0]) / dec.sample_rate:6.2f}")
        call += 1


if __name__ == "__main__":
    main()
