"""The per-request baseline (docs/benchmarking.md) for Chatterbox: what the official
`chatterbox-tts` package's `ChatterboxTTS.generate` does for one request, one request at a time.

- T3: transformers' `LlamaModel` holding the engine's loaded T3 backbone (chatterbox_llama.py;
  the package's T3 runs one too, `T3.tfmr`), run token by token with its KV cache on a batch
  of two rows, the request's classifier-free-guidance pair (the conditional row, and the
  unconditional one whose text token embeddings are zeroed), as `T3.inference` does: the
  prompt is the conditioning, the text and the start token (fed twice, at speech position 0);
  each drawn token's speech embedding at speech position i + 1 is the next input of both rows.
- Sampling, T3.inference's rule: the speech head's logits of both rows mixed as
  cond + cfg_weight (cond - uncond), then transformers' own processors in its order: the
  repetition penalty over the start token and every token drawn, temperature, min-p, top-p
  (top-k too where a request sets one, between min-p and top-p as the engine's sampler; the
  package has none), and a draw. Greedy requests (temperature 0, which the package lacks)
  take the argmax after the penalty, as the engine does. The request's sampling parameters
  carry generate()'s defaults (temperature 0.8, min-p 0.05, top-p 1.0, penalty 1.2: the
  model's sampling defaults) and its options `exaggeration` and `cfg_weight` (0.5 each).
- Stop: the stop token ends the request, and is not part of its audio. The stop row is barred
  until min_tokens tokens exist (min_tokens = max_tokens for random weights); max_tokens
  replaces generate()'s fixed 1,000.
- Audio: not streamed. generate() returns the whole waveform once T3 has finished: S3Gen
  (`S3Token2Wav.inference`: flow matching over every token at once, `finalize=True`, then
  HiFT and the 40 ms fade-in) decodes the whole token sequence. The baseline does that with
  the engine's own flow + HiFT (S3Gen.decode), eagerly and unbatched, and sends the audio as
  one chunk: its first audio comes after its last token.

Equal work: the engine's prompt rows (tokenizer and punctuation clean-up, voice, the request's
exaggeration) embedded by the engine's T3 embeddings, conditioning table and emotion
projection; the engine's speech head, flow and HiFT; the same device and dtype (bf16 on a GPU;
the package's from_pretrained keeps float32) and weights (for `--random-weights`, the same
seeded checkpoint the engine loads). The rows the engine does not sample when it constrains
codes (its default: the head's start row and 1,631 unused ones, which S3Gen cannot decode and
generate() drops after sampling) are barred here too, so a request of N tokens is N tokens of
audio in both.

Departures from the package, by design:
- Perth's implicit watermark, which generate() adds to every waveform, is left out: the
  engine adds none (docs/models.md), and it is work on the waveform after the model.
- A voice's conditioning rows (speaker projection, the perceiver over its reference tokens)
  are the engine's, computed once per voice; generate() runs the conditioning encoder on
  every call, a few small kernels a request.
- generate() with cfg_weight 0 builds a single text row, which T3.inference's two-row start
  token cannot join; here, as in the engine, both rows always run and cfg_weight 0 mixes the
  conditional row alone.
- Clients' voices (POST /v1/voices) are not served: the facts say voice_cloning False.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

import torch
from transformers import DynamicCache
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from engine.api import AudioChunk, FinishReason, SamplingParams, SpeechRequest
from models.base import ModelInputError
from models.chatterbox.config import SPEECH_CODES, T3_FACTS
from models.chatterbox.family import ChatterboxRequestOptions
from models.chatterbox.model import ChatterboxModel
from models.chatterbox.sampling import guided
from models.request_options import RequestOptionError, resolve_request_options
from voxbench.hf_models import cache_keyword
from voxbench.per_request import Job, PerRequestBaseline

log = logging.getLogger("voxgate.bench.baseline")

START, STOP = T3_FACTS.start_speech, T3_FACTS.stop_speech


class T3Draw:
    """T3.inference's sampling for one request: its processors, built once per request as
    the package builds them, applied to the guided logits [1, V] float32."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.penalty = RepetitionPenaltyLogitsProcessor(params.repetition_penalty)
        self.warpers = [MinPLogitsWarper(params.min_p)]
        if params.top_k:
            self.warpers.append(TopKLogitsWarper(params.top_k))
        self.warpers.append(TopPLogitsWarper(params.top_p))

    def __call__(self, logits: torch.Tensor, seen: torch.Tensor, g: torch.Generator) -> int:
        """logits [1, V]; seen [1, n]: the start token and every token drawn so far."""
        logits = self.penalty(seen, logits)
        if self.params.greedy:
            return int(logits.argmax())
        if self.params.temperature != 1.0:
            logits = logits / self.params.temperature
        for warp in self.warpers:
            logits = warp(seen, logits)
        return int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=g))


class ChatterboxBaseline(PerRequestBaseline):
    def __init__(self, lm, model: ChatterboxModel, device: torch.device) -> None:
        """lm: transformers' LlamaModel holding T3's backbone (chatterbox_llama.py); model: the
        engine's Chatterbox (prompt rows, voices, T3's embeddings and speech head, S3Gen)."""
        super().__init__()
        self.lm = lm.eval()
        self._cache_arg = cache_keyword(lm)
        self.model, self.device = model, device
        self.t3 = model.t3
        # It clones no voices from clients' clips.
        self.facts = dataclasses.replace(model.facts, voice_cloning=False, clip_voices=())
        # The head's rows S3Gen cannot decode but the stop row, barred when the engine
        # constrains its codes (ChatterboxModel.constrain_codes).
        self.barred = torch.zeros(self.t3.sizes.speech_vocab, dtype=torch.bool, device=device)
        if model.constrain_codes:
            self.barred[SPEECH_CODES:] = True
            self.barred[STOP] = False

    def prompt_ids(self, text: str, voice: str | None) -> list:
        return self.model.preprocess(text, voice).token_ids

    def request_prompt(self, request: SpeechRequest) -> list:
        """The engine's prompt rows, the request's exaggeration in them; ModelInputError for
        what the engine refuses (text, voice, options, a prompt past the context)."""
        options = self.options(request.model_options)
        rows = self.model.preprocess_with_options(
            request.text, request.voice, dataclasses.asdict(options)
        ).token_ids
        if len(rows) + request.sampling.max_tokens > self.facts.max_context:
            raise ModelInputError(
                f"prompt ({len(rows)} tokens) plus max_tokens ({request.sampling.max_tokens}) "
                f"exceeds the model's context of {self.facts.max_context}; shorten the text or "
                "lower max_tokens"
            )
        return rows

    def options(self, given: Mapping[str, Any]) -> ChatterboxRequestOptions:
        """A request's model_options checked as the engine checks them, defaults filled in."""
        try:
            resolved = resolve_request_options(self.facts.request_options, given, self.facts.name)
        except RequestOptionError as exc:
            raise ModelInputError(str(exc)) from None
        return ChatterboxRequestOptions(**resolved)

    # --- one request ---------------------------------------------------------------------------
    @torch.inference_mode()
    def speech_tokens(self, job: Job) -> tuple[list[int], FinishReason]:
        """T3.inference for the job: its speech tokens (the stop token left out) and why they
        ended; stops at the next token once job.cancelled."""
        s = job.sampling
        cfg_weight = self.options(job.model_options).cfg_weight
        draw = T3Draw(s)
        g = torch.Generator(device=self.device)
        g.manual_seed(s.seed if s.seed is not None else torch.seed() % 2**63)
        rows = torch.tensor(job.prompt, dtype=torch.long, device=self.device)
        x = self.model.embed(rows).transpose(0, 1)  # [2, P, H]: the CFG pair
        cache = {self._cache_arg: DynamicCache()}
        seen = torch.full((1, 1), START, dtype=torch.long, device=self.device)
        tokens: list[int] = []
        while True:
            if job.cancelled:
                return tokens, FinishReason.CANCELLED
            out = self.lm(inputs_embeds=x, use_cache=True, **cache)
            both = self.t3.speech_logits(out.last_hidden_state[:, -1])  # [2, V] float32
            logits = guided(both[:1], both[1:], cfg_weight)
            logits.masked_fill_(self.barred, float("-inf"))
            if len(tokens) < s.min_tokens:
                logits[:, STOP] = float("-inf")
            token = draw(logits, seen, g)
            if token == STOP:
                return tokens, FinishReason.STOP
            tokens.append(token)
            if len(tokens) >= s.max_tokens:
                return tokens, FinishReason.LENGTH
            seen = torch.cat([seen, seen.new_tensor([[token]])], dim=1)
            code = torch.tensor([token], device=self.device)
            position = torch.tensor([len(tokens)], device=self.device)  # token i at i + 1
            x = self.t3.speech_embeddings(code, position)[None].expand(2, 1, -1)

    def _generate(self, job: Job) -> tuple[FinishReason, int]:
        started = time.monotonic()
        tokens, reason = self.speech_tokens(job)
        # generate() keeps the codes S3Gen decodes (drop_invalid_tokens, then < 6561).
        codes = [t for t in tokens if t < SPEECH_CODES]
        if codes and reason is not FinishReason.CANCELLED:
            voice = self.model.voices[job.voice or self.facts.default_voice]
            pcm = self.model.parts.s3gen.decode(codes, voice.s3gen)
            job.stream.push(AudioChunk(job.request_id, pcm, self.facts.sample_rate))
        log.debug(
            "%s: %d tokens in %.2f s", job.request_id, len(tokens), time.monotonic() - started
        )
        return reason, len(tokens)


def load_chatterbox_baseline(
    model: str, device: torch.device, dtype: torch.dtype, random_weights: bool
) -> ChatterboxBaseline:
    """`tiny-chatterbox`, `chatterbox` (with --random-weights: the real shapes with seeded
    random weights, nothing downloaded) or a ResembleAI/chatterbox folder: the engine's model
    loaded as `voxgate serve` loads it, its T3 backbone copied into transformers' LlamaModel;
    started and ready to serve."""
    from models.registry import load_model
    from voxbench.chatterbox_llama import t3_llama

    engine_model = load_model(model, device=device, dtype=dtype, random_weights=random_weights)
    if not isinstance(engine_model, ChatterboxModel):
        raise TypeError(f"{model} did not load as a Chatterbox model")
    baseline = ChatterboxBaseline(t3_llama(engine_model.t3, device, dtype), engine_model, device)
    baseline.start()
    return baseline
