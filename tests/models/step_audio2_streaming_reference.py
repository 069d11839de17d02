"""StepFun's token2wav streaming (Step-Audio2 `token2wav.py`: `flow.setup_cache` on the voice
prompt, then `flow.inference_chunk` per 25 codes + 3 of look-ahead), written out again from
its published description as an independent construction on Voxgate's modules' weights: the
encoder and the DiT run chunk by chunk with key/value and convolution caches, queries only
over the new chunk (the official `forward_chunk` paths), instead of Voxgate's one pass over
the row with a chunk-causal attention mask.

What it leaves as the official code has it: the DiT has no positional encoding (cached keys
are simply prepended); the encoder's relative positions span cache + chunk (the official
rel_shift on a non-square score matrix); every cache is kept whole (the official token2wav's
estimator cache trim to prompt + 100 frames is Voxgate's bounded window, compared elsewhere).
What it takes from Voxgate: the Euler noise (the official draws fresh noise per chunk;
Voxgate's is indexed by frame, which streaming needs), and the voice prompt's look-ahead (the
official encodes the prompt with its own first 3 codes as look-ahead; Voxgate's prompt sees
the first generated codes, as a whole-utterance decode does)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# --- the DiT, chunk by chunk -----------------------------------------------------------------


def time_embedding(est, t: torch.Tensor) -> torch.Tensor:
    """TimestepEmbedder: 1000 t through 256 sinusoids (cosines first) and the MLP."""
    half = est.t_embedder.frequency_size // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(0, half) / half).to(t)
    args = (t * 1000)[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    mlp = est.t_embedder.mlp
    return mlp["2"](F.silu(mlp["0"](emb)))


def conv_with_cache(conv, x: torch.Tensor, cache: torch.Tensor | None):
    """CausalConv1d.forward_chunk on x [B, C, T]: the last k-1 inputs of the previous chunk
    (zeros at first) stand before it."""
    k = conv.kernel_size[0]
    if cache is None:
        cache = x.new_zeros(x.shape[0], x.shape[1], k - 1)
    x = torch.cat([cache, x], dim=2)
    return F.conv1d(x, conv.weight, conv.bias), x[..., -(k - 1) :]


def dit_block_chunk(block, x, c, cache: dict):
    """DiTBlock.forward_chunk: x [B, dt, D]; cache holds this block's keys, values and the two
    convs' last inputs, updated in place."""
    mods = block.adaLN_modulation["1"](F.silu(c)).chunk(9, dim=-1)
    shift_a, scale_a, gate_a, shift_m, scale_m, gate_m, shift_c, scale_c, gate_c = mods
    attn = block.attn
    h = block.norm1(x) * (1 + scale_a) + shift_a
    b, t, _ = h.shape
    q, k, v = (
        p(h).reshape(b, t, attn.h, attn.d).transpose(1, 2)
        for p in (attn.to_q, attn.to_k, attn.to_v)
    )
    q, k = attn.q_norm(q), attn.k_norm(k)
    if "k" in cache:  # the official puts the new keys first: order does not matter unmasked
        k, v = torch.cat([k, cache["k"]], dim=2), torch.cat([v, cache["v"]], dim=2)
    cache["k"], cache["v"] = k, v
    out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, -1)
    x = x + gate_a * attn.proj(out)
    h = (block.norm3(x) * (1 + scale_c) + shift_c).transpose(1, 2)
    convs = block.conv.block
    h, cache["c1"] = conv_with_cache(convs["1"], h, cache.get("c1"))
    h = F.mish(convs["3"](h.transpose(1, 2))).transpose(1, 2)
    h, cache["c2"] = conv_with_cache(convs["6"], h, cache.get("c2"))
    x = x + gate_c * h.transpose(1, 2)
    h = block.norm2(x) * (1 + scale_m) + shift_m
    return x + gate_m * block.mlp.fc2(F.gelu(block.mlp.fc1(h), approximate="tanh"))


def dit_chunk(est, x, mu, t, spks, cond, caches: list[dict]):
    """DiT.forward_chunk: x, mu, cond [B, M, dt] → velocity [B, M, dt]; caches one per block."""
    c = time_embedding(est, t)[:, None]
    h = torch.cat([x, mu, spks[:, :, None].expand(-1, -1, x.shape[-1]), cond], dim=1)
    h = est.in_proj(h.transpose(1, 2))
    for block, cache in zip(est.blocks, caches, strict=True):
        h = dit_block_chunk(block, h, c, cache)
    shift, scale = est.final_layer.adaLN_modulation["1"](F.silu(c)).chunk(2, dim=-1)
    h = est.final_layer.norm_final(h) * (1 + scale) + shift
    return est.final_layer.linear(h).transpose(1, 2)


# --- the encoder, chunk by chunk -------------------------------------------------------------


def rel_positions(size: int, dim: int) -> torch.Tensor:
    """EspnetRelPositionalEncoding.position_encoding(size): [1, 2 size - 1, D], relative
    positions size-1 … -(size-1)."""
    pos = torch.arange(size, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * -(math.log(10000.0) / dim))
    positive, negative = torch.zeros(size, dim), torch.zeros(size, dim)
    positive[:, 0::2], positive[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    negative[:, 0::2], negative[:, 1::2] = torch.sin(-pos * div), torch.cos(-pos * div)
    return torch.cat([torch.flip(positive, [0]), negative[1:]], dim=0)[None]


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """RelPositionMultiHeadedAttention.rel_shift, as published (also on t1 < t2)."""
    b, h, t1, n = x.shape
    padded = torch.cat([x.new_zeros(b, h, t1, 1), x], dim=-1).view(b, h, n + 1, t1)
    return padded[:, :, 1:].view_as(x)[:, :, :, : n // 2 + 1]


def conformer_chunk(layer, x, cache: dict):
    """ConformerEncoderLayer with RelPositionMultiHeadedAttention over cache + chunk, no mask."""
    attn = layer.self_attn
    h = layer.norm_mha(x)
    b, t, _ = h.shape
    q = attn.linear_q(h).view(b, t, attn.h, attn.d)
    k = attn.linear_k(h).view(b, t, attn.h, attn.d).transpose(1, 2)
    v = attn.linear_v(h).view(b, t, attn.h, attn.d).transpose(1, 2)
    if "k" in cache:
        k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
    cache["k"], cache["v"] = k, v
    pos = rel_positions(k.shape[2], x.shape[2]).to(x)
    p = attn.linear_pos(pos).view(1, -1, attn.h, attn.d).transpose(1, 2)
    ac = (q + attn.pos_bias_u).transpose(1, 2) @ k.transpose(-2, -1)
    bd = (q + attn.pos_bias_v).transpose(1, 2) @ p.transpose(-2, -1)
    if ac.shape != bd.shape:
        bd = rel_shift(bd)
    scores = (ac + bd) / math.sqrt(attn.d)
    out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, -1)
    x = x + attn.linear_out(out)
    return x + layer.feed_forward(layer.norm_ff(x))


def encoder_chunk(enc, codes_emb: torch.Tensor, last: bool, cache: dict):
    """UpsampleConformerEncoderV2.forward_chunk: codes_emb [B, dt + 3, D] the chunk's codes
    and the 3 after it (input embeddings), or [B, dt, D] for the last chunk, whose look-ahead
    is 3 zero frames after the linear embedding → [B, 2 dt, D]."""
    xs = enc.embed(codes_emb)
    pre = enc.pre_lookahead_layer
    if last:
        xs = F.pad(xs, (0, 0, 0, pre.lookahead))
    h = F.leaky_relu(pre.conv1(xs.transpose(1, 2)))  # [B, D, dt]: each code with its 3 next
    if "pre" not in cache:
        cache["pre"] = h.new_zeros(h.shape[0], h.shape[1], 2)
    h_cat = torch.cat([cache["pre"], h], dim=2)
    cache["pre"] = h[..., -2:]
    xs = pre.conv2(h_cat).transpose(1, 2) + xs[:, : -pre.lookahead]
    for i, layer in enumerate(enc.encoders):
        xs = conformer_chunk(layer, xs, cache.setdefault(f"enc{i}", {}))
    up = F.interpolate(xs.transpose(1, 2), scale_factor=2.0, mode="nearest")
    if "up" not in cache:
        cache["up"] = up.new_zeros(up.shape[0], up.shape[1], 4)
    up_cat = torch.cat([cache["up"], up], dim=2)
    cache["up"] = up_cat[..., -4:]
    xs = enc.up_embed(enc.up_layer.conv(up_cat).transpose(1, 2))
    for i, layer in enumerate(enc.up_encoders):
        xs = conformer_chunk(layer, xs, cache.setdefault(f"up{i}", {}))
    return enc.after_norm(xs)


# --- the flow --------------------------------------------------------------------------------


def stream_flow(flow, prompt: list[int], prompt_mel, speaker, codes: list[int], chunk: int = 25):
    """setup_cache on the prompt, then inference_chunk per `chunk` codes (+ look-ahead; the
    last chunk is the rest, which must leave the one before it its look-ahead, as the
    official loop's 28-code chunks do): the generated codes' mel [M, 2 len(codes)].
    prompt_mel [2 len(prompt), M]; speaker [E]."""
    cfg, r = flow.cfg, flow.token_mel_ratio
    la = cfg.pre_lookahead_len
    est = flow.decoder.estimator
    spks = flow.spk_embed_affine_layer(F.normalize(speaker[None], dim=1))
    t_span = flow.t_span
    enc_cache: dict = {}
    est_caches = [[{} for _ in est.blocks] for _ in range(len(t_span) - 1)]
    allcodes = prompt + codes
    emb = flow.input_embedding(torch.tensor([allcodes]))
    bounds = [(0, len(prompt))]
    bounds += [(s, min(s + chunk, len(allcodes))) for s in range(len(prompt), len(allcodes), chunk)]
    out = []
    for s, e in bounds:
        last = e == len(allcodes)
        window = emb[:, s:e] if last else emb[:, s : e + la]
        if not last and window.shape[1] < e - s + la:
            raise ValueError("a chunk before the last one needs its 3 look-ahead codes")
        mu = flow.encoder_proj(encoder_chunk(flow.encoder, window, last, enc_cache))
        mu = mu.transpose(1, 2)
        frames = torch.arange(r * s, r * e)
        x = flow.noise[0][:, frames][None]
        cond = torch.zeros_like(mu)
        if s == 0:
            cond = prompt_mel.T[None]
        mu2, spks2, cond2 = (torch.cat([v, torch.zeros_like(v)]) for v in (mu, spks, cond))
        for step in range(1, len(t_span)):
            t, dt = t_span[step - 1], t_span[step] - t_span[step - 1]
            v = dit_chunk(
                est, torch.cat([x, x]), mu2, t.expand(2), spks2, cond2, est_caches[step - 1]
            )
            x = x + dt * ((1 + cfg.inference_cfg_rate) * v[:1] - cfg.inference_cfg_rate * v[1:])
        if s > 0:
            out.append(x[0])
    return torch.cat(out, dim=1)
