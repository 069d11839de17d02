"""SNAC in float16 only where the loaded weights decode faithfully in it
(models/codecs/snac_precision.py; `--snac-fp16`, the CUDA default)."""

import logging

import torch
from snac import SNAC

from models.codecs.snac import SnacDetokenizer
from models.codecs.snac_checkpoint import tiny_snac_config
from models.codecs.snac_precision import (
    MAX_RELATIVE_ERROR,
    half_precision_check,
    to_half_if_faithful,
)


def _served_snac(seed: int = 0) -> SNAC:
    """A tiny SNAC with random weights as the detokenizer serves it (weight norm folded,
    positional noise)."""
    torch.manual_seed(seed)
    return SnacDetokenizer(SNAC(**tiny_snac_config())).model


def _dtypes(model: SNAC) -> set[torch.dtype]:
    return {p.dtype for p in model.parameters()}


def test_weights_that_decode_faithfully_are_served_in_float16():
    model = _served_snac()
    check = half_precision_check(model)
    assert 0 < check.relative_error < MAX_RELATIVE_ERROR and check.faithful
    assert _dtypes(model) == {torch.float32}  # the check leaves the model as it was
    assert to_half_if_faithful(model)
    assert _dtypes(model) == {torch.float16}


def test_weights_whose_activations_leave_float16s_range_stay_float32(caplog):
    model = _served_snac()
    with torch.no_grad():
        model.decoder.model[1].weight.mul_(1e5)  # activations far past float16's 65,504
    before = {name: p.clone() for name, p in model.named_parameters()}
    assert not half_precision_check(model).faithful
    with caplog.at_level(logging.WARNING, logger="voxgate.models"):
        assert not to_half_if_faithful(model)
    assert "stays in float32" in caplog.text and "--no-snac-fp16" in caplog.text
    # Untouched: the float32 weights are the loaded ones, not a round trip through float16.
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32 and torch.equal(p, before[name]), name
