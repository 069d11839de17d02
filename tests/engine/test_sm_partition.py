"""The SM partition's arithmetic (engine/sm_partition.py); the green context itself is in
tests/gpu/test_sm_partition_gpu.py."""

from __future__ import annotations

import pytest

from engine.config import ConfigError, EngineConfig
from engine.sm_partition import partition_size


def test_partition_rounds_down_to_the_granularity_of_the_device():
    assert partition_size(100, 132, 9) == 96  # H100/H200: groups of 8 SMs
    assert partition_size(3, 132, 9) == 8  # never fewer than one group
    assert partition_size(50, 108, 8) == 48  # A100: groups of 4
    assert partition_size(7, 80, 7) == 6


def test_no_partition_for_zero_or_the_whole_device():
    assert partition_size(0, 132, 9) is None
    assert partition_size(132, 132, 9) is None
    assert partition_size(500, 132, 9) is None


def test_negative_sms_is_an_error():
    with pytest.raises(ValueError, match=">= 0"):
        partition_size(-8, 132, 9)
    with pytest.raises(ConfigError, match="codec_sms"):
        EngineConfig(codec_sms=-1)
