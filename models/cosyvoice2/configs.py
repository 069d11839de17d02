"""The published CosyVoice 2 configuration and a scaled-down one, as `cosyvoice2.yaml` text in
the published (HyperPyYAML) layout, plus the Qwen2 config.json of the LLM backbone."""

from __future__ import annotations

REPO_ID = "FunAudioLLM/CosyVoice2-0.5B"
QWEN_FOLDER = "CosyVoice-BlankEN"

# The fields of FunAudioLLM/CosyVoice2-0.5B's cosyvoice2.yaml that shape the networks, in its
# layout (training-only sections left out; the loader ignores them anyway).
_YAML = """\
sample_rate: 24000
llm_input_size: {llm_size}
llm_output_size: {llm_size}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: 25
num_decoding_left_chunks: -1

llm: !new:cosyvoice.llm.llm.Qwen2LM
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 6561
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1

flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithXvec
    input_size: {enc}
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: {enc}
        attention_heads: {enc_heads}
        linear_units: {enc_ff}
        num_blocks: {enc_blocks}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: {enc}
        use_cnn_module: False
        macaron_style: False
        static_chunk_size: !ref <chunk_size>
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
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
        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [{est}]
            dropout: 0.0
            attention_head_dim: {est_head_dim}
            n_blocks: {est_blocks}
            num_mid_blocks: {est_mid}
            num_heads: {est_heads}
            act_fn: 'gelu'
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>

hift: !new:cosyvoice.hifigan.generator.HiFTGenerator
    in_channels: 80
    base_channels: {hift}
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.ConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: {f0}
"""

REAL_SIZES = dict(
    llm_size=896,
    enc=512,
    enc_heads=8,
    enc_ff=2048,
    enc_blocks=6,
    est=256,
    est_head_dim=64,
    est_blocks=4,
    est_mid=12,
    est_heads=8,
    hift=512,
    f0=512,
)
TINY_SIZES = dict(
    llm_size=64,
    enc=32,
    enc_heads=2,
    enc_ff=64,
    enc_blocks=1,
    est=32,
    est_head_dim=16,
    est_blocks=1,
    est_mid=1,
    est_heads=2,
    hift=32,
    f0=16,
)


def cosyvoice2_yaml(sizes: dict) -> str:
    return _YAML.format(**sizes)


# CosyVoice-BlankEN/config.json: Qwen2-0.5B.
QWEN2_0_5B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "torch_dtype": "bfloat16",
}

# Scaled down: 2 layers of width 64, a 512-row text vocabulary (the tiny tokenizer's ids fit).
TINY_QWEN2 = {
    **QWEN2_0_5B,
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "bos_token_id": 256,
    "eos_token_id": 256,
    "torch_dtype": "float32",
}
