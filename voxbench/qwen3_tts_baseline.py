"""The per-request baseline (docs/benchmarking.md) for Qwen3-TTS: what the official `qwen-tts`
package's `generate_custom_voice` / `generate_voice_design` do for one request, one request
at a time.

- The talker: transformers' `Qwen3Model` holding the talker's layers, run frame by frame with
  its KV cache, fed the engine's prompt rows as embeddings (each row the sum of its codec and
  projected text embeddings, as the package builds them). Codebook 0 comes from the codec
  head by the package's talker rule (transformers' generate): the repetition penalty on the
  codebook-0 codes generated so far; the codec table's last 1,024 ids (control ids, speakers,
  languages) barred but the end code; the end barred for the first two frames
  (`min_new_tokens=2`; longer with min_tokens); then temperature, top-k and top-p
  (transformers' own processors, in generate's order) and a draw.
- The code predictor (the depth stage): a second `Qwen3Model` holding its layers, run from a
  fresh cache each frame: the talker's last hidden state and codebook 0's embedding, then each
  drawn code's embedding; its head i-1 gives codebook i, drawn with the same temperature,
  top-k and top-p and no repetition penalty (the package's `code_predictor.generate` with
  the subtalker settings, which default to the talker's). The next talker input is the
  frame's 16 code embeddings summed, plus tts_pad's text embedding: the text is all in the
  prompt (the package's non-streaming text, its default for preset and designed voices).
- The audio is not streamed: the package has no streaming audio output (its
  `non_streaming_mode` only says how the text enters the prompt). It generates the whole
  utterance, then its speech tokenizer decodes it in pieces of 300 frames, each with the 25
  frames before it as context (`chunked_decode`). So the baseline's first audio comes after
  its last frame, as one chunk: the engine's 12 Hz decoder run eagerly and unbatched, in
  those pieces.

Equal work: the engine's prompt rows (voice, language and instruction), tokenizer and sampling
parameters (min_tokens = max_tokens for random weights), and the engine's loaded weights
(talker, code predictor, embeddings, heads, decoder) on the same device and dtype. One
departure: when it runs out, the package's generate keeps max_new_tokens - 1 frames (the last
codebook 0 never reaches the code predictor); the baseline makes max_tokens, as the engine
does.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from engine.api import AudioChunk, FinishReason, SamplingParams, SpeechRequest
from models.layers.llama import LlamaArgs
from models.qwen3_tts.codec import SpeechDecoder
from models.qwen3_tts.model import MIN_FRAMES, Qwen3TtsModel
from voxbench.hf_models import cache_keyword, decoder_config_fields
from voxbench.per_request import Job, PerRequestBaseline

log = logging.getLogger("voxgate.bench.baseline")

# The codec table's ids the package's generate bars from codebook 0 (`suppress_tokens`): its
# last 1,024 (control ids, speakers, languages), all but the end code.
CONTROL_IDS = 1024
# The package's speech tokenizer decodes an utterance in pieces of 300 frames, each with the
# 25 frames before it as left context, whose audio it drops (chunked_decode).
DECODE_FRAMES, DECODE_CONTEXT = 300, 25


class Qwen3TtsBaseline(PerRequestBaseline):
    def __init__(self, talker_lm, depth_lm, model: Qwen3TtsModel, device: torch.device) -> None:
        """talker_lm, depth_lm: transformers Qwen3Models holding the talker's and the code
        predictor's layers (qwen3_stack); model: the engine's Qwen3-TTS (prompt rows,
        embeddings, codec head, code predictor heads, decoder)."""
        super().__init__()
        self.talker_lm, self.depth_lm = talker_lm.eval(), depth_lm.eval()
        self._cache_arg = cache_keyword(talker_lm)
        self.model, self.device = model, device
        # It takes no text into a running request, and clones no voices from clients' clips.
        self.facts = dataclasses.replace(
            model.facts, appends_text=False, voice_cloning=False, clip_voices=()
        )
        vocab = model.talker.args.vocab_size
        self.barred = torch.zeros(vocab, dtype=torch.bool, device=device)
        self.barred[vocab - CONTROL_IDS :] = True
        self.barred[model.ids.eos] = False

    def prompt_ids(self, text: str, voice: str | None) -> list:
        return self.model.preprocess(text, voice).token_ids

    def request_prompt(self, request: SpeechRequest) -> list:
        """The engine's prompt rows, the request's language and instruction in them."""
        options = dict(request.model_options)
        return self.model.preprocess_with_options(request.text, request.voice, options).token_ids

    # --- one request ---------------------------------------------------------------------------
    @torch.inference_mode()
    def codes(self, job: Job) -> tuple[list[list[int]], FinishReason]:
        """The request's frames (16 codes each) and why they ended, frame by frame as the
        package makes them; stops early once job.cancelled."""
        s = job.sampling
        g = torch.Generator(device=self.device)
        g.manual_seed(s.seed if s.seed is not None else torch.seed() % 2**63)
        talker, eos = self.model.talker, self.model.ids.eos
        rows = torch.tensor(job.prompt, dtype=torch.long, device=self.device)
        x, cache = talker.embed(rows)[None], {self._cache_arg: DynamicCache()}
        frames: list[list[int]] = []
        firsts = torch.zeros(1, 0, dtype=torch.long, device=self.device)  # codebook 0 so far
        while True:
            if job.cancelled:
                return frames, FinishReason.CANCELLED
            out = self.talker_lm(inputs_embeds=x, use_cache=True, **cache)
            hidden = out.last_hidden_state[:, -1]
            logits = talker.compute_logits(hidden)
            logits[:, self.barred] = float("-inf")
            if len(frames) < max(MIN_FRAMES, s.min_tokens):
                logits[:, eos] = float("-inf")
            first = draw(logits, s, g, firsts)
            if first == eos:
                return frames, FinishReason.STOP
            frames.append(self._depth(hidden, first, s, g))
            if len(frames) >= s.max_tokens:
                return frames, FinishReason.LENGTH
            firsts = torch.cat([firsts, firsts.new_tensor([[first]])], dim=1)
            row = torch.tensor([[*frames[-1], self.model.ids.tts_pad]], device=self.device)
            x = talker.embed(row)[None]

    def _depth(self, hidden: torch.Tensor, first: int, s: SamplingParams, g) -> list[int]:
        """Codebooks 1..15 of a frame: the code predictor from its own fresh cache."""
        predictor, talker = self.model.predictor, self.model.talker
        x = torch.stack([hidden[0], talker.codec_embedding.weight[first]])[None]
        codes, cache = [first], {self._cache_arg: DynamicCache()}
        for i in range(1, talker.num_codebooks):
            out = self.depth_lm(inputs_embeds=predictor.projection(x), use_cache=True, **cache)
            logits = F.linear(out.last_hidden_state[:, -1], predictor.heads[i - 1]).float()
            codes.append(draw(logits, s, g))
            code = (i - 1) * predictor.vocab + codes[-1]
            x = talker.residual_embedding.weight[code][None, None]
        return codes

    def _generate(self, job: Job) -> tuple[FinishReason, int]:
        started = time.monotonic()
        frames, reason = self.codes(job)
        if frames and reason is not FinishReason.CANCELLED:
            codes = torch.tensor(frames, dtype=torch.long, device=self.device)
            pcm = decode_like_the_package(self.model.decoder, codes)
            job.stream.push(AudioChunk(job.request_id, pcm, self.facts.sample_rate))
        log.debug(
            "%s: %d frames in %.2f s", job.request_id, len(frames), time.monotonic() - started
        )
        return reason, len(frames)


def draw(
    logits: torch.Tensor, s: SamplingParams, g: torch.Generator, seen: torch.Tensor | None = None
) -> int:
    """logits [1, V] (float32, barred ids -inf) → the code transformers' generate picks: the
    repetition penalty over `seen` [1, n] (codebook 0's codes so far), then the argmax when
    greedy, else temperature, top-k, top-p and min-p, and a draw of the softmax."""
    ids = seen if seen is not None else torch.zeros(1, 0, dtype=torch.long, device=logits.device)
    if ids.shape[1] and s.repetition_penalty != 1.0:
        logits = RepetitionPenaltyLogitsProcessor(s.repetition_penalty)(ids, logits)
    if s.greedy:
        return int(logits.argmax())
    warpers = [TemperatureLogitsWarper(s.temperature)] if s.temperature != 1.0 else []
    if s.top_k:
        warpers.append(TopKLogitsWarper(s.top_k))
    if s.top_p < 1.0:
        warpers.append(TopPLogitsWarper(s.top_p))
    if s.min_p > 0.0:
        warpers.append(MinPLogitsWarper(s.min_p))
    for warp in warpers:
        logits = warp(ids, logits)
    return int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=g))


def decode_like_the_package(decoder: SpeechDecoder, codes: torch.Tensor) -> np.ndarray:
    """codes [T, 16] → the utterance's audio [T·1920] (float32), decoded eagerly in the
    package's pieces: 300 frames at a time, each from scratch with up to 25 frames before it
    as context, whose audio is dropped."""
    per_frame = decoder.cfg.samples_per_frame
    pieces, start = [], 0
    while start < len(codes):
        end = min(start + DECODE_FRAMES, len(codes))
        context = DECODE_CONTEXT if start - DECODE_CONTEXT > 0 else start
        audio = decoder.decode(codes[start - context : end].T[None])[0]
        pieces.append(audio[context * per_frame :])
        start = end
    return torch.cat(pieces).float().cpu().numpy()


# --- building it ----------------------------------------------------------------------------
def qwen3_stack(
    args: LlamaArgs,
    published: dict[str, torch.Tensor],
    prefix: str,
    device: torch.device,
    dtype: torch.dtype,
):
    """transformers' Qwen3Model of `args`' shape holding the decoder layers and final norm
    that `published` (checkpoint name → tensor) has under `prefix`. Its token table stays
    unused: the baseline feeds it embeddings."""
    from transformers import Qwen3Config, Qwen3Model

    config = Qwen3Config(
        **decoder_config_fields(args),
        rope_parameters={"rope_type": "default", "rope_theta": args.rope.theta},
        attention_bias=args.attention_bias,
    )
    with torch.device(device):
        stack = Qwen3Model(config).to(dtype).eval()
    state = {
        name.removeprefix(prefix): tensor.detach()
        for name, tensor in published.items()
        if name.startswith((prefix + "layers.", prefix + "norm."))
    }
    missing, unexpected = stack.load_state_dict(state, strict=False)
    if unexpected or set(missing) != {"embed_tokens.weight"}:
        raise ValueError(
            f"the {prefix} tensors do not fill transformers' Qwen3Model: missing "
            f"{sorted(set(missing) - {'embed_tokens.weight'})[:3]}, unexpected {unexpected[:3]}"
        )
    return stack


def load_qwen3_tts_baseline(
    model: str, device: torch.device, dtype: torch.dtype, random_weights: bool
) -> Qwen3TtsBaseline:
    """`tiny-qwen3-tts`, a Qwen3-TTS preset (with --random-weights: its real configuration
    with seeded random weights, nothing downloaded) or a Qwen3-TTS checkpoint folder / repo id:
    the engine's model loaded as `voxgate serve` loads it, its talker's and code predictor's
    layers copied into transformers' Qwen3Model; started and ready to serve."""
    from models.registry import load_model

    engine_model = load_model(model, device=device, dtype=dtype, random_weights=random_weights)
    if not isinstance(engine_model, Qwen3TtsModel):
        raise TypeError(f"{model} did not load as a Qwen3-TTS model")
    talker, predictor = engine_model.talker, engine_model.predictor
    talker_lm = qwen3_stack(talker.args, talker.hf_targets(), "talker.model.", device, dtype)
    depth_lm = qwen3_stack(
        predictor.args, predictor.hf_targets(), "talker.code_predictor.model.", device, dtype
    )
    baseline = Qwen3TtsBaseline(talker_lm, depth_lm, engine_model, device)
    baseline.start()
    return baseline
