"""CosyVoice's `CausalMaskedDiffWithXvec` + `CausalConditionalCFM`: speech tokens → mel.

Tokens are embedded and encoded (2 mel frames per token), projected to mel space as the flow's
condition `mu`; the mel is then integrated from noise by Euler steps over a cosine time
schedule, each step evaluating the estimator twice (conditional and unconditional, one batch)
and mixing them by classifier-free guidance. Parameter names follow flow.pt."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.codecs.flow_hift.dit_estimator import DitConfig, DitEstimator
from models.codecs.flow_hift.encoder import UpsampleConformerEncoder, chunk_ids
from models.codecs.flow_hift.estimator import CausalConditionalDecoder

# CausalConditionalCFM draws its noise once, with torch's seed 0, and indexes it by frame: a
# frame's starting noise is the same in every call, which is what lets a chunk be re-decoded
# with the same result. 15000 frames = 300 s at 50 Hz.
NOISE_FRAMES = 15000


def fixed_noise(n_mels: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randn([1, n_mels, NOISE_FRAMES], generator=generator)


class FlowDecoder(nn.Module):
    """`decoder.*` of flow.pt: the CFM wrapper holds only the estimator's weights."""

    def __init__(self, estimator: CausalConditionalDecoder) -> None:
        super().__init__()
        self.estimator = estimator


def build_estimator(est) -> nn.Module:
    """CosyVoice 2's causal U-Net (EstimatorConfig) or Step-Audio 2's DiT (DitConfig); both
    take (x, mask, mu, t, spks, cond, streaming, chunks)."""
    if isinstance(est, DitConfig):
        return DitEstimator(est)
    return CausalConditionalDecoder(
        est.in_channels,
        est.out_channels,
        est.channels,
        est.attention_head_dim,
        est.n_blocks,
        est.num_mid_blocks,
        est.num_heads,
        est.static_chunk_size,
    )


class CausalFlow(nn.Module):
    def __init__(self, cfg) -> None:  # cfg: models.cosyvoice2.config.FlowConfig
        super().__init__()
        enc, est = cfg.encoder, cfg.estimator
        self.cfg = cfg
        self.token_mel_ratio = cfg.token_mel_ratio
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.encoder = UpsampleConformerEncoder(
            enc.output_size,
            enc.attention_heads,
            enc.linear_units,
            enc.num_blocks,
            enc.num_up_blocks,
            enc.static_chunk_size,
            cfg.pre_lookahead_len,
        )
        self.encoder_proj = nn.Linear(enc.output_size, cfg.output_size)
        self.decoder = FlowDecoder(build_estimator(est))
        self.register_buffer("noise", fixed_noise(cfg.output_size), persistent=False)
        t = torch.linspace(0, 1, cfg.n_timesteps + 1)
        if cfg.t_scheduler == "cosine":
            t = 1 - torch.cos(t * 0.5 * torch.pi)
        self.register_buffer("t_span", t, persistent=False)

    @torch.inference_mode()
    def forward(self, *args, streaming: bool = True, **kwargs) -> torch.Tensor:
        """condition(...) then the Euler solver: → mel [B, M, F]."""
        inputs = self.condition(*args, streaming=streaming, **kwargs)
        return self.solve_euler(*inputs, streaming=streaming)

    def condition(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        out_lengths: torch.Tensor,
        prompt_mel: torch.Tensor,
        prompt_frames: torch.Tensor,
        speaker: torch.Tensor,
        streaming: bool = True,
        skipped: torch.Tensor | None = None,
        first_end: torch.Tensor | None = None,
        short_by: int = 0,
        frames: int | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """tokens [B, T] (prompt tokens then generated ones, zero-padded), `lengths` real tokens
        per row, `out_lengths` tokens to decode (lengths minus the look-ahead context when not
        final); prompt_mel [B, P, M] with `prompt_frames` real frames per row; speaker [B, E]
        (CAM++ x-vectors); `frames`: the mel frames to make, >= 2 * max(out_lengths) (None:
        that, read from the device; given, nothing here waits for the device, and the caller
        checks that every row's valid frames have noise); `skipped` [B] generated tokens left out between the prompt and the
        row's first generated token (a bounded window of history: they only shift which noise
        frames the row's generated frames start from). `first_end` [B] / `short_by`: where a
        row's first generated chunk ends when it is `short_by` tokens shorter than the chunk
        (encoder.chunk_ids; a short first audio chunk). → the solver's inputs: noise z, mu and
        cond [B, M, F] with F = frames, mask [B, 1, F] (valid up to
        2*out_lengths per row), spks [B, M] and chunks [B, F] (each frame's attention chunk)."""
        b, t = tokens.shape
        present = torch.arange(t, device=tokens.device)[None, :] < lengths[:, None]
        x = self.input_embedding(tokens.clamp(min=0)) * present[..., None]
        r = self.token_mel_ratio
        # The voice prompt as one attention chunk (Step-Audio 2): its tokens end here per row.
        prompt_end = (
            torch.div(prompt_frames, r, rounding_mode="floor") if self.cfg.prompt_chunk else None
        )
        encoded = self.encoder(x, lengths, out_lengths, streaming, first_end, short_by, prompt_end)
        mu = self.encoder_proj(encoded).transpose(1, 2)
        # Frames past every row's out_length (the look-ahead's) are masked out of the estimator
        # (causal convs, chunk-causal attention): dropping them saves its 20 passes over them.
        checked = frames is not None
        if frames is None:
            frames = self.token_mel_ratio * int(out_lengths.max())
        mu = mu[:, :, :frames]
        frame_idx = torch.arange(frames, device=tokens.device)
        # The noise of a frame is fixed by its place in the utterance (prompt frames first).
        noise_idx = frame_idx[None, :].expand(b, -1)
        if skipped is not None:
            generated = frame_idx[None, :] >= prompt_frames[:, None]
            noise_idx = noise_idx + generated * (self.token_mel_ratio * skipped[:, None])
        if checked:  # only padded frames can be past the noise; they are masked out
            noise_idx = noise_idx.clamp(max=NOISE_FRAMES - 1)
        elif int(noise_idx.max()) >= NOISE_FRAMES:
            raise ValueError(f"utterance longer than the flow's {NOISE_FRAMES} mel frames")
        mask = (frame_idx[None, :] < self.token_mel_ratio * out_lengths[:, None])[:, None].to(
            mu.dtype
        )
        cond = torch.zeros_like(mu)
        p = min(prompt_mel.shape[1], frames)
        in_prompt = (frame_idx[None, :p] < prompt_frames[:, None])[:, None]
        cond[:, :, :p] = prompt_mel[:, :p].transpose(1, 2) * in_prompt
        spks = self.spk_embed_affine_layer(F.normalize(speaker, dim=1))
        z = self.noise[0][:, noise_idx].transpose(0, 1).to(mu.dtype)  # [B, M, F]
        ends = None if first_end is None else r * first_end
        prompt_frame_end = None if prompt_end is None else r * prompt_end
        chunk = self.decoder.estimator.chunk
        chunks = chunk_ids(frames, chunk, mu.device, ends, r * short_by, prompt_frame_end)
        return z, mu, mask, spks, cond, chunks.expand(b, -1)

    def solve_euler(
        self, x, mu, mask, spks, cond, chunks=None, streaming: bool = True
    ) -> torch.Tensor:
        """cfg_euler with this flow's estimator, schedule and CFG rate; chunks [B, F] each
        frame's attention chunk (None: frame // chunk)."""
        estimator = self.decoder.estimator
        chunks2 = None if chunks is None else torch.cat([chunks, chunks])  # CFG's two halves
        return cfg_euler(
            lambda *args: estimator(*args, streaming, chunks2),
            x, mu, mask, spks, cond,
            self.t_span.to(x.dtype),
            self.cfg.inference_cfg_rate,
        )  # fmt: skip

    # The solver step by step (the CUDA-graphed path: one graph per step's shape, replayed
    # n_timesteps times, so the codec's thread can wait between steps; streaming.py).
    def solver_inputs(self, z, mu, mask, spks, cond, chunks) -> tuple[torch.Tensor, ...]:
        """condition's outputs → (x0, then cfg_halves' doubled inputs and chunks) for
        euler_step."""
        return (z, *cfg_halves(mu, mask, spks, cond), torch.cat([chunks, chunks]))

    def euler_steps(self, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(t, dt) of each Euler step as 0-d tensors on the flow's device, as cfg_euler
        computes them."""
        t_span = self.t_span.to(dtype)
        return [(t_span[i - 1], t_span[i] - t_span[i - 1]) for i in range(1, len(t_span))]

    def euler_step(self, x, mask2, mu2, spks2, cond2, chunks2, t, dt) -> torch.Tensor:
        """One of cfg_euler's steps (streaming attention chunks)."""
        estimator = self.decoder.estimator
        return cfg_step(
            lambda *args: estimator(*args, True, chunks2),
            x, mask2, mu2, spks2, cond2, t, dt, self.cfg.inference_cfg_rate,
        )  # fmt: skip


def cfg_halves(mu, mask, spks, cond) -> tuple[torch.Tensor, ...]:
    """The estimator's inputs for both CFG halves at once: (mask, mu, spks, cond) doubled
    along the batch, the unconditional half with mu, speaker and cond zeroed."""
    return (
        torch.cat([mask, mask]),
        torch.cat([mu, torch.zeros_like(mu)]),
        torch.cat([spks, torch.zeros_like(spks)]),
        torch.cat([cond, torch.zeros_like(cond)]),
    )


def cfg_step(estimate, x, mask2, mu2, spks2, cond2, t, dt, rate: float) -> torch.Tensor:
    """x after one Euler step of dt at time t: the conditional and unconditional estimates as
    one batch, mixed by classifier-free guidance."""
    b = x.shape[0]
    v = estimate(torch.cat([x, x]), mask2, mu2, t.expand(2 * b), spks2, cond2)
    v_cond, v_uncond = v[:b], v[b:]
    return x + dt * ((1.0 + rate) * v_cond - rate * v_uncond)


def cfg_euler(estimate, x, mu, mask, spks, cond, t_span, rate: float) -> torch.Tensor:
    """Euler steps over t_span; each step runs the conditional and the unconditional (mu,
    speaker and cond zeroed) estimate as one batch and mixes them by classifier-free guidance.
    `estimate(x, mask, mu, t, spks, cond)` → velocity. x, mu, cond [B, M, F]; mask [B, 1, F];
    spks [B, M]. Fixed shapes and no host syncs, so it can be captured in a CUDA graph."""
    mask2, mu2, spks2, cond2 = cfg_halves(mu, mask, spks, cond)
    for step in range(1, len(t_span)):
        t, dt = t_span[step - 1], t_span[step] - t_span[step - 1]
        x = cfg_step(estimate, x, mask2, mu2, spks2, cond2, t, dt, rate)
    return x.float()
