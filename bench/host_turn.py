"""The engine loop's own host time a turn, on any machine: Orpheus' throughput burst
(`bench/engine_load.py --burst N`) with the device's work stood in for by near-free stand-ins,
so what is left of each turn is the engine's Python (scheduling, step inputs, the tokens'
bookkeeping, the codec's hand-offs), as on the GPU machine's host.

    python bench/host_turn.py --burst 512 [--cprofile-at 2 --profile-steps 100]

On an H200 the burst at 512 rows is bound by the device (~11.9 ms of kernels a 12.3-ms turn),
with ~10.8 ms of the host's Python a turn in its shadow: any cut in the device's work meets
the host's time next. This measures that time where no GPU is lent. Stand-ins: the LLM's
forward returns zeros (no attention, no GEMM), sampling picks one valid audio code a row (the
code position's first, so every request runs to its `max_tokens` as in the burst), and SNAC's
decoder call returns silence of the call's length, and the CPU attention plans nothing (its
per-request gathers are no GPU path's work); the engine, its scheduler, its request
bookkeeping and the codec's job plumbing run as served. On the CPU the worker takes the eager
path (no graphs) and the codec runs inline, so `launch_ms` is the step's inputs and sampling
rows (a GPU adds the attention's plan and the graphs' replays) and `codec_submit_ms` includes
the codec's own Python (on a GPU its thread's, which shares the GIL). tiny-orpheus shares
Orpheus' token layout, chunking and codec plan, so its turns are Orpheus' turns less the
compute.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from engine_load import engine_core, run_burst

from engine.worker import Worker
from models.orpheus import tokens as T


def stand_in_device(core, model) -> None:
    """Replace the compute of the LLM's forward, its sampling and SNAC's decoder calls with
    near-free stand-ins of the same shapes; everything the host does around them stays."""
    hidden_size = model.shape.hidden_size

    def forward(input_ids, positions, attn):
        return torch.zeros(len(positions), hidden_size)

    def sample(self: Worker, hidden, reqs, rows, allow_stop):
        # The first code of each row's code position: a valid audio token, never the stop.
        steps = [r.num_generated for r in reqs]
        return torch.tensor(
            [T.AUDIO_BASE + (s % T.CODES_PER_FRAME) * T.CODEBOOK_SIZE for s in steps]
        )

    model.forward = forward
    # The CPU attention's plan (its gathers and uploads a request) is no GPU path's host work:
    # a GPU's attention plans on the device (XQA) or in one FlashInfer call.
    core.worker.attn.prepare = lambda layout, graph_batch=None: None
    core.worker._sample_eagerly = sample.__get__(core.worker)
    decoder = model.detok.decoder
    hop = decoder.samples_per_latent

    def decode_frames(frames, state, position, end, seed):
        latent_steps = frames.shape[1] * 4  # SNAC's 4 latent steps a frame
        return torch.zeros(frames.shape[0], latent_steps * hop), state

    decoder.decode_frames = decode_frames


def host_engine(args: argparse.Namespace):
    """The CPU engine `voxgate serve --model MODEL SERVER_ARGS…` runs for a burst
    (engine_load's), warmed up, then with its device's work stood in for."""
    settings = {**vars(args), "device": "cpu", "random_weights": False, "burst": True}
    core, model = engine_core(argparse.Namespace(**settings))
    stand_in_device(core, model)
    return core, model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-orpheus", help="an Orpheus preset")
    ap.add_argument("--burst", type=int, default=512)
    ap.add_argument("--workload", default=str(Path(__file__).with_name("tts_workload.jsonl")))
    ap.add_argument("--cprofile-at", type=float, default=0.0, help="seconds in (0: none)")
    ap.add_argument("--profile-steps", type=int, default=100)
    ap.add_argument(
        "--listeners",
        action="store_true",
        help="the burst's requests as real-time streams (default: without a listener, as "
        "voxgate bench's throughput)",
    )
    ap.add_argument(
        "--server-arg",
        action="append",
        default=["--max-num-seqs=512"],
        metavar="ARG",
        help="a `voxgate serve` option the engine runs with (repeatable)",
    )
    args = ap.parse_args()
    args.profile_at, args.trace = 0.0, ""  # run_burst's device profile: no device here
    core, model = host_engine(args)
    run_burst(core, model, args, args.listeners)
    core.close()


if __name__ == "__main__":
    main()
