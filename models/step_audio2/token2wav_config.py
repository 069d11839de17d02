"""Step-Audio 2's own token2wav layout (`Step-Audio-2-mini/token2wav/`) → typed settings:

flow.yaml                       HyperPyYAML: `flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec`
                                with an UpsampleConformerEncoderV2 encoder and a CausalConditionalCFM
                                decoder whose estimator is a DiT (decoder_dit.DiT)
flow.pt                         the flow's state dict (CosyVoice 2's names; `decoder.estimator.*`: the DiT)
hift.pt                         HiFTGenerator's state dict (`generator.` prefix)
campplus.onnx                   prompt audio → CAM++ x-vector
speech_tokenizer_v2_25hz.onnx   prompt audio → 25 Hz speech codes

flow.yaml is read as data (models/cosyvoice2/config.read_yaml: tags are never imported). HiFT
has no config in the folder: StepFun's token2wav.py builds `HiFTGenerator()` with its defaults,
CosyVoice 2's 24 kHz HiFT (SineGen2 excitation, upsampling 8 x 5 x 3, iSTFT 16 / 4); only its
widths are read, from hift.pt. Streaming facts from the same token2wav.py: 25-code chunks plus
the encoder's 3 codes of look-ahead; the voice prompt (its codes, its mel as the condition, its
x-vector) is set up once as one chunk before them."""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.flow_hift.dit_config import DitConfig
from models.cosyvoice2.config import EncoderConfig, FlowConfig, HiftConfig, hift_24k, read_yaml

FLOW_FILE = "flow.yaml"
SPEECH_TOKENIZER = "speech_tokenizer_v2_25hz.onnx"
CHUNK_TOKENS = 25  # token2wav.py's CHUNK_SIZE: codes per streaming chunk
SAMPLE_RATE = 24000

FLOW_CLASS = "cosyvoice2.flow.flow.CausalMaskedDiffWithXvec"
ENCODER_CLASS = "cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2"
ESTIMATOR_CLASS = "cosyvoice2.flow.decoder_dit.DiT"


def _get(section, key: str, where: str):
    try:
        return section[key]
    except (KeyError, TypeError):
        raise CheckpointError(f"{FLOW_FILE} lacks {where}.{key}") from None


def _check_class(section: dict, want: str, where: str) -> None:
    got = section.get("__class__") if isinstance(section, dict) else None
    if got != want:
        raise CheckpointError(
            f"{FLOW_FILE}'s {where} is {got!r}, not Step-Audio 2's {want}: "
            "this is not a Step-Audio 2 token2wav folder"
        )


def parse_flow_yaml(raw: dict) -> FlowConfig:
    flow = _get(raw, "flow", "top level")
    _check_class(flow, FLOW_CLASS, "flow")
    enc = _get(flow, "encoder", "flow")
    _check_class(enc, ENCODER_CLASS, "flow.encoder")
    cfm = _get(flow, "decoder", "flow")
    est = _get(cfm, "estimator", "flow.decoder")
    _check_class(est, ESTIMATOR_CLASS, "flow.decoder.estimator")
    g = _get
    stride = int(enc.get("up_stride", 2))
    if stride != 2 or float(enc.get("up_scale_factor", 2)) != 2:
        raise CheckpointError(f"{FLOW_FILE}: flow.encoder.up_stride {stride}; only 2 is supported")
    heads, head_dim = (
        int(g(est, "num_heads", "flow.decoder.estimator")),
        int(est.get("head_dim", 64)),
    )
    mels = int(g(flow, "output_size", "flow"))
    return FlowConfig(
        input_size=int(g(flow, "input_size", "flow")),
        output_size=mels,
        spk_embed_dim=int(g(flow, "spk_embed_dim", "flow")),
        vocab_size=int(g(flow, "vocab_size", "flow")),
        token_mel_ratio=stride,
        pre_lookahead_len=int(enc.get("pre_lookahead_len", 3)),
        encoder=EncoderConfig(
            output_size=int(g(enc, "output_size", "flow.encoder")),
            attention_heads=int(g(enc, "attention_heads", "flow.encoder")),
            linear_units=int(g(enc, "linear_units", "flow.encoder")),
            num_blocks=int(g(enc, "num_blocks", "flow.encoder")),
            static_chunk_size=CHUNK_TOKENS,
            num_up_blocks=int(enc.get("num_up_blocks", 4)),
        ),
        estimator=DitConfig(
            in_channels=int(g(est, "in_channels", "flow.decoder.estimator")),
            out_channels=int(g(est, "out_channels", "flow.decoder.estimator")),
            hidden_size=int(g(est, "hidden_size", "flow.decoder.estimator")),
            depth=int(g(est, "depth", "flow.decoder.estimator")),
            num_heads=heads,
            head_dim=head_dim,
            mlp_ratio=float(est.get("mlp_ratio", 4.0)),
            static_chunk_size=stride * CHUNK_TOKENS,
        ),
        inference_cfg_rate=float(cfm.get("inference_cfg_rate", 0.7)),
        t_scheduler="cosine",  # CausalConditionalCFM's fixed schedule (1 - cos(t pi / 2))
        prompt_chunk=True,
    )


def load_flow_config(folder: Path) -> FlowConfig:
    return parse_flow_yaml(read_yaml(folder / FLOW_FILE))


def hift_config(base_channels: int, f0_channels: int) -> HiftConfig:
    """HiFTGenerator()'s defaults in StepFun's flashcosyvoice (CosyVoice 2's 24 kHz HiFT) at
    the given widths."""
    return hift_24k(base_channels, f0_channels, sine_gen=2)


REAL_HIFT = hift_config(512, 512)


def hift_config_from_state(state: dict[str, torch.Tensor]) -> HiftConfig:
    """The HiFT config for a hift.pt (hift_state's names): widths from conv_pre's bias and the
    F0 predictor's classifier."""
    try:
        base = int(state["conv_pre.bias"].shape[0])
        f0 = int(state["f0_predictor.classifier.weight"].shape[1])
    except KeyError as exc:
        raise CheckpointError(
            f"hift.pt lacks {exc.args[0]}: not a HiFTGenerator state dict"
        ) from None
    return hift_config(base, f0)


# flow.yaml as the published folder writes it (the fields that shape the networks).
_FLOW_YAML = """\
flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec
    input_size: {enc}
    output_size: 80
    spk_embed_dim: 192
    output_type: 'mel'
    vocab_size: 6561
    encoder: !new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2
        input_size: {enc}
        output_size: {enc}
        input_layer: 'linear'
        pre_lookahead_len: 3
        num_blocks: {enc_blocks}
        num_up_blocks: {enc_up_blocks}
        up_stride: 2
        up_scale_factor: 2
        attention_heads: {enc_heads}
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        key_bias: true
        linear_units: {enc_ff}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: true
    decoder: !new:cosyvoice2.flow.flow_matching.CausalConditionalCFM
        inference_cfg_rate: 0.7
        estimator: !new:cosyvoice2.flow.decoder_dit.DiT
            in_channels: 320
            out_channels: 80
            mlp_ratio: 4.0
            depth: {dit_depth}
            num_heads: {dit_heads}
            head_dim: {dit_head_dim}
            hidden_size: {dit_hidden}
"""

# stepfun-ai/Step-Audio-2-mini's token2wav/flow.yaml.
REAL_SIZES = dict(
    enc=512, enc_blocks=6, enc_up_blocks=4, enc_heads=8, enc_ff=2048,
    dit_depth=16, dit_heads=8, dit_head_dim=64, dit_hidden=512,
)  # fmt: skip
TINY_SIZES = dict(
    enc=32, enc_blocks=1, enc_up_blocks=1, enc_heads=2, enc_ff=64,
    dit_depth=2, dit_heads=2, dit_head_dim=16, dit_hidden=32,
)  # fmt: skip
TINY_HIFT = (32, 16)  # HiFT base and F0 predictor widths of the tiny preset


def flow_yaml(sizes: dict) -> str:
    return _FLOW_YAML.format(**sizes)
