"""SNAC's streaming decoder on the GPU with its pieces replayed as CUDA graphs (the engine's
CallableGraphs): the audio equals one whole decode, as on the CPU (tests/models/test_snac.py).

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from snac import SNAC

from engine.cuda_graphs import CallableGraphs
from models.codecs.snac import SnacDetokenizer, tiny_snac_config
from tests.models.test_snac import _frames, _relative_error, _stream_all, _whole

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def test_graphed_streaming_equals_whole_decode():
    torch.manual_seed(0)
    reference = SNAC(**tiny_snac_config()).eval()
    model = SNAC(**tiny_snac_config()).eval()
    model.load_state_dict(reference.state_dict())
    det = SnacDetokenizer(model.to(CUDA), max_streams=8)
    det.enable_cuda_graphs(CallableGraphs(CUDA))
    utterances = [_frames(n, seed=n) for n in (23, 9, 2, 14)]
    streamed = _stream_all(det, utterances, seeds=[0, 1, 2, 3])
    for i, (audio, frames) in enumerate(zip(streamed, utterances, strict=True)):
        assert len(audio) == len(frames) * 2048
        # The whole decode on the CPU: cuDNN convolutions in TF32 (its default) round to ~1e-3
        # of the RMS; a lost or misplaced sample would cost the order of the RMS itself.
        whole = _whole(reference, frames, seed=i)
        assert _relative_error(audio, whole) < 2e-2, i
        assert np.isfinite(audio).all()
