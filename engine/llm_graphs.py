"""Capturing the LLM step's CUDA graphs into a Worker, once, when the backbone is built.

Four sets, each optional, each replayed by the worker where a step fits it:
- decode graphs (engine/cuda_graphs.py): the backbone's forward over a batch of single-token
  decodes, per batch bucket;
- sampling graphs (engine/sampling_graphs.py): those decodes' head and sampler, for models
  whose candidates need no host lists nor request options;
- prompt graphs (engine/prompt_graphs.py): the forward over fresh prompts, per token bucket,
  so a step of decodes and arrivals replays graphs only;
- depth graphs (engine/depth_graphs.py): a row model's depth stage.
A capture that fails stops the server with the flag that skips it, except the prompt graphs,
an optimisation without which the server still serves.
"""

from __future__ import annotations

import logging

from engine.config import EngineConfig
from engine.cuda_graphs import DEFAULT_BUCKETS
from engine.worker import Worker

log = logging.getLogger("voxgate.worker")

# Decode steps of up to this many rows replay a captured graph (larger ones run eagerly).
MAX_GRAPH_BATCH = 512


def capture_llm_graphs(worker: Worker, config: EngineConfig) -> None:
    """Every graph set the model, its attention backend and the config allow (CUDA only)."""
    largest = min(config.max_num_seqs, MAX_GRAPH_BATCH)
    model = worker.model
    # Recurrent state moves between slots each step (models/recurrent_state.py): such a
    # model's decode step runs eagerly.
    if model.recurrent_state is not None:
        log.info("decode graphs: not for %s (recurrent layers)", model.facts.name)
    elif worker.attn.supports_graphs:
        capture_decode_graphs(worker, config.block_size, largest)
    if config.sampling_graphs:
        capture_sampling_graphs(worker)
    if config.prompt_graphs:
        capture_prompt_graphs(worker, config.block_size)
    capture_depth_graphs(worker, largest, config.max_num_seqs)


def buckets_up_to(largest: int) -> tuple[int, ...]:
    """The batch buckets a server captures when its steps carry at most `largest` rows (its
    max_num_seqs, capped by the graphs' own limit): the default buckets below it, and itself."""
    return tuple(b for b in DEFAULT_BUCKETS if b < largest) + (largest,)


def capture_decode_graphs(worker: Worker, block_size: int, max_batch: int) -> None:
    from engine.cuda_graphs import DecodeGraphs

    model = worker.model
    worker.graphs = DecodeGraphs(
        model.forward,
        worker.attn,
        model.shape.hidden_size,
        model.shape.dtype,
        worker.device,
        block_size,
        buckets_up_to(max_batch),
        row_width=worker.row_width,
    )
    try:
        worker.graphs.capture()
    except RuntimeError as exc:
        raise RuntimeError(
            f"capturing {model.facts.name}'s decode step in CUDA graphs failed ({exc}); "
            "start the server with --eager to run it without graphs"
        ) from exc


def capture_sampling_graphs(worker: Worker) -> None:
    """Graphs of the decode step's head and sampling per decode bucket, for models whose
    candidates need no host lists (nor per-request options, which the captured head does not
    take)."""
    from engine.sampling_graphs import SamplingGraphs

    model = worker.model
    capturable = model.graphable_candidates() and not model.facts.request_options
    if worker.graphs is None or worker.row_width or not capturable:
        if worker.graphs is not None:  # say so: the flag is on, but this model samples eagerly
            log.info(
                "sampling graphs: not for %s (its candidates need host lists or request "
                "options, or its tokens are rows); its head and sampler run eagerly",
                model.facts.name,
            )
        return
    worker.sampling_graphs = SamplingGraphs(
        model.device_candidates,
        worker.sampler,
        worker.graphs.hidden_buffer,
        worker.graphs.buckets,
        worker.device,
    )
    try:
        worker.sampling_graphs.capture()
    except RuntimeError as exc:
        raise RuntimeError(
            f"capturing {model.facts.name}'s head and sampling in CUDA graphs failed "
            f"({exc}); start the server with --no-sampling-graphs (or --eager)"
        ) from exc


def capture_prompt_graphs(worker: Worker, block_size: int) -> None:
    """Graphs of a fresh prompt's forward per token bucket, so a step mixing decodes with
    arrivals replays the forwards from graphs (Worker._launch_graphed). For models whose
    decodes replay with their sampling (the prompts' sampling rows join that graph), and for
    models that say their prompts' forward replays apart from their eager sampling
    (SpeechModel.prompt_graphs_sample_eagerly: Qwen3-TTS, whose prefill otherwise launched
    its 28 layers op by op, ~2,000 launches an arrival). Not for models with recurrent state
    (its per-step bookkeeping spans the step)."""
    from engine.prompt_graphs import PROMPT_BUCKETS, PromptAttention, PromptGraphs

    model = worker.model
    sampled_apart = worker.graphs is not None and model.prompt_graphs_sample_eagerly()
    if (worker.sampling_graphs is None and not sampled_apart) or worker.recurrent is not None:
        log.info(
            "prompt graphs: not for %s (its decodes sample eagerly, or it has recurrent "
            "layers); its prompts run eagerly",
            model.facts.name,
        )
        return
    shape = model.shape
    attn = PromptAttention(worker.cache, shape.num_q_heads, PROMPT_BUCKETS[-1])
    graphs = PromptGraphs(
        model.forward,
        attn,
        shape.hidden_size,
        shape.dtype,
        worker.device,
        block_size,
        row_width=worker.row_width,
    )
    try:
        graphs.capture()
    except RuntimeError as exc:  # an optimisation: the server still serves without it
        first_line = (str(exc).strip().splitlines() or [""])[0][:300]
        log.warning(
            "capturing %s's prompt forward in CUDA graphs failed (%s); prompts run eagerly, "
            "which costs each arrival's step more (--no-prompt-graphs skips the attempt)",
            model.facts.name,
            first_line,
        )
        return
    worker.prompt_graphs = graphs


def capture_depth_graphs(worker: Worker, max_batch: int, max_num_seqs: int) -> None:
    """Graphs of a row model's depth stage, whatever the attention backend. Only when no step
    can exceed the largest bucket: an eager step larger than every warm-up would regrow the
    stage's own buffers under the captured graphs."""
    from engine.depth_graphs import DepthGraphs

    model = worker.model
    if not worker.row_width:
        return
    if max_num_seqs > max_batch:
        log.info(
            "depth-stage graphs not captured: max_num_seqs %d exceeds the largest bucket %d",
            max_num_seqs,
            max_batch,
        )
        return
    default_k = int(model.facts.sampling_defaults.get("top_k", 0))
    worker.depth_graphs = DepthGraphs(
        model.depth_stage,
        model.shape.hidden_size,
        model.shape.dtype,
        worker.device,
        buckets_up_to(max_batch),
        max_k=max(256, default_k),
    )
    try:
        worker.depth_graphs.capture()
    except RuntimeError as exc:
        raise RuntimeError(
            f"capturing {model.facts.name}'s depth stage in CUDA graphs failed ({exc}); "
            "start the server with --eager to run it without graphs"
        ) from exc
