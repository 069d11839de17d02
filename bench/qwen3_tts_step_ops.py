"""Host work of Qwen3-TTS's engine step and codec job, by stage, eager against graphed.

Counts the ATen ops (engine/host_ops.py) that one decode step and one codec job dispatch from
the host, split by stage: the step's inputs, the talker, codebook 0's head and sampling, the
depth stage (the code predictor's 15 codebooks), the rest of the step (copies to the host,
streamed text), and the codec. On a GPU each op outside a graph is a kernel launch or a copy
paid for with the GIL held (~5-10 µs each under load); a replayed graph is one. The
"graphed" column counts what runs outside graphs when the engine captures the decode,
prompt, depth and codec graphs (as it does on CUDA): the CPU stands in for those replays, so the counts are the
GPU's, whatever the widths.

    PYTHONPATH=$PWD python bench/qwen3_tts_step_ops.py               # real layer counts
    PYTHONPATH=$PWD python bench/qwen3_tts_step_ops.py --depth tiny  # the tiny preset

`--depth real` keeps the tiny widths and gives the talker, code predictor and codec the
layer counts of the published 1.7B (28, 5, 8): op counts depend on the layers, not on their
widths. Prints JSON: per stage ops and device reads (.item(), bool of a tensor).
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from collections import Counter
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.host_ops import HostOpCounter
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.qwen3_tts import configs
from models.qwen3_tts.checkpoint import load_qwen3_tts, write_checkpoint
from models.qwen3_tts.tiny_tokenizer import write_tiny_tokenizer

TEXT = "A first chunk, and the cover it gives, then some more words to say."


class StageCounter(HostOpCounter):
    """HostOpCounter whose counts are split by the stage the host is in (`stage`)."""

    def __init__(self) -> None:
        super().__init__()
        self.stage = "step"
        self.by_stage: dict[str, Counter[str]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._paused:
            self.by_stage.setdefault(self.stage, Counter())[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def staged(counter: StageCounter, stage: str, fn):
    def wrapped(*args, **kwargs):
        before, counter.stage = counter.stage, stage
        try:
            return fn(*args, **kwargs)
        finally:
            counter.stage = before

    return wrapped


def uncounted(counter: StageCounter, fn):
    """A replay's stand-in: what the graph holds is not launched from the host."""

    def wrapped(*args, **kwargs):
        with counter.paused():
            return fn(*args, **kwargs)

    return wrapped


def build(depth: str, root: Path):
    cfg, codec = copy.deepcopy(configs.TINY_QWEN3_TTS), copy.deepcopy(configs.TINY_SPEECH_TOKENIZER)
    if depth == "real":
        real = configs.QWEN3_TTS_1_7B["talker_config"]
        talker = cfg["talker_config"]
        talker["num_hidden_layers"] = real["num_hidden_layers"]
        talker["code_predictor_config"]["num_hidden_layers"] = real["code_predictor_config"][
            "num_hidden_layers"
        ]
        codec["decoder_config"]["num_hidden_layers"] = configs.SPEECH_TOKENIZER["decoder_config"][
            "num_hidden_layers"
        ]
    write_checkpoint(root, cfg, codec, seed=0, tokenizer=write_tiny_tokenizer)
    return load_qwen3_tts(str(root), torch.device("cpu"), torch.float32, name=f"{depth}-qwen3")


def graph_stand_ins(core: EngineCore, counter: StageCounter) -> None:
    """The decode, prompt, depth and codec graphs as the CPU runs them, their replays uncounted
    (their input copies counted): what the host dispatches on CUDA, where all are captured."""
    from engine.depth_graphs import DepthGraphs
    from engine.prompt_graphs import PROMPT_BUCKETS, PromptAttention, PromptGraphs
    from tests.cpu_graphs import DeferredCountedGraphs, EagerDecodeGraphs

    worker = core.worker
    decode = EagerDecodeGraphs(worker)
    run_decode = decode.run

    def run(input_ids, positions, layout, prepare=None):
        counter.counts["copy_"] += 2  # the ids and positions into the graph's buffers
        with counter.paused():
            return run_decode(input_ids, positions, layout, prepare)

    decode.run = run
    worker.graphs = decode
    model = worker.model
    depth = DepthGraphs(
        model.depth_stage,
        model.shape.hidden_size,
        model.shape.dtype,
        torch.device("cpu"),
        (1, 2, 4, 8),
        max_k=256,
    )
    depth._call = uncounted(counter, depth._call)
    depth.run = depth.run_static
    worker.depth_graphs = depth
    prompts = PromptGraphs(
        model.forward,
        PromptAttention(worker.cache, model.shape.num_q_heads, PROMPT_BUCKETS[-1]),
        model.shape.hidden_size,
        model.shape.dtype,
        torch.device("cpu"),
        worker.cache.block_size,
        row_width=worker.row_width,
    )
    prompts.forward = uncounted(counter, prompts.forward)
    worker.prompt_graphs = prompts
    model.enable_cuda_graphs(DeferredCountedGraphs(counter))


def measure(model, graphed: bool, rows: int, steps: int) -> dict:
    config = EngineConfig(num_kv_blocks=512, realtime_admission=False, max_num_seqs=8)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    counter = StageCounter()
    if graphed:
        graph_stand_ins(core, counter)
    worker = core.worker
    m = worker.model
    m.forward = staged(counter, "talker", m.forward)
    m.candidates_with_options = staged(counter, "head+sampling", m.candidates_with_options)
    worker.sampler.sample_on_device = staged(
        counter, "head+sampling", worker.sampler.sample_on_device
    )
    worker._depth_stage = staged(counter, "depth", worker._depth_stage)
    worker._step_inputs = staged(counter, "inputs", worker._step_inputs)
    m.detokenize = staged(counter, "codec", m.detokenize)
    # The model's defaults (top-k 50, no nucleus), which the depth graphs take.
    sampling = SamplingParams(**model.facts.sampling_defaults, max_tokens=64, min_tokens=64, seed=1)
    for _ in range(rows):
        core.add_request(SpeechRequest(TEXT, sampling=sampling))
    per_step: list[dict] = []
    prefill: dict | None = None
    codec_jobs: list[dict] = []
    for i in range(steps):
        counter.by_stage.clear()
        with counter:
            core.step()
        stages = {k: sum(v.values()) for k, v in counter.by_stage.items()}
        reads = sum(v["_local_scalar_dense"] + v["item"] for v in counter.by_stage.values())
        record = {"stages": stages, "device_reads": reads}
        if "codec" in stages:
            codec_jobs.append(
                {"ops": stages.pop("codec"), "top": dict(counter.by_stage["codec"].most_common(6))}
            )
        if i == 0:
            prefill = record
        else:
            per_step.append(record)
    decode = per_step[len(per_step) // 2]
    return {
        "prefill_step": prefill,
        "decode_step": decode,
        "decode_step_total": sum(decode["stages"].values()),
        "codec_jobs": codec_jobs[:3],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depth", choices=["tiny", "real"], default="real")
    ap.add_argument("--rows", type=int, default=2, help="requests decoded together")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    with tempfile.TemporaryDirectory() as tmp:
        model = build(args.depth, Path(tmp) / "model")
        report = {
            name: measure(model, graphed, args.rows, args.steps)
            for name, graphed in (("eager", False), ("graphed", True))
        }
    print(json.dumps({"depth": args.depth, "rows": args.rows, **report}, indent=1))


if __name__ == "__main__":
    main()
