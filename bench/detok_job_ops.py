"""Host work of one steady-state CosyVoice 2 detokenizer job, eager against CUDA-graphed.

Counts the ATen ops one job (every request's next chunk: flow + HiFT) dispatches from the
host (engine/host_ops.py): on the GPU each is a kernel launch or copy paid for with the GIL
held, and a replayed graph is one. On the CPU the graphs are stood in for (the captured
function runs uncounted), so the counts are the GPU's; wall times only mean something on it.

    PYTHONPATH=$PWD python bench/detok_job_ops.py --size tiny --rows 1,4
    PYTHONPATH=$PWD python bench/detok_job_ops.py --size real --device cuda --bf16 --rows 8,32

Prints JSON per row count: ops per job eager and graphed, graph replays, .item()-style device
reads (.item()), the most frequent ops, and (CUDA) each job's wall ms.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from flow_hift_chunk_cost import build

from engine.host_ops import REPLAY, CountedGraphs, HostOpCounter
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from models.cosyvoice2.loading import DEFAULT_FIRST_HOP


def steady_job(detok: FlowHiftDetokenizer, rows: int, prompt_chunks: int, counter: HostOpCounter):
    """Stream `rows` requests to steady state (first chunk, one whole chunk), then count the
    next job. → (ops Counter, device reads, wall seconds)."""
    g = torch.Generator().manual_seed(1)
    chunk, m, e = detok.chunk, detok.flow.cfg.output_size, detok.flow.cfg.spk_embed_dim
    states = [
        detok.new_stream(
            torch.randint(0, 6561, (chunk * prompt_chunks,), generator=g).tolist(),
            torch.randn(2 * chunk * prompt_chunks, m, generator=g),
            torch.randn(e, generator=g),
        )
        for _ in range(rows)
    ]
    pushes = [detok.first_hop + detok.lookahead, chunk, chunk]
    for i, size in enumerate(pushes):
        for s in states:
            detok.push(s, torch.randint(0, 6561, (size,), generator=g).tolist())
        if i < len(pushes) - 1:
            detok.decode(states, [False] * rows)
    sync = torch.cuda.synchronize if detok.device.type == "cuda" else lambda: None
    sync()
    counter.counts.clear()
    began = time.perf_counter()
    with counter:
        detok.decode(states, [False] * rows)
    sync()
    return counter.counts.copy(), counter.device_reads, time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=["tiny", "real"], default="tiny")
    ap.add_argument("--rows", default="1,4", help="requests per job, comma-separated")
    ap.add_argument("--prompt-chunks", type=int, default=0, help="voice prompt length (chunks)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    eager = build(args.size, args.device, dtype, first_hop=DEFAULT_FIRST_HOP)
    graphed = FlowHiftDetokenizer(eager.flow, eager.hift, eager.chunk, first_hop=eager.first_hop)
    counter = HostOpCounter()
    real = None
    if eager.device.type == "cuda":
        from engine.cuda_graphs import CallableGraphs

        real = CallableGraphs(eager.device)
    graphed.enable_cuda_graphs(CountedGraphs(counter, real))
    report = []
    for rows in (int(r) for r in args.rows.split(",")):
        row = {"rows": rows}
        for name, detok in (("eager", eager), ("graphed", graphed)):
            counts, reads, wall = steady_job(detok, rows, args.prompt_chunks, counter)
            row[name] = {
                "ops": sum(counts.values()),
                "replays": counts[REPLAY],
                "device_reads": reads,
                "top": dict(counts.most_common(6)),
            }
            if eager.device.type == "cuda":
                row[name]["wall_ms"] = round(1e3 * wall, 2)
        report.append(row)
    print(json.dumps({"size": args.size, "device": args.device, "jobs": report}, indent=1))


if __name__ == "__main__":
    main()
