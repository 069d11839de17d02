"""`csm-1b --random-weights` (presets.random_csm_1b) builds sesame/csm-1b's published shapes,
nothing downloaded: the Llama-3.2-1B-shaped backbone, the 4-layer depth decoder and Mimi with
its 32 codebooks. Built on the meta device: shapes without allocating 1B parameters."""

from __future__ import annotations

import pytest
import torch

from models.checkpoint_errors import CheckpointError
from models.csm.configs import CSM_1B
from models.registry import load_model

META = torch.device("meta")


def test_csm_1b_random_weights_take_the_published_shapes():
    model = load_model("csm-1b", device=META, dtype=torch.bfloat16, random_weights=True)
    backbone, depth = model.backbone.args, model.depth.args
    assert (backbone.hidden_size, backbone.num_layers, backbone.num_kv_heads) == (2048, 16, 8)
    assert (depth.hidden_size, depth.num_layers, depth.num_kv_heads) == (1024, 4, 2)
    assert model.num_codebooks == model.detok.num_codebooks == CSM_1B["num_codebooks"]
    assert model.detok.codebook_size == CSM_1B["codec_config"]["codebook_size"]
    assert model.facts.name == "csm-1b" and model.facts.sample_rate == 24000
    n = sum(p.numel() for m in (model.backbone, model.depth) for p in m.parameters())
    assert 1.0e9 < n < 1.7e9, n  # "csm-1b": ~1B backbone plus the depth decoder and tables
    assert next(model.backbone.parameters()).dtype == torch.bfloat16
    # Text still tokenizes: the tiny preset's tokenizer has Llama 3's special ids.
    assert model.preprocess("Hello there.", None).token_ids


def test_random_weights_are_for_csm_1b_and_csm_takes_no_codec():
    with pytest.raises(CheckpointError, match="--random-weights works with csm-1b"):
        load_model("tiny-csm", device=META, random_weights=True)
    with pytest.raises(CheckpointError, match="carry their own Mimi codec"):
        load_model("csm-1b", codec="kyutai/mimi", device=META, random_weights=True)
