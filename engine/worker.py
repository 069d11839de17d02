"""Runs the model stages for what the scheduler chose: LLM forward + sampling, detokenizer."""

from __future__ import annotations

import logging

import numpy as np
import torch

from engine.attention import AttentionBackend, KVCache, SdpaBackend, StepLayout
from engine.outputs import ScheduledChunk
from engine.request import Request
from engine.sampling import SamplingBatch, sample
from models.base import SpeechModel, StreamState

log = logging.getLogger("voxgate.worker")


def make_attention_backend(name: str, cache: KVCache) -> AttentionBackend:
    if name == "sdpa":
        return SdpaBackend(cache)
    if name == "flashinfer":
        from engine.flashinfer_backend import FlashInferBackend  # optional GPU extra

        return FlashInferBackend(cache)
    raise ValueError(f"unknown attention backend {name!r}")


class Worker:
    def __init__(
        self, model: SpeechModel, cache: KVCache, attention: str, device: torch.device
    ) -> None:
        self.model = model
        self.cache = cache
        self.device = device
        self.attn = make_attention_backend(attention, cache)
        self._generators: dict[str, torch.Generator] = {}
        self._streams: dict[str, StreamState] = {}
        self._default_gen = torch.Generator(device=device)
        self._default_gen.seed()

    # --- per-request state -----------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        if request.sampling.seed is not None:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(request.sampling.seed)
            self._generators[request.request_id] = gen
        self._streams[request.request_id] = self.model.new_stream_state()

    def drop_request(self, request_id: str) -> None:
        self._generators.pop(request_id, None)
        self._streams.pop(request_id, None)

    # --- LLM ----------------------------------------------------------------------------------------
    @torch.inference_mode()
    def run_llm(self, chunks: list[ScheduledChunk], block_size: int) -> list[int]:
        """One forward over every scheduled token; returns a token for each chunk that samples
        (in chunk order)."""
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        for c in chunks:
            seq = c.request.all_ids()
            table = c.request.block_table
            ids.extend(seq[c.start : c.start + c.num_tokens])
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
        self.attn.prepare(layout)
        input_ids = torch.tensor(ids, dtype=torch.long, device=self.device)
        pos_t = torch.tensor(positions, dtype=torch.long, device=self.device)
        hidden = self.model.forward(input_ids, pos_t, self.attn)
        sampling = [i for i, c in enumerate(chunks) if c.samples]
        if not sampling:
            return []
        last_rows = torch.tensor(
            [sum(c.num_tokens for c in chunks[: i + 1]) - 1 for i in sampling], device=self.device
        )
        reqs = [chunks[i].request for i in sampling]
        cands = self.model.candidate_logits(
            hidden[last_rows],
            [len(r.output_ids) for r in reqs],
            [len(r.output_ids) >= r.sampling.min_tokens for r in reqs],
        )
        batch = SamplingBatch(
            params=[r.sampling for r in reqs],
            generators=[self._generators.get(r.request_id) for r in reqs],
            context_ids=[r.all_ids() for r in reqs],
        )
        return sample(cands, batch, self._default_gen)

    # --- detokenizer ----------------------------------------------------------------------------
    @torch.inference_mode()
    def detokenize(self, requests: list[Request], stop_ids: tuple[int, ...]) -> list[np.ndarray]:
        new_tokens = []
        for r in requests:
            fresh = r.output_ids[r.num_detokenized :]
            r.num_detokenized = len(r.output_ids)
            new_tokens.append([t for t in fresh if t not in stop_ids])
        states = [self._streams[r.request_id] for r in requests]
        return self.model.detokenize(states, new_tokens, [r.finished for r in requests])
