"""GLM-4-Voice's speech tokenizer (published THUDM/glm-4-voice-tokenizer layout, real loader):
where its architecture is Whisper's, its encoder equals transformers' WhisperEncoder on the
same weights; its own parts (causal convolutions, block-causal attention, pooling, the
quantiser) are checked against their definitions."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from models.checkpoint_errors import CheckpointError
from models.glm_voice.presets import TINY_NUM_AUDIO, ensure_tiny_glm_voice
from models.glm_voice.speech_tokenizer import WhisperVQEncoder, load_speech_tokenizer
from models.loader import iter_safetensors, read_config


@pytest.fixture(scope="module")
def tok_dir():
    return ensure_tiny_glm_voice() / "glm-4-voice-tokenizer"


@pytest.fixture(scope="module")
def speech_tokenizer(tok_dir):
    return load_speech_tokenizer(tok_dir, torch.device("cpu"), torch.float32)


def test_encoder_equals_transformers_whisper_encoder_where_the_architecture_matches(tok_dir):
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = read_config(tok_dir)
    tensors = dict(iter_safetensors(tok_dir))
    # Whisper's architecture: centred convolutions, full attention, no pooling (kernel 1).
    positions = 24
    plain = {
        **cfg,
        "encoder_causal_convolution": False,
        "quantize_causal_block_size": None,
        "pooling_kernel_size": 1,
        "max_source_positions": positions,
    }
    from models.glm_voice.speech_tokenizer import WhisperVQArgs

    ours = WhisperVQEncoder(WhisperVQArgs.from_config(plain)).eval()
    trimmed = {k: v[:positions] if "embed_positions" in k else v for k, v in tensors.items()}
    ours.load_published(trimmed)

    keys = {k: v for k, v in plain.items() if k in WhisperConfig().to_dict()}
    ref = WhisperEncoder(WhisperConfig(**keys)).eval()
    ref.load_state_dict(
        {
            k.removeprefix("model.encoder."): v
            for k, v in trimmed.items()
            if k.startswith("model.encoder.") and "codebook" not in k and "positions2" not in k
        }
    )
    mel = torch.randn(2, cfg["num_mel_bins"], 2 * positions)
    with torch.no_grad():
        got, valid = ours.hidden_states(mel, torch.ones(2, 2 * positions, dtype=torch.bool))
        # hidden_states[n]: the input of block n, i.e. the output of the first n blocks
        want = ref(mel, output_hidden_states=True).hidden_states[cfg["quantize_position"]]
    assert valid.all()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_quantiser_picks_the_nearest_codebook_row(speech_tokenizer):
    encoder = speech_tokenizer.encoder
    x = torch.randn(3, 17, encoder.args.d_model) * 2
    brute = torch.stack(
        [
            torch.stack([((encoder.codebook.weight - v) ** 2).sum(1).argmin() for v in row])
            for row in x
        ]
    )
    assert torch.equal(encoder.quantize(x), brute)


def test_twelve_and_a_half_tokens_per_second_and_causality(speech_tokenizer):
    rng = np.random.default_rng(0)
    audio = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    ids = speech_tokenizer.encode(audio)
    assert len(ids) == math.ceil(16000 / 1280) == 13  # 12.5 per second, the last one padded
    assert all(0 <= i < TINY_NUM_AUDIO for i in ids) and len(set(ids)) > 1


def test_block_causal_attention_and_causal_convolutions(speech_tokenizer):
    """Frames see the past and their own 16-frame block (4 pooled frames), never a later
    block: changing the mel from the second block on leaves the first block's output as is.
    (Whisper's feature extractor normalises by the clip's loudest frame, so the property
    holds for mel input, not for audio.)"""
    encoder = speech_tokenizer.encoder
    mel = torch.randn(1, encoder.args.num_mel_bins, 96)  # 48 frames at 50/s: 3 blocks
    valid = torch.ones(1, 96, dtype=torch.bool)
    later = mel.clone()
    later[..., 32:] = torch.randn_like(later[..., 32:])  # from frame 16 (mel frame 32) on
    with torch.no_grad():
        a, _ = encoder.hidden_states(mel, valid)
        b, _ = encoder.hidden_states(later, valid)
        inside = mel.clone()
        inside[..., 30:32] += 1.0  # the first block's last frame: its earlier frames see it
        c, _ = encoder.hidden_states(inside, valid)
    torch.testing.assert_close(a[:, :4], b[:, :4], rtol=0, atol=0)
    assert not torch.allclose(a[:, 4:], b[:, 4:])
    assert not torch.allclose(a[:, 0], c[:, 0])


def test_published_layout_mistakes_are_named(tok_dir):
    cfg = read_config(tok_dir)
    from models.glm_voice.speech_tokenizer import WhisperVQArgs

    args = WhisperVQArgs.from_config(cfg)
    tensors = dict(iter_safetensors(tok_dir))
    del tensors["model.encoder.codebook.weight"]
    with pytest.raises(CheckpointError, match="codebook"):
        WhisperVQEncoder(args).load_published(tensors)
    with pytest.raises(CheckpointError, match="quantize_vocab_size"):
        WhisperVQArgs.from_config({**cfg, "quantize_vocab_size": None})
    bigger = dataclasses.replace(args, d_model=args.d_model * 2)
    with pytest.raises(CheckpointError, match="shape"):
        WhisperVQEncoder(bigger).load_published(dict(iter_safetensors(tok_dir)))
