"""Runs the model stages for what the scheduler chose: LLM forward + sampling, detokenizer."""

from __future__ import annotations

import itertools
import logging

import torch

from engine.attention import AttentionBackend, KVCache, SdpaBackend, StepLayout
from engine.code_sampling import DeviceCodeSampler
from engine.detok_pipeline import DetokJob
from engine.outputs import ScheduledChunk
from engine.request import Request, Token
from engine.sampling import Sampler, SamplingRow
from models.base import SpeechModel, StreamState
from models.device_util import upload

log = logging.getLogger("voxgate.worker")


def make_attention_backend(name: str, cache: KVCache, num_q_heads: int) -> AttentionBackend:
    if name == "sdpa":
        return SdpaBackend(cache)
    if name == "flashinfer":
        from engine.flashinfer_backend import FlashInferBackend  # optional GPU extra

        return FlashInferBackend(cache, num_q_heads)
    raise ValueError(f"unknown attention backend {name!r}")


class Worker:
    def __init__(
        self, model: SpeechModel, cache: KVCache, attention: str, device: torch.device
    ) -> None:
        self.model = model
        self.cache = cache
        self.device = device
        self.attn = make_attention_backend(attention, cache, model.shape.num_q_heads)
        self.graphs = None  # DecodeGraphs once capture_graphs() ran
        self.repetition_aware = model.facts.repetition_aware
        self.sampler = Sampler(
            model.shape.vocab_size, device, repetition_aware=self.repetition_aware
        )
        self._streams: dict[str, StreamState] = {}
        self.row_width = model.facts.row_width  # > 0: tokens are rows, with a depth stage

    def capture_graphs(self, hidden_size: int, block_size: int, max_batch: int) -> None:
        from engine.cuda_graphs import DEFAULT_BUCKETS, DecodeGraphs

        if self.row_width:  # DecodeGraphs' static inputs are one id per request
            log.info("decode graphs not captured: %s steps rows of tokens", self.model.facts.name)
            return

        buckets = tuple(b for b in DEFAULT_BUCKETS if b < max_batch) + (max_batch,)
        self.graphs = DecodeGraphs(
            self.model.forward, self.attn, hidden_size, self.model.shape.dtype, self.device,
            block_size, buckets,
        )
        self.graphs.capture()

    # --- per-request state -----------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        history = request.prompt_ids
        if self.row_width:  # the sampler draws (and penalises) column 0 of each row
            # (ids outside its vocabulary, such as Moshi's initial text token, are not drawable)
            vocab = self.model.shape.vocab_size
            history = [row[0] for row in history if 0 <= row[0] < vocab]
        self.sampler.add_request(request.request_id, request.sampling, history)
        self._streams[request.request_id] = self.model.stream_state_for(request.extras)

    def stream_state(self, request_id: str) -> StreamState:
        return self._streams[request_id]

    def drop_request(self, request_id: str) -> None:
        self.sampler.drop_request(request_id)
        self._streams.pop(request_id, None)

    # --- LLM ----------------------------------------------------------------------------------------
    @torch.inference_mode()
    def run_llm(self, chunks: list[ScheduledChunk], block_size: int) -> list[Token]:
        """One forward over every scheduled token; returns a token for each chunk that samples
        (in chunk order)."""
        ids: list[Token] = []
        positions: list[int] = []
        slots: list[int] = []
        for c in chunks:
            table = c.request.block_table
            ids.extend(c.request.token_slice(c.start, c.start + c.num_tokens))
            for pos in range(c.start, c.start + c.num_tokens):
                positions.append(pos)
                slots.append(table[pos // block_size] * block_size + pos % block_size)
        layout = StepLayout(
            query_lens=[c.num_tokens for c in chunks],
            context_lens=[c.start + c.num_tokens for c in chunks],
            slot_mapping=slots,
            block_tables=[c.request.block_table for c in chunks],
            block_size=block_size,
        )
        decode_only = len(ids) == len(chunks)
        if self.graphs is not None and decode_only and len(ids) <= self.graphs.max_batch:
            hidden = self.graphs.run(ids, positions, layout)
        else:
            self.attn.prepare(layout)
            input_ids = upload(ids, torch.long, self.device)
            pos_t = upload(positions, torch.long, self.device)
            hidden = self.model.forward(input_ids, pos_t, self.attn)
        sampling = [i for i, c in enumerate(chunks) if c.samples]
        if not sampling:
            return []
        ends = list(itertools.accumulate(c.num_tokens for c in chunks))
        last_rows = upload([ends[i] - 1 for i in sampling], torch.long, self.device)
        reqs = [chunks[i].request for i in sampling]
        cands = self.model.candidate_logits(
            hidden[last_rows],
            [len(r.output_ids) for r in reqs],
            [len(r.output_ids) >= r.sampling.min_tokens for r in reqs],
        )
        window = self.repetition_aware.window if self.repetition_aware else 0
        rows = [
            SamplingRow(
                r.request_id, r.sampling, len(r.output_ids),
                tuple(r.output_ids[-window:]) if window else (),
            )
            for r in reqs
        ]
        if not self.row_width:
            return self.sampler.sample(cands, rows)
        # Column 0 from the engine's sampler, the rest from the model's depth stage, all on the
        # device: one host synchronisation for the whole step, as for single tokens.
        first = self.sampler.sample_on_device(cands, rows)
        seeds = [self.sampler.seed_of(r.request_id) for r in reqs]
        sample_codes = DeviceCodeSampler(rows, seeds, self.device)
        frames = self.model.depth_stage(hidden[last_rows], first, sample_codes)
        return [tuple(frame) for frame in frames.tolist()]

    # --- detokenizer ----------------------------------------------------------------------------
    def detok_job(self, requests: list[Request], stop_ids: tuple[int, ...]) -> DetokJob:
        """Snapshot the tokens each request has produced since its last chunk."""
        new_tokens = []
        for r in requests:
            fresh = r.output_ids[r.num_detokenized :]
            r.num_detokenized = len(r.output_ids)
            r.detok_in_flight = True
            new_tokens.append([t for t in fresh if t not in stop_ids])
        states = [self._streams[r.request_id] for r in requests]
        return DetokJob(requests, states, new_tokens, [r.finished for r in requests])
