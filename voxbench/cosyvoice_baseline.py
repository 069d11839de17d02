"""The per-request baseline (docs/benchmarking.md) for CosyVoice 2: what CosyVoice's own
`inference_zero_shot(..., stream=True)` does, one request at a time.

- The LLM: transformers' `Qwen2ForCausalLM` (CosyVoice's `Qwen2Encoder` wraps one) run token
  by token with its KV cache, fed the prompt as embeddings: sos, the prompt text and the text
  (Qwen2's own embeddings), task_id, then the voice prompt's speech tokens; each new speech
  token's embedding is the next input (`Qwen2LM.inference`). Sampling is CosyVoice's rule:
  top-k/top-p, drawn again from the whole distribution when the token repeats too often in
  the last `window` tokens (repetition-aware sampling); stop rows masked until min_tokens.
- The detokenizer: the same flow + HiFT as the engine, but with CosyVoice's own streaming,
  every 25 tokens (once 25 + 3 look-ahead exist) re-integrating the flow over the whole
  history (`context_chunks=None`), eagerly, unbatched.

Equal work: the engine's prompt layout, voices, tokenizer and sampling parameters (min_tokens =
max_tokens for random weights), and the flow + HiFT modules the engine loads, on the same
device and dtype.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from engine.api import AudioChunk, FinishReason, SamplingParams, SpeechRequest
from models.base import RepetitionAwareSampling
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from models.cosyvoice2.model import CosyVoice2Model
from voxbench.hf_models import cache_kwargs, output_cache
from voxbench.per_request import Job, PerRequestBaseline

log = logging.getLogger("voxgate.bench.baseline")


class CosyVoiceBaseline(PerRequestBaseline):
    def __init__(self, qwen, model: CosyVoice2Model, device: torch.device) -> None:
        """qwen: transformers Qwen2ForCausalLM with the model's backbone weights (or the same
        configuration's random ones); model: the engine's CosyVoice 2 (prompt layout, voices,
        speech embedding and head, flow and HiFT)."""
        super().__init__()
        self.qwen = qwen.eval()
        self.model = model
        self.device = device
        self.facts = model.facts
        self.ras = model.facts.repetition_aware or RepetitionAwareSampling()
        llm = model.llm
        self.llm_embedding, self.speech_embedding = llm.llm_embedding, llm.speech_embedding
        self.llm_decoder = llm.llm_decoder
        self.codes = llm.ids.speech_token_size  # head rows past this are stop rows
        d = model.detok
        self.detok = FlowHiftDetokenizer(d.flow, d.hift, d.chunk, context_chunks=None)

    def prompt_ids(self, text: str, voice: str | None) -> list[int]:
        return self.model.preprocess(text, voice).token_ids

    def request_sampling(self, request: SpeechRequest) -> SamplingParams:
        length = self.model.preprocess(request.text, request.voice).length
        return request.sampling.within(length)

    def _prompt_embeddings(self, prompt: list[int]) -> torch.Tensor:
        """[1, T, H]: sos, text, task_id, prompt speech, each from its own table."""
        ids = self.model.llm.ids
        text = [t for t in prompt if t < ids.text_vocab]
        speech = [t - ids.speech_base for t in prompt if t >= ids.speech_base]
        dev = self.device
        parts = [
            self.llm_embedding.weight[0:1],
            self.qwen.model.embed_tokens(torch.tensor(text, dtype=torch.long, device=dev)),
            self.llm_embedding.weight[1:2],
            self.speech_embedding(torch.tensor(speech, dtype=torch.long, device=dev)),
        ]
        return torch.cat(parts)[None]

    def _sample(self, logits: torch.Tensor, s: SamplingParams, recent: list[int], g) -> int:
        if s.greedy:
            return int(logits.argmax())
        probs = torch.softmax(logits / s.temperature, dim=-1)
        order = probs.argsort(descending=True)
        if s.top_k:
            order = order[: s.top_k]
        kept = probs[order]
        keep = (kept.cumsum(0) - kept) < s.top_p  # the nucleus, its first token always in
        choice = order[keep][torch.multinomial(kept[keep], 1, generator=g)]
        token = int(choice)
        window = recent[-self.ras.window :]
        if window.count(token) >= self.ras.window * self.ras.tau_r:
            token = int(torch.multinomial(probs, 1, generator=g))
        return token

    @torch.inference_mode()
    def _generate(self, job: Job) -> tuple[FinishReason, int]:
        s = job.sampling
        voice = self.model.voices.get(job.voice)
        detok, rate = self.detok, self.facts.sample_rate
        state = detok.new_stream(voice.flow_tokens, voice.mel, voice.embedding)
        g = torch.Generator(device=self.device)
        g.manual_seed(s.seed if s.seed is not None else torch.seed() % 2**63)

        def emit(final: bool) -> None:
            pcm = detok.decode([state], [final])[0]
            if len(pcm):
                job.stream.push(AudioChunk(job.request_id, pcm, rate))

        x, cache, generated, reason = self._prompt_embeddings(job.prompt), None, [], None
        next_decode = detok.chunk + detok.lookahead  # CosyVoice's token_hop_len + look-ahead
        while reason is None:
            if job.cancelled:
                reason = FinishReason.CANCELLED
                break
            out = self.qwen.model(
                inputs_embeds=x, use_cache=True, **cache_kwargs(self.qwen.model, cache)
            )
            cache = output_cache(out)
            logits = self.llm_decoder(out.last_hidden_state[0, -1]).float()
            if len(generated) < s.min_tokens:
                logits[self.codes :] = float("-inf")
            token = self._sample(logits, s, generated, g)
            if token >= self.codes:
                reason = FinishReason.STOP
                break
            generated.append(token)
            detok.push(state, [token])
            if len(generated) >= s.max_tokens:
                reason = FinishReason.LENGTH
            elif len(generated) >= next_decode:
                emit(False)
                next_decode += detok.chunk
            x = self.speech_embedding.weight[token][None, None]
        if reason is not FinishReason.CANCELLED:
            emit(True)
        return reason, len(generated)


def load_cosyvoice_baseline(
    model: str, device: torch.device, dtype: torch.dtype, random_weights: bool
) -> CosyVoiceBaseline:
    """`tiny-cosyvoice2`, `cosyvoice2-0.5b` (with --random-weights: the real configuration,
    nothing downloaded) or a CosyVoice2-0.5B folder: the engine's model for the prompt, voices,
    speech head and codec, and transformers' Qwen2 holding llm.pt's backbone (random weights:
    Qwen2's own initialisation of the same configuration)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from models.cosyvoice2 import configs
    from models.cosyvoice2.presets import ensure_real_config, ensure_tiny_cosyvoice2
    from models.registry import load_model

    engine_model = load_model(model, device=device, dtype=dtype, random_weights=random_weights)
    if model == "tiny-cosyvoice2":
        folder = ensure_tiny_cosyvoice2()
    elif model == "cosyvoice2-0.5b" and random_weights:
        folder = ensure_real_config()
    else:
        from models.cosyvoice2.loading import resolve_folder

        folder = resolve_folder(configs.REPO_ID if model == "cosyvoice2-0.5b" else model)
    config = json.loads((Path(folder) / configs.QWEN_FOLDER / "config.json").read_text())
    qwen_config = Qwen2Config.from_dict(config)
    torch.manual_seed(0)
    with torch.device(device):
        qwen = Qwen2ForCausalLM(qwen_config).to(dtype)
    if not random_weights:
        from models.codecs.flow_hift.checkpoint import load_pt
        from models.cosyvoice2.llm import QWEN_PREFIX

        state = load_pt(Path(folder) / "llm.pt")
        backbone = {k.removeprefix(QWEN_PREFIX): t for k, t in state.items()}
        missing, _ = qwen.load_state_dict(
            {k: t for k, t in backbone.items() if k.startswith("model.")}, strict=False
        )
        if any(k.startswith("model.") for k in missing):
            raise ValueError(f"llm.pt lacks Qwen2 tensors: {missing[:3]}")
    baseline = CosyVoiceBaseline(qwen.to(device), engine_model, device)
    baseline.start()
    return baseline
