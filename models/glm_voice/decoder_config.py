"""THUDM/glm-4-voice-decoder's `config.yaml` (CosyVoice 1 HyperPyYAML) → typed settings, and
the same layout written from sizes (the published sizes, or the tiny preset's).

The file also holds a `llm:` section (CosyVoice 1's text-to-token LM) that GLM-4-Voice never
uses; it is ignored. Tags are read as data by cosyvoice2.config.read_yaml (nothing imported)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from models.checkpoint_errors import CheckpointError
from models.codecs.flow_hift.masked_flow import MaskedFlowConfig
from models.cosyvoice2.config import HiftConfig, parse_hift, read_yaml

CONFIG_FILE = "config.yaml"

# The published sizes (THUDM/glm-4-voice-decoder config.yaml).
REAL_SIZES = {
    "vocab_size": 16384,
    "input_size": 512,
    "encoder_dim": 512,
    "encoder_heads": 8,
    "encoder_linear_units": 2048,
    "encoder_blocks": 6,
    "block_size": 10,
    "channels": [256, 256],
    "attention_head_dim": 64,
    "n_blocks": 4,
    "num_mid_blocks": 12,
    "num_heads": 8,
    "hift_base_channels": 512,
    "f0_cond_channels": 512,
}


@dataclass(frozen=True)
class GlmDecoderConfig:
    sample_rate: int
    flow: MaskedFlowConfig
    hift: HiftConfig


def _get(section, key: str, where: str):
    try:
        return section[key]
    except (KeyError, TypeError):
        raise CheckpointError(f"{CONFIG_FILE} lacks {where}.{key}") from None


def parse_decoder_config(raw: dict) -> GlmDecoderConfig:
    flow = _get(raw, "flow", "top level")
    enc = _get(flow, "encoder", "flow")
    reg = _get(flow, "length_regulator", "flow")
    cfm = _get(flow, "decoder", "flow")
    est = _get(cfm, "estimator", "flow.decoder")
    cfm_params = _get(cfm, "cfm_params", "flow.decoder")
    cfm_params = cfm_params.get("content", cfm_params)  # omegaconf.DictConfig's payload
    if enc.get("selfattention_layer_type", "block_rel_selfattn") != "block_rel_selfattn":
        raise CheckpointError(
            f"{CONFIG_FILE}: flow.encoder.selfattention_layer_type "
            f"{enc['selfattention_layer_type']!r} is not supported (block_rel_selfattn only)"
        )
    sample_rate = int(raw.get("sample_rate", 22050))
    e = lambda key: _get(enc, key, "flow.encoder")  # noqa: E731
    s = lambda key: _get(est, key, "flow.decoder.estimator")  # noqa: E731
    return GlmDecoderConfig(
        sample_rate=sample_rate,
        flow=MaskedFlowConfig(
            input_size=int(_get(flow, "input_size", "flow")),
            output_size=int(_get(flow, "output_size", "flow")),
            spk_embed_dim=int(_get(flow, "spk_embed_dim", "flow")),
            vocab_size=int(_get(flow, "vocab_size", "flow")),
            input_frame_rate=float(flow.get("input_frame_rate", 12.5)),
            sample_rate=sample_rate,
            encoder_dim=int(e("output_size")),
            encoder_heads=int(e("attention_heads")),
            encoder_linear_units=int(e("linear_units")),
            encoder_blocks=int(e("num_blocks")),
            block_size=int(enc.get("block_size", 25)),  # the reference class's default
            macaron=bool(enc.get("macaron_style", False)),
            conv_kernel=int(enc.get("cnn_module_kernel", 15)) if enc.get("use_cnn_module") else 0,
            regulator_channels=int(_get(reg, "channels", "flow.length_regulator")),
            sampling_ratios=tuple(_get(reg, "sampling_ratios", "flow.length_regulator")),
            estimator_in_channels=int(s("in_channels")),
            estimator_channels=tuple(int(c) for c in s("channels")),
            attention_head_dim=int(s("attention_head_dim")),
            n_blocks=int(s("n_blocks")),
            num_mid_blocks=int(s("num_mid_blocks")),
            num_heads=int(s("num_heads")),
            inference_cfg_rate=float(cfm_params.get("inference_cfg_rate", 0.7)),
            t_scheduler=str(cfm_params.get("t_scheduler", "cosine")),
        ),
        hift=parse_hift(_get(raw, "hift", "top level"), CONFIG_FILE, sine_gen=1),
    )


def load_decoder_config(folder: Path) -> GlmDecoderConfig:
    return parse_decoder_config(read_yaml(folder / CONFIG_FILE))


def decoder_yaml(sizes: dict) -> str:
    """config.yaml in the published layout (flow + hift sections) with `sizes` filled in."""
    z = {**REAL_SIZES, **sizes}
    return f"""# GLM-4-Voice decoder: CosyVoice 1 flow (MaskedDiffWithXvec) + HiFT, 22.05 kHz
__set_seed1: !apply:random.seed [1986]
sample_rate: 22050
spk_embed_dim: 192

flow: !new:cosyvoice.flow.flow.MaskedDiffWithXvec
    input_size: {z["input_size"]}
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: {z["vocab_size"]}
    input_frame_rate: 12.5
    only_mask_loss: True
    encoder: !new:cosyvoice.transformer.encoder.BlockConformerEncoder
        output_size: {z["encoder_dim"]}
        attention_heads: {z["encoder_heads"]}
        linear_units: {z["encoder_linear_units"]}
        num_blocks: {z["encoder_blocks"]}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'block_rel_selfattn'
        block_size: {z["block_size"]}
        input_size: {z["input_size"]}
        use_cnn_module: False
        macaron_style: False
    length_regulator: !new:cosyvoice.flow.length_regulator.InterpolateRegulator
        channels: 80
        sampling_ratios: [1, 1, 1, 1]
    decoder: !new:cosyvoice.flow.flow_matching.ConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
        estimator: !new:cosyvoice.flow.decoder.ConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: {z["channels"]}
            dropout: 0
            attention_head_dim: {z["attention_head_dim"]}
            n_blocks: {z["n_blocks"]}
            num_mid_blocks: {z["num_mid_blocks"]}
            num_heads: {z["num_heads"]}
            act_fn: 'gelu'

hift: !new:cosyvoice.hifigan.generator.HiFTGenerator
    in_channels: 80
    base_channels: {z["hift_base_channels"]}
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 8]
    upsample_kernel_sizes: [16, 16]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.ConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: {z["f0_cond_channels"]}
"""
