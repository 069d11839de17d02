"""THUDM/glm-4-voice-decoder's layout → a streaming GlmVoiceDecoder, and the same layout written
with seeded random weights (the tiny preset):

config.yaml   CosyVoice 1 HyperPyYAML (decoder_config.py reads it as data)
flow.pt       MaskedDiffWithXvec state dict (input_embedding, spk_embed_affine_layer, encoder.*,
              encoder_proj, length_regulator.model.*, decoder.estimator.*)
hift.pt       HiFTGenerator state dict (weight-normed convs as weight_g / weight_v)
"""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint_errors import check_state_dict
from models.codecs.flow_hift.audible_weights import make_audible, nudge_off_defaults
from models.codecs.flow_hift.checkpoint import hift_state, load_pt
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.masked_flow import MaskedDiffWithXvec
from models.glm_voice.decoder import DEFAULT_CONTEXT_TOKENS, GlmVoiceDecoder
from models.glm_voice.decoder_config import CONFIG_FILE, decoder_yaml, load_decoder_config
from models.loader import resolve_source

REQUIRED = (CONFIG_FILE, "flow.pt", "hift.pt")


def load_glm_decoder(
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    context_tokens: int | None = DEFAULT_CONTEXT_TOKENS,
) -> GlmVoiceDecoder:
    """`source`: a THUDM/glm-4-voice-decoder folder or repo id. The flow runs in `dtype`, HiFT
    in float32 (its iSTFT and sine phase want it)."""
    folder = resolve_source(source, required=REQUIRED, patterns=("*.yaml", "*.pt", "*.md"))
    cfg = load_decoder_config(folder)
    flow, hift = MaskedDiffWithXvec(cfg.flow), HiFTGenerator(cfg.hift)
    flow_sd = load_pt(folder / "flow.pt")
    check_state_dict(flow.state_dict(), flow_sd, f"{folder / 'flow.pt'}'s tensors")
    flow.load_state_dict(flow_sd)
    hift_sd = hift_state(load_pt(folder / "hift.pt"))
    check_state_dict(hift.state_dict(), hift_sd, f"{folder / 'hift.pt'}'s tensors")
    hift.load_state_dict(hift_sd)
    hift.fold_weight_norm()
    flow = flow.to(device=device, dtype=dtype).eval()
    hift = hift.to(device=device).eval()
    return GlmVoiceDecoder(flow, hift, context_tokens=context_tokens)


def write_decoder_checkpoint(folder: Path, sizes: dict, seed: int) -> None:
    """config.yaml + flow.pt + hift.pt in the published layout, seeded random weights."""
    from models.cosyvoice2.config import read_yaml
    from models.glm_voice.decoder_config import parse_decoder_config

    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(decoder_yaml(sizes))
    cfg = parse_decoder_config(read_yaml(folder / CONFIG_FILE))
    torch.manual_seed(seed)
    flow = MaskedDiffWithXvec(cfg.flow)
    nudge_off_defaults(flow)
    torch.save(flow.state_dict(), folder / "flow.pt")
    hift = {}
    for name, tensor in make_audible(HiFTGenerator(cfg.hift)).state_dict().items():
        name = name.replace("parametrizations.weight.original0", "weight_g")
        hift[name.replace("parametrizations.weight.original1", "weight_v")] = tensor
    torch.save(hift, folder / "hift.pt")


def random_glm_decoder(
    device: torch.device,
    dtype: torch.dtype,
    sizes: dict | None = None,
    seed: int = 0,
    context_tokens: int | None = DEFAULT_CONTEXT_TOKENS,
) -> GlmVoiceDecoder:
    """A decoder of the published config.yaml's shapes (`sizes`: decoder_config.REAL_SIZES
    unless given) with seeded random weights, built on `device` (the meta device: shapes
    only), nothing downloaded; the flow in `dtype`, HiFT in float32 (as load_glm_decoder)."""
    from models.cosyvoice2.config import parse_yaml_text
    from models.glm_voice.decoder_config import parse_decoder_config

    text = decoder_yaml(sizes or {})
    cfg = parse_decoder_config(parse_yaml_text(text, f"the published {CONFIG_FILE}"))
    torch.manual_seed(seed)
    with torch.device(device):
        flow, hift = MaskedDiffWithXvec(cfg.flow), make_audible(HiFTGenerator(cfg.hift))
    hift.fold_weight_norm()
    flow = flow.to(device=device, dtype=dtype).eval()
    hift = hift.to(device=device).eval()
    return GlmVoiceDecoder(flow, hift, context_tokens=context_tokens)
