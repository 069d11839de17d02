"""Dynamic int8 linear layers for models served on a CPU.

A small SpeechLM on a laptop CPU is bound by reading its fp32 weights for every step's few
rows (voxgate-tiny: ~50 MB a step through a 32 MB L3). Storing the Linear weights as int8 and
quantising each step's activations on the fly (torch's dynamic quantisation, fbgemm kernels)
reads a quarter of the bytes: measured 46.6 → 23.4 ms a step for 4 streams of voxgate-tiny on
2 EPYC cores (BENCHMARKS.md). The numbers change (int8 weights, per-tensor scales), so it is a
choice (`--cpu-int8`), not the default.

torch marks `torch.ao.quantization.quantize_dynamic` deprecated in favour of torchao; it is
still present and tested here on the pinned torch. If a future torch drops it, this says so
instead of failing somewhere deep.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from models.checkpoint_errors import CheckpointError


def quantize_linears_int8(module: nn.Module) -> nn.Module:
    """`module` with every nn.Linear replaced by a dynamically quantised int8 one (CPU only)."""
    quantize = getattr(getattr(torch, "ao", None), "quantization", None)
    quantize = getattr(quantize, "quantize_dynamic", None)
    if quantize is None:
        raise CheckpointError(
            f"this torch ({torch.__version__}) has no torch.ao.quantization.quantize_dynamic: "
            "run without --cpu-int8"
        )
    with warnings.catch_warnings():
        # Its deprecation notices (one per call, one per layer) say nothing a user can act on.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return quantize(module, {nn.Linear}, dtype=torch.qint8)
