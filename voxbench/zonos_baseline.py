"""The per-request baseline (docs/benchmarking.md) for Zonos v0.1 (the transformer): what the
model card's example does (`model.generate(conditioning)`, then
`model.autoencoder.decode(codes)`), one request at a time.

- The backbone: transformers' `StableLmModel` holding the checkpoint's backbone
  (zonos_stablelm.py: StableLM's layer is Zonos' block, rotary layout converted), run token by
  token with its plain KV cache over a batch of two rows, the request's conditional and
  unconditional prefix (classifier-free guidance, scale 2, as generate() defaults to).
- Generation: the package's rules (zonos_reference.py): the delayed code grid, its sampler
  (min-p 0.1, repetition penalty 3 over the last 2 frames, the request's temperature / top-p /
  top-k), only codebook 0 may draw EOS, and after it the EOS cascade to codebook 8.
- Audio: none while generating. Once the request ends, DAC decodes the whole code sequence in
  one call (fp16 autocast on a GPU, as the package's `DACAutoencoder.decode`), pushed as one
  chunk: generate() returns codes only at its end, so that is when the example has audio.

Equal work: the engine's prompt (phonemes through eSpeak, the conditioning prefix with the
voice's speaker embedding, embedded by the engine's prefix conditioner), its code embeddings,
heads and DAC, same device and dtype. A request of `max_tokens` grid frames is generate() with
max_new_tokens = max_tokens - 8 audio frames: the same frames of work and audio as the engine
(generate()'s one further step, whose frame is past the grid's end, is left out). EOS is
blocked in codebook 0 until min_tokens frames exist (min_tokens = max_tokens for random
weights). The request's repetition_penalty is the engine's own penalty, off for Zonos by
default, and is ignored: Zonos' penalty is always on, here as in the engine; the request's
min_p raises Zonos' 0.1 when larger.

Departures from the package: it compiles its decode step with torch.compile by default; this
runs eagerly, as the other baselines do. The hybrid (Mamba2 layers) has no transformers class
and is refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.api import AudioChunk, FinishReason, SamplingParams
from models.base import Token
from models.checkpoint_errors import CheckpointError
from models.zonos.config import EOS_CODE, MASK_CODE, N_CODEBOOKS
from models.zonos.model import MAX_POSITIONS, ZonosModel
from voxbench import zonos_reference as Z
from voxbench.hf_models import cache_keyword, output_cache
from voxbench.per_request import Job, PerRequestBaseline

log = logging.getLogger("voxgate.bench.baseline")

DELAY = N_CODEBOOKS - 1  # grid frames after an audio frame's codebook 0 until it is whole
HYBRID_PRESETS = ("tiny-zonos-hybrid", "zonos-v0.1-hybrid")


@dataclass
class ZonosGrid:
    """One request's generation: the delayed grid [9, audio frames + 9] (UNKNOWN past
    `frames`), the grid frames drawn, and why it ended."""

    grid: torch.Tensor
    frames: int
    reason: FinishReason


class ZonosBaseline(PerRequestBaseline):
    def __init__(self, lm, model: ZonosModel, device: torch.device) -> None:
        """lm: transformers' StableLmModel with the model's backbone (zonos_stablelm.py);
        model: the engine's Zonos (prompt, voices, prefix and code embeddings, heads, DAC)."""
        super().__init__()
        self.lm = lm
        self.model = model
        self.device = device
        self.facts = model.facts
        self.embeddings = model.weights.embeddings
        self.heads = torch.cat([h.weight for h in model.weights.heads]).detach()
        self.dac = model.detok.dac
        self._cache_arg = cache_keyword(lm)

    def prompt_ids(self, text: str, voice: str | None) -> list[Token]:
        """The engine's Zonos prompt rows (models/zonos/rows.py), frame 0 last."""
        return self.model.preprocess(text, voice).token_ids

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The last position's hidden states of both rows [2, d_model] → the guided logits
        [9, LOGIT_ROWS] float32, the padding row -inf."""
        heads = F.linear(hidden, self.heads).float().view(2, N_CODEBOOKS, -1)
        cond, uncond = heads[0], heads[1]
        guided = uncond + (cond - uncond) * self.model.cfg_scale
        return F.pad(guided, (0, Z.LOGIT_ROWS - guided.shape[-1]), value=float("-inf"))

    def _step(self, x: torch.Tensor, cache):
        out = self.lm(inputs_embeds=x, use_cache=True, **{self._cache_arg: cache})
        return self._logits(out.last_hidden_state[:, -1]), output_cache(out)

    @torch.inference_mode()
    def delayed_codes(self, prompt: list[Token], s: SamplingParams, job: Job | None = None):
        """generate() for one request, to its last grid frame → ZonosGrid. `job`: stop at
        the next frame once it is cancelled."""
        rule = Z.ZonosSampling(
            temperature=s.temperature,
            top_p=0.0 if s.top_p >= 1.0 else s.top_p,
            top_k=s.top_k,
            min_p=max(s.min_p, Z.MIN_P),
        )
        g = torch.Generator(device=self.device)
        g.manual_seed(s.seed if s.seed is not None else torch.seed() % 2**63)
        grid = Z.delayed_grid(max(s.max_tokens - DELAY, 0), self.device)
        last = min(s.max_tokens, grid.shape[1] - 1)
        rows = torch.tensor(prompt, dtype=torch.long, device=self.device)
        x = self.model.embed(rows).transpose(0, 1)  # [2, P, d_model]: both CFG rows
        cache, eos_at, frame = None, None, 0
        for frame in range(1, last + 1):
            if job is not None and job.cancelled:
                return ZonosGrid(grid, frame - 1, FinishReason.CANCELLED)
            logits, cache = self._step(x, cache)
            first = frame == 1  # the prefill's draw: no penalty, no EOS rule, as generate()
            if not first:
                logits[1:, EOS_CODE] = float("-inf")
            if frame - 1 < s.min_tokens:
                logits[0, EOS_CODE] = float("-inf")
            codes = Z.draw(logits, None if first else grid[:, :frame], rule, g)
            if not first and eos_at is None and int(codes[0]) == EOS_CODE:
                eos_at = frame
            if eos_at is not None:  # EOS moves one codebook a frame, masks before it
                step = min(frame - eos_at, DELAY)
                codes[:step] = MASK_CODE
                codes[step] = EOS_CODE
            Z.fill_frame(grid, frame, codes)
            if eos_at is not None and frame - eos_at == DELAY:
                return ZonosGrid(grid, frame, FinishReason.STOP)
            x = sum(emb(grid[k, frame]) for k, emb in enumerate(self.embeddings))
            x = x.expand(2, 1, -1)
        return ZonosGrid(grid, frame, FinishReason.LENGTH)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor):
        """Audio codes [9, n] → float32 PCM (numpy), as the package's DACAutoencoder.decode."""
        on_gpu = self.device.type == "cuda"
        with torch.autocast(self.device.type, torch.float16, enabled=on_gpu):
            audio = self.dac.decode(audio_codes=codes[None]).audio_values
        return audio[0].float().cpu().numpy()

    def _generate(self, job: Job) -> tuple[FinishReason, int]:
        out = self.delayed_codes(job.prompt, job.sampling, job)
        if out.reason is not FinishReason.CANCELLED:
            codes = Z.audio_codes(out.grid, out.frames)
            if codes.shape[1]:
                pcm = self.decode(codes)
                job.stream.push(AudioChunk(job.request_id, pcm, self.facts.sample_rate))
        return out.reason, out.frames


def load_zonos_baseline(
    model: str, device: torch.device, dtype: torch.dtype, random_weights: bool
) -> ZonosBaseline:
    """`tiny-zonos`, `zonos-v0.1` (with --random-weights: the real shapes, nothing downloaded)
    or a Zonos v0.1 transformer folder / repo id: the engine's model for the prompt, voices,
    embeddings, heads and DAC, and transformers' StableLM holding its backbone; started."""
    from models.registry import load_model
    from voxbench.zonos_stablelm import stablelm_backbone

    if model in HYBRID_PRESETS:
        raise _hybrid_refused(model)
    engine_model = load_model(model, device=device, dtype=dtype, random_weights=random_weights)
    if engine_model.weights.config.backbone.ssm is not None:
        raise _hybrid_refused(model)
    lm = stablelm_backbone(engine_model.weights.backbone, MAX_POSITIONS, device, dtype)
    baseline = ZonosBaseline(lm, engine_model, device)
    baseline.start()
    return baseline


def _hybrid_refused(model: str) -> CheckpointError:
    return CheckpointError(
        f"{model} is the Zonos hybrid: its Mamba2 layers have no transformers class to run as "
        "a per-request baseline; --baseline serves the Zonos transformer (tiny-zonos, zonos-v0.1)"
    )
