"""How far `--cpu-int8` moves voxgate-tiny from its fp32 self, on the same texts.

    python bench/int8_agreement.py --model <checkpoint folder> [--texts 12] [--rows 200]

For each workload text, fp32 generates greedily through the engine; then both models read that
same sequence (teacher forcing) and we count how often int8's top-1 equals fp32's for codebook
0, for the depth codes and for the reading pointer's advance, and the KL divergence of int8's
codebook-0 distribution from fp32's at the model's sampling temperature. Also: the row at which
int8's own greedy run first differs from fp32's, and both lengths. Word error rates (the
quality that matters) come from `python -m training.evaluate`; this isolates the weights'
precision from sampling noise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.cpu_int8 import quantize_linears_int8
from models.registry import load_model
from models.voxgate_tiny.lm import DenseCausalAttention

WORKLOAD = Path(__file__).with_name("tts_workload.jsonl")


def greedy_rows(model, text: str, rows: int) -> tuple[list, list]:
    """(prompt rows, generated rows) of a greedy run through the engine."""
    core = EngineCore(model, EngineConfig(num_kv_blocks=256), torch.device("cpu"), "sdpa")
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=rows)
    request = core.add_request(SpeechRequest(text, None, params))
    while core.has_work():
        core.step()
    return request.prompt_ids, request.output_ids


def teacher_forced(model, prompt: list, out: list):
    """Logits of codebook 0 [T, V+1], of the depth codes [T, K-1, V] and of the advance."""
    lm = model.lm
    rows = torch.tensor(list(prompt) + list(out[:-1]))
    hidden = lm(rows, torch.arange(len(rows)), DenseCausalAttention(1, len(rows)))[-len(out) :]
    codes = torch.tensor([r[: model.k] for r in out]).clamp(0, lm.codebook_size - 1)
    depth, advance = lm.depth.teacher_forced_logits(hidden, codes)
    return lm.first_logits(hidden), depth, advance


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="voxgate-tiny checkpoint folder or preset")
    p.add_argument("--texts", type=int, default=12, help="first N workload texts")
    p.add_argument("--rows", type=int, default=200, help="greedy rows per text at most")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    texts = [json.loads(line)["text"] for line in WORKLOAD.read_text().splitlines()]
    fp32, int8 = load_model(args.model), load_model(args.model)
    int8.lm = quantize_linears_int8(int8.lm)
    temperature = float(fp32.facts.sampling_defaults.get("temperature", 1.0)) or 1.0
    n = same0 = same_depth = n_depth = same_advance = 0
    kl, entropy, diverge, lengths = 0.0, 0.0, [], []
    with torch.inference_mode():
        for text in texts[: args.texts]:
            prompt, out = greedy_rows(fp32, text, args.rows)
            _, out_int8 = greedy_rows(int8, text, args.rows)
            pairs = list(zip(out, out_int8, strict=False))
            diverge.append(next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs)))
            lengths.append((len(out), len(out_int8)))
            a0, ad, aa = teacher_forced(fp32, prompt, out)
            b0, bd, ba = teacher_forced(int8, prompt, out)
            n += len(out)
            same0 += (a0.argmax(-1) == b0.argmax(-1)).sum().item()
            same_depth += (ad.argmax(-1) == bd.argmax(-1)).sum().item()
            n_depth += ad[..., 0].numel()
            if aa is not None:
                same_advance += (aa.argmax(-1) == ba.argmax(-1)).sum().item()
            log_a = F.log_softmax(a0 / temperature, -1)
            log_b = F.log_softmax(b0 / temperature, -1)
            kl += F.kl_div(log_b, log_a, log_target=True, reduction="sum").item()
            entropy -= (log_a.exp() * log_a).sum().item()
    print(
        json.dumps(
            {
                "model": args.model,
                "texts": min(args.texts, len(texts)),
                "rows": n,
                "codebook0_top1_agreement": round(same0 / n, 4),
                "depth_top1_agreement": round(same_depth / n_depth, 4),
                "advance_agreement": round(same_advance / n, 4) if fp32.lm.reading else None,
                f"codebook0_kl_nats_per_row_at_t{temperature}": round(kl / n, 4),
                "fp32_codebook0_entropy_nats_per_row": round(entropy / n, 4),
                "greedy_first_differing_row": diverge,
                "greedy_rows_fp32_int8": lengths,
            }
        )
    )


if __name__ == "__main__":
    main()
