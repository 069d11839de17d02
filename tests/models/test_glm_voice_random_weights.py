"""`glm-4-voice-9b --random-weights` (presets.random_glm_voice_9b) builds all three parts at
the published shapes, nothing downloaded: the backbone, the speech tokenizer (so it takes
spoken turns) and the flow + HiFT decoder (so it speaks), sampling under the trained 13 : 26
interleave. Built on the meta device: shapes without allocating 9B parameters."""

from __future__ import annotations

import torch

from models.glm_voice.model import TRAINED_INTERLEAVE
from models.glm_voice.presets import random_glm_voice_9b

META = torch.device("meta")

# THUDM/glm-4-voice-tokenizer config.json: the fields that set the encoder's shapes.
PUBLISHED_TOKENIZER = {
    "d_model": 1280,
    "encoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "encoder_layers": 32,
    "max_source_positions": 1500,
    "num_mel_bins": 128,
    "pooling_kernel_size": 4,
    "pooling_position": 16,
    "pooling_type": "avg",
    "quantize_position": 16,
    "quantize_vocab_size": 16384,
    "quantize_causal_block_size": 200,
    "encoder_causal_convolution": True,
}

# THUDM/glm-4-voice-decoder config.yaml: its flow and hift sections' values (the unused llm
# section and training-only fields left out).
PUBLISHED_DECODER_YAML = """
sample_rate: 22050
spk_embed_dim: 192
flow:
    input_size: 512
    output_size: 80
    spk_embed_dim: 192
    vocab_size: 16384
    input_frame_rate: 12.5
    encoder:
        output_size: 512
        attention_heads: 8
        linear_units: 2048
        num_blocks: 6
        selfattention_layer_type: 'block_rel_selfattn'
        block_size: 10
        input_size: 512
        use_cnn_module: False
        macaron_style: False
    length_regulator:
        channels: 80
        sampling_ratios: [1, 1, 1, 1]
    decoder:
        cfm_params:
            content:
                t_scheduler: 'cosine'
                inference_cfg_rate: 0.7
        estimator:
            in_channels: 320
            out_channels: 80
            channels: [256, 256]
            attention_head_dim: 64
            n_blocks: 4
            num_mid_blocks: 12
            num_heads: 8
hift:
    in_channels: 80
    base_channels: 512
    nb_harmonics: 8
    sampling_rate: 22050
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
    f0_predictor:
        num_class: 1
        in_channels: 80
        cond_channels: 512
"""


def shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in module.named_parameters()}


def test_random_glm_voice_9b_has_the_published_tokenizer_and_decoder_shapes():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    from models.codecs.flow_hift.hift import HiFTGenerator
    from models.codecs.flow_hift.masked_flow import MaskedDiffWithXvec
    from models.cosyvoice2.config import parse_yaml_text
    from models.glm_voice.decoder_config import parse_decoder_config

    model = random_glm_voice_9b(META, torch.bfloat16)
    assert model.interleave is not None and model.interleave.rule == TRAINED_INTERLEAVE
    assert model.facts.accepts_audio and model.graphable_candidates()

    # Speech tokenizer: Whisper's encoder of the published config, its first 16 blocks (the
    # quantiser's position), and the 16384-row codebook.
    encoder = model.speech_tokenizer.encoder
    p = PUBLISHED_TOKENIZER
    whisper_keys = {k: v for k, v in p.items() if k in WhisperConfig().to_dict()}
    with torch.device(META):
        whisper = shapes(WhisperEncoder(WhisperConfig(**whisper_keys)))
    ours = shapes(encoder)
    assert ours.pop("codebook.weight") == (p["quantize_vocab_size"], p["d_model"])
    assert ours == {
        name: shape
        for name, shape in whisper.items()
        if not name.startswith("layer_norm.")
        and not (name.startswith("layers.") and int(name.split(".")[1]) >= p["quantize_position"])
    }
    args = encoder.args
    assert (args.pooling_position, args.pooling_kernel_size, args.pooling_type) == (16, 4, "avg")
    assert (args.causal_block_size, args.causal_convolution) == (200, True)
    assert model.speech_tokenizer.features.feature_size == p["num_mel_bins"]

    # Decoder: the modules the published config.yaml makes, parameter for parameter.
    cfg = parse_decoder_config(parse_yaml_text(PUBLISHED_DECODER_YAML, "config.yaml"))
    with torch.device(META):
        flow, hift = MaskedDiffWithXvec(cfg.flow), HiFTGenerator(cfg.hift)
    hift.fold_weight_norm()
    decoder = model.decoder
    assert shapes(decoder.flow) == shapes(flow)
    assert shapes(decoder.hift) == shapes(hift)
    assert decoder.flow.cfg == cfg.flow and decoder.hift.cfg == cfg.hift
    assert shapes(decoder.flow)["input_embedding.weight"] == (16384, 512)
    assert decoder.sample_rate == 22050 and model.facts.sample_rate == 22050
    assert next(decoder.hift.parameters()).dtype == torch.float32  # HiFT stays float32

    # The backbone's vocabulary holds the speech tokens the decoder reads.
    assert model.ids.num_audio == 16384 and model.shape.vocab_size == 168960
