"""SNAC decoded in float16, kept only where the loaded weights decode faithfully in it.

Float16 halves the codec's bytes and lets its 1×1 convs run as half-precision matmuls: on an
H100 the 512-request Orpheus burst ran 2.6 % faster and 248 listeners held where the float32
decoder held 240 (BENCHMARKS.md). Whether a checkpoint's activations stay inside float16's
range is a property of its weights, so it is checked on the weights loaded: seeded random codes
(every code is a real codebook entry) are decoded in both precisions, and the model stays in
float32 when the float16 audio is not finite or differs by more than `MAX_RELATIVE_ERROR` of
its RMS (float16's own rounding costs ~0.1-0.2 %).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import torch
from snac import SNAC

log = logging.getLogger("voxgate.models")

MAX_RELATIVE_ERROR = 0.01  # of the float32 audio's RMS
CHECK_FRAMES = 8  # SNAC frames (2048 samples each) decoded for the check, per row
CHECK_ROWS = 2


@dataclass(frozen=True)
class HalfPrecisionCheck:
    relative_error: float  # RMS of the difference over the float32 audio's RMS (inf: not finite)

    @property
    def faithful(self) -> bool:
        return self.relative_error <= MAX_RELATIVE_ERROR


def _check_codes(model: SNAC, device: torch.device) -> list[torch.Tensor]:
    """Seeded random codes for CHECK_FRAMES frames, one tensor per codebook (coarse first)."""
    gen = torch.Generator().manual_seed(0)
    per_frame = [int(model.vq_strides[0]) // int(s) for s in model.vq_strides]  # 1, 2, 4
    return [
        torch.randint(0, model.codebook_size, (CHECK_ROWS, CHECK_FRAMES * n), generator=gen).to(
            device
        )
        for n in per_frame
    ]


@torch.inference_mode()
def half_precision_check(model: SNAC) -> HalfPrecisionCheck:
    """Decode the check's codes with the model (float32) and with a float16 copy of it; the
    model itself is left as it was."""
    device = next(model.parameters()).device
    codes = _check_codes(model, device)
    reference = model.decode(codes).float()
    audio = copy.deepcopy(model).half().decode(codes).float()
    if not torch.isfinite(audio).all():
        return HalfPrecisionCheck(float("inf"))
    scale = reference.pow(2).mean().sqrt().clamp_min(1e-12)
    return HalfPrecisionCheck(((audio - reference).pow(2).mean().sqrt() / scale).item())


def to_half_if_faithful(model: SNAC, what: str = "SNAC") -> bool:
    """The model in float16 if its weights decode the check's codes faithfully there (True);
    else left in float32, with a warning saying why (False)."""
    check = half_precision_check(model)
    if not check.faithful:
        found = (
            "non-finite values" if check.relative_error == float("inf")
            else f"{100 * check.relative_error:.1f} % of its RMS"
        )  # fmt: skip
        log.warning(
            "%s stays in float32: in float16 its audio differs from float32's by %s (at most "
            "%.0f %% is taken); pass --no-snac-fp16 to skip this check",
            what,
            found,
            100 * MAX_RELATIVE_ERROR,
        )
        return False
    model.half()
    log.info("%s decodes in float16 (%.2f %% of the audio's RMS from float32)", what,
             100 * check.relative_error)  # fmt: skip
    return True
