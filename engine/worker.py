"""Runs the LLM's stages for what the scheduler chose (`launch`: forward, candidate logits,
sampling, tokens left on the device; `resolve`: the tokens on the host), and snapshots the
detokenizer's jobs (`detok_job`; engine/detok_pipeline.py runs them)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from engine.attention import AttentionBackend, KVCache, SdpaBackend, StepLayout
from engine.code_sampling import CodeSamplingInputs, CodeSamplingPlan, DeviceCodeSampler
from engine.detok_job import DetokJob
from engine.outputs import ScheduledChunk
from engine.request import Request, Token
from engine.sampling import Sampler, SamplingRow
from models.base import SpeechModel, StreamState
from models.device_util import upload


@dataclass
class LaunchedStep:
    """One LLM step queued on the device: the requests that sample (in chunk order) and their
    tokens, on the device and on their way to the host."""

    requests: list[Request]
    tokens: torch.Tensor | None  # [N] (or [N, W] rows) on the device; None: nothing sampled
    host: torch.Tensor | None = None  # the same in (pinned) host memory once `copied`
    copied: torch.cuda.Event | None = None  # None on the CPU, where host is tokens
    row_of: dict[str, int] = field(init=False)  # request id → row of `tokens`
    placeholder: Token = 0  # what sits in the host-side inputs where a device token goes
    prompts_graphed: bool = False  # its fresh prompts replayed the prompt graphs

    def __post_init__(self) -> None:
        self.row_of = {r.request_id: i for i, r in enumerate(self.requests)}
        if self.tokens is not None and self.tokens.dim() == 2:
            self.placeholder = (0,) * self.tokens.shape[1]


def sampling_rows_of(chunks: list[ScheduledChunk]) -> list[int]:
    """The row of a step's forward output each sampling chunk samples from: its last token."""
    ends = itertools.accumulate(c.num_tokens for c in chunks)
    return [end - 1 for end, c in zip(ends, chunks, strict=True) if c.samples]


def make_attention_backend(
    name: str, cache: KVCache, num_q_heads: int, max_batch: int, max_context: int
) -> AttentionBackend:
    if name == "sdpa":
        return SdpaBackend(cache)
    if name == "flashinfer":
        from engine.flashinfer_backend import FlashInferBackend  # optional GPU extra

        return FlashInferBackend(cache, num_q_heads, max_batch=max_batch, max_context=max_context)
    raise ValueError(f"unknown attention backend {name!r}")


class Worker:
    def __init__(
        self,
        model: SpeechModel,
        cache: KVCache,
        attention: str,
        device: torch.device,
        max_batch: int = 512,
    ) -> None:
        self.model = model
        self.cache = cache
        self.device = device
        # The model's may_stop hook, or None when it keeps the default (True): then no Python
        # call per sampling row per step.
        overridden = type(model).may_stop is not SpeechModel.may_stop
        self._may_stop = model.may_stop if overridden else None
        self.attn = make_attention_backend(
            attention, cache, model.shape.num_q_heads, max_batch, model.facts.max_context
        )
        # The LLM's CUDA graphs, each set once engine/llm_graphs.py captured it (else eager).
        self.graphs = None  # DecodeGraphs
        self.sampling_graphs = None  # SamplingGraphs
        self.prompt_graphs = None  # PromptGraphs
        self.depth_graphs = None  # DepthGraphs
        self.repetition_aware = model.facts.repetition_aware
        self.sampler = Sampler(
            model.shape.vocab_size, device, repetition_aware=self.repetition_aware
        )
        self._streams: dict[str, StreamState] = {}
        # Recurrent layers' per-request state (models/recurrent_state.py), or None.
        self.recurrent = model.recurrent_state
        self.row_width = model.facts.row_width  # > 0: tokens are rows, with a depth stage
        self._staged: torch.cuda.Event | None = None  # the last plan's host → device copy

    # --- per-request state -----------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        history = request.prompt_ids
        vocab = self.model.shape.vocab_size
        if self.row_width:  # the sampler draws (and penalises) column 0 of each row
            # (ids outside its vocabulary, such as Moshi's initial text token, are not drawable)
            history = [row[0] for row in history if 0 <= row[0] < vocab]
        elif any(t >= vocab for t in history):  # type: ignore[operator]
            # Prompt ids past the vocabulary stand for input embeddings (Step-Audio 2's audio
            # slots): never drawn, so not penalised either.
            history = [t for t in history if t < vocab]  # type: ignore[operator]
        self.sampler.add_request(request.request_id, request.sampling, history)
        self._streams[request.request_id] = self.model.stream_state_for(request.extras)

    def stream_state(self, request_id: str) -> StreamState:
        return self._streams[request_id]

    def drop_request(self, request_id: str) -> None:
        """The request has ended (finished and flushed, cancelled, failed, or a session
        closed); a step launched before may still be running on the device."""
        self.sampler.drop_request(request_id)
        self._streams.pop(request_id, None)
        if self.recurrent is not None:
            self.recurrent.free(request_id)
        self.attn.release(request_id)

    # --- LLM ----------------------------------------------------------------------------------------
    def run_llm(self, chunks: list[ScheduledChunk], block_size: int) -> list[Token]:
        """One forward over every scheduled token; returns a token for each chunk that samples
        (in chunk order). The synchronous step: launch, then wait for the tokens."""
        return self.resolve(self.launch(chunks, block_size))

    @torch.inference_mode()
    def launch(
        self,
        chunks: list[ScheduledChunk],
        block_size: int,
        previous: LaunchedStep | None = None,
    ) -> LaunchedStep:
        """Queue one step's forward over every scheduled token and the sampling of each chunk
        that samples, without waiting for the device. A request whose newest token is still in
        flight (sampled by `previous`, not resolved) reads it from `previous.tokens` on the
        device. Call before updating the requests' bookkeeping for this step.

        A step of decodes and fresh prompts (prefill chunks from a request's first token) runs
        entirely from graphs where prompt graphs were captured (`_launch_graphed`); any other
        step is one forward, replayed from the decode graph when it is all decodes, else eager."""
        step = self._launch_graphed(chunks, block_size, previous)
        return step if step is not None else self._launch_one_forward(chunks, block_size, previous)

    def _launch_graphed(
        self,
        chunks: list[ScheduledChunk],
        block_size: int,
        previous: LaunchedStep | None,
    ) -> LaunchedStep | None:
        """A step mixing decodes with fresh prompts from graphs: the decodes' graph, then the
        prompts' graph (engine/prompt_graphs.py), whose sampling rows' hidden states are then
        copied into the decode graph's buffer after the decodes' own, and the sampling of all
        of them: one sampling graph where the model has them, else the eager head and sampler
        (and a row model's depth stage, from its own graph where it fits). An eager forward over
        the same step launches every layer's kernels one by one from Python: on the H200 such a
        turn took ~30 ms against 7-10 ms for a decode turn, one per arrival
        (docs/benchmark-history.md).
        None: the step does not qualify (no prompt graphs, a prompt continuing earlier tokens,
        too many tokens or rows, a sampling the sampling graph does not take)."""
        prompt_graphs, sampling_graphs = self.prompt_graphs, self.sampling_graphs
        if prompt_graphs is None or self.graphs is None:
            return None
        decodes = [c for c in chunks if c.num_tokens == 1 and c.samples]
        prompts = [c for c in chunks if not (c.num_tokens == 1 and c.samples)]
        if not prompts or any(c.start != 0 for c in prompts):
            return None
        sampling = decodes + [c for c in prompts if c.samples]
        if not sampling or len(sampling) > self.graphs.max_batch:
            return None
        if sum(c.num_tokens for c in prompts) > prompt_graphs.max_batch:
            return None
        reqs = [c.request for c in sampling]
        rows, allow_stop = self._sampling_rows(reqs)
        if sampling_graphs is not None and not sampling_graphs.fits(len(rows), rows):
            return None
        if decodes:
            ids, positions, layout = self._step_inputs(decodes, block_size, previous)
            self.graphs.run(ids, positions, layout, prepare=self._prepare)
        ids, positions, layout = self._step_inputs(prompts, block_size, None)
        hidden = prompt_graphs.run(ids, positions, layout)
        last_rows = sampling_rows_of(prompts)
        first = len(decodes)
        self.graphs.hidden_buffer[first : first + len(last_rows)].copy_(
            hidden.index_select(0, upload(last_rows, torch.long, self.device))
        )
        if sampling_graphs is not None:
            tokens = sampling_graphs.run(rows, allow_stop)
        else:
            hidden = self.graphs.hidden_buffer[: len(sampling)]
            tokens = self._sample_eagerly(hidden, reqs, rows, allow_stop)
        return LaunchedStep(reqs, tokens, *self._copy_to_host(tokens), prompts_graphed=True)

    def _step_inputs(
        self,
        chunks: list[ScheduledChunk],
        block_size: int,
        previous: LaunchedStep | None,
    ) -> tuple[torch.Tensor, list[int], StepLayout]:
        """The forward's input ids on the device, each token's position, and the step's layout
        in the KV cache. Ids still in flight from `previous` are gathered on the device."""
        ids: list[Token] = []
        positions: list[int] = []
        slots: list[int] = []
        take_at: list[int] = []  # rows of `ids` whose token is on the device ...
        take_from: list[int] = []  # ... at these rows of previous.tokens
        # One pass over a few hundred rows a step: the common row, a decode of the newest token
        # still in flight, touches no token list and no range (half the host time of the
        # general loop at 272 rows).
        in_flight = previous.row_of if previous is not None else {}
        for c in chunks:
            request, start = c.request, c.start
            end = start + c.num_tokens
            resolved = len(request.prompt_ids) + len(request.output_ids)
            if start < resolved:
                ids.extend(request.token_slice(start, min(end, resolved)))
            if end > resolved:  # only a decode of the newest token can get ahead of the host
                row = in_flight.get(request.request_id)
                if (
                    row is None
                    or previous is None
                    or previous.requests[row] is not request
                    or start != resolved
                    or end != resolved + 1
                ):
                    raise RuntimeError(
                        f"request {request.request_id}: input token {resolved} is neither "
                        "resolved nor in flight from the previous step"
                    )
                take_at.append(len(ids))
                take_from.append(row)
                ids.append(previous.placeholder)
            table = request.block_table
            if end == start + 1:
                positions.append(start)
                slots.append(table[start // block_size] * block_size + start % block_size)
                continue
            for pos in range(start, end):
                positions.append(pos)
                slots.append(table[pos // block_size] * block_size + pos % block_size)
        input_ids = upload(ids, torch.long, self.device)  # [T] or [T, W]
        if take_at:  # gathered on the device: no wait for the previous step's tokens
            assert previous is not None and previous.tokens is not None
            taken = previous.tokens.index_select(0, upload(take_from, torch.long, self.device))
            input_ids.index_copy_(0, upload(take_at, torch.long, self.device), taken)
        layout = StepLayout(
            query_lens=[c.num_tokens for c in chunks],
            context_lens=[c.start + c.num_tokens for c in chunks],
            slot_mapping=slots,
            block_tables=[c.request.block_table for c in chunks],
            block_size=block_size,
            owners=[c.request.request_id for c in chunks],
        )
        return input_ids, positions, layout

    def _sampling_rows(self, reqs: list[Request]) -> tuple[list[SamplingRow], list[bool]]:
        """Each sampling request's row for the sampler, and whether it may stop here."""
        allow_stop = [
            r.num_generated >= r.sampling.min_tokens
            and (self._may_stop is None or self._may_stop(r.prompt_ids, r.output_ids))
            # Streamed text: never end before the final text is read.
            and (r.text_feed is None or r.text_feed.drained)
            for r in reqs
        ]
        # Positions count the tokens still in flight (num_generated), never only resolved ones.
        rows = [SamplingRow(r.request_id, r.sampling, r.num_generated) for r in reqs]
        return rows, allow_stop

    def _launch_one_forward(
        self,
        chunks: list[ScheduledChunk],
        block_size: int,
        previous: LaunchedStep | None,
    ) -> LaunchedStep:
        """The step as one forward: the decode graph's replay when it is all decodes that fit,
        else eagerly; then the sampling graph when it takes the step, else the eager head and
        sampler."""
        input_ids, positions, layout = self._step_inputs(chunks, block_size, previous)
        if self.recurrent is not None:  # which token rows read and write which request's state
            self.recurrent.begin_step(
                [c.request.request_id for c in chunks],
                [c.start for c in chunks],
                [c.num_tokens for c in chunks],
            )
        decode_only = len(positions) == len(chunks)
        graphed = (
            self.graphs is not None and decode_only and len(positions) <= self.graphs.max_batch
        )
        if graphed:
            hidden = self.graphs.run(input_ids, positions, layout, prepare=self._prepare)
        else:
            self._prepare(layout)
            pos_t = upload(positions, torch.long, self.device)
            hidden = self.model.forward(input_ids, pos_t, self.attn)
        sampling = [i for i, c in enumerate(chunks) if c.samples]
        reqs = [chunks[i].request for i in sampling]
        if not sampling:
            return LaunchedStep([], None)
        rows, allow_stop = self._sampling_rows(reqs)
        sg = self.sampling_graphs
        if graphed and len(sampling) == len(chunks) and sg is not None and sg.fits(len(rows), rows):
            # The decode graph left the rows' hidden states where this graph reads them.
            tokens = sg.run(rows, allow_stop)
            return LaunchedStep(reqs, tokens, *self._copy_to_host(tokens))
        last_rows = upload(sampling_rows_of(chunks), torch.long, self.device)
        tokens = self._sample_eagerly(hidden[last_rows], reqs, rows, allow_stop)
        return LaunchedStep(reqs, tokens, *self._copy_to_host(tokens))

    def _sample_eagerly(
        self,
        hidden: torch.Tensor,
        reqs: list[Request],
        rows: list[SamplingRow],
        allow_stop: list[bool],
    ) -> torch.Tensor:
        """The sampling rows' tokens from their hidden states [N, H]: the model's head and the
        engine's sampler, launched op by op, then a row model's depth stage. [N] or [N, W]."""
        cands = self.model.candidates_with_options(
            hidden,
            [r.num_generated for r in reqs],
            allow_stop,
            [r.model_options for r in reqs],
        )
        tokens = self.sampler.sample_on_device(cands, rows)  # [N]
        if self.row_width:
            tokens = self._depth_stage(hidden, tokens, reqs, rows)  # [N, W]
            self._feed_text(tokens, reqs)
        return tokens

    def _depth_stage(
        self,
        hidden: torch.Tensor,
        first: torch.Tensor,
        reqs: list[Request],
        rows: list[SamplingRow],
    ) -> torch.Tensor:
        """Column 0 from the engine's sampler, the rest from the model's depth stage, all on
        the device: one host synchronisation for the whole step, as for single tokens."""
        seeds = [self.sampler.seed_of(r.request_id) for r in reqs]
        plan = CodeSamplingPlan.of(rows)
        inputs = CodeSamplingInputs.upload(rows, seeds, self.device) if plan.any_random else None
        if self.depth_graphs is not None and self.depth_graphs.fits(len(reqs), plan):
            # A copy: the replay's output buffer is overwritten by the next step's replay.
            return self.depth_graphs.run(hidden, first, inputs).clone()
        return self.model.depth_stage(hidden, first, DeviceCodeSampler(inputs, plan))

    def _feed_text(self, tokens: torch.Tensor, reqs: list[Request]) -> None:
        """Streamed text: each such request's next text id goes into its row's text column
        (models/text_feed.py), so that the row, fed back as the next input, carries it."""
        fed = [(i, r.text_feed) for i, r in enumerate(reqs) if r.text_feed is not None]
        if not fed:
            return
        rows = upload([i for i, _ in fed], torch.long, self.device)
        columns = upload([f.column for _, f in fed], torch.long, self.device)
        ids = upload([f.take() for _, f in fed], torch.long, self.device)
        tokens.index_put_((rows, columns), ids)

    def _prepare(self, layout: StepLayout, graph_batch: int | None = None) -> None:
        """attn.prepare, fenced: FlashInfer's plan() stages its work arrays in a page-locked
        host buffer and copies them to the device asynchronously. With async scheduling the
        next plan may come before the device has run the previous step's copy (it is queued
        behind the step before), so wait for that copy (not for the step) first."""
        if self._staged is not None:
            self._staged.synchronize()
        self.attn.prepare(layout, graph_batch=graph_batch)
        if self.device.type == "cuda":
            self._staged = torch.cuda.Event()
            self._staged.record()

    def _copy_to_host(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """Start the copy of a step's tokens to the host; on the CPU there is nothing to do."""
        if self.device.type != "cuda":
            return tokens, None
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)  # into pinned memory: truly asynchronous
        copied = torch.cuda.Event()
        copied.record()
        return host, copied

    def resolve(self, step: LaunchedStep) -> list[Token]:
        """The launched step's tokens on the host (waits for the device to get there)."""
        if step.tokens is None:
            return []
        if step.copied is not None:
            step.copied.synchronize()
        values = step.host.tolist()
        return [tuple(v) for v in values] if self.row_width else values

    # --- detokenizer ----------------------------------------------------------------------------
    def detok_job(self, requests: list[Request], stop_ids: tuple[int, ...]) -> DetokJob:
        """Snapshot the tokens each request has produced since its last chunk."""
        new_tokens = []
        for r in requests:
            if r.detok_in_flight:  # its stream state belongs to a job in flight (another thread)
                raise RuntimeError(
                    f"request {r.request_id} already has a detokenizer job in flight"
                )
            fresh = r.hand_to_codec()
            new_tokens.append([t for t in fresh if t not in stop_ids])
        states = [self._streams[r.request_id] for r in requests]
        return DetokJob(requests, states, new_tokens, [r.finished for r in requests])
