"""The rows Zonos' tokens are (ModelFacts.row_width = WIDTH), and the delay-pattern rules
applied to each sampled row on the host.

Column 0 is one id space:
    [0, 1026)            a frame of the delayed code grid: codebook 0's code (1024 EOS,
                         1025 mask); columns 1..8 hold codebooks 1..8, columns 9..17 the
                         previous frame's 9 codes (-1 before the first), the window of
                         Zonos' repetition penalty
    PHONEME_BASE + p     phoneme p of the conditioning prefix
    COND_BASE + j        the prefix position of conditioner j (speaker, emotion, fmax, …):
                         column 1 is 1 when the request gives a value (else the learned
                         unconditional vector stands in), columns 2.. the value's float32 bits
Every conditioning value travels inside the prompt's rows, so a request needs no state in the
model, and the embedding of any row is a fixed-shape function of the row alone.

Delay pattern (zonos/codebook_pattern.py): frame t of the grid holds codebook k's code of audio
frame t - k - 1; frame 0 is all mask, and codebook k stays mask in frames 1..k. When codebook
0 draws EOS at frame s, frame s + i carries mask in codebooks < i and EOS in codebook i (its
later codebooks are still drawn): the request ends with frame s + 8, EOS in codebook 8.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.zonos.config import EOS_CODE, MASK_CODE, N_CODEBOOKS

PHONEME_BASE = 2048
COND_BASE = 4096
MAX_VALUES = 128  # the widest conditioning value (the speaker embedding)
WIDTH = 2 + MAX_VALUES
PREVIOUS = slice(N_CODEBOOKS, 2 * N_CODEBOOKS)  # the previous frame's codes in a frame row
ABSENT = -1


def float_bits(values: Sequence[float]) -> list[int]:
    """float32 values → their bit patterns as signed int32 (exact through an int64 row)."""
    return np.asarray(values, dtype=np.float32).view(np.int32).astype(int).tolist()


def frame_row(codes: Sequence[int], previous: Sequence[int] | None) -> tuple[int, ...]:
    prev = list(previous) if previous is not None else [ABSENT] * N_CODEBOOKS
    return tuple([*codes, *prev] + [ABSENT] * (WIDTH - 2 * N_CODEBOOKS))


def phoneme_row(phoneme: int) -> tuple[int, ...]:
    return (PHONEME_BASE + phoneme,) + (ABSENT,) * (WIDTH - 1)


def cond_row(index: int, values: Sequence[float] | None) -> tuple[int, ...]:
    """The prefix position of conditioner `index`; None: the unconditional vector."""
    if values is None:
        return (COND_BASE + index, 0) + (0,) * MAX_VALUES
    bits = float_bits(values)
    return (COND_BASE + index, 1, *bits) + (0,) * (MAX_VALUES - len(bits))


def first_frame() -> tuple[int, ...]:
    """Frame 0 of the delayed grid, the last row of every prompt."""
    return frame_row([MASK_CODE] * N_CODEBOOKS, None)


def eos_frame(output: Sequence[Sequence[int]]) -> int | None:
    """The index in `output` of the frame whose codebook 0 drew EOS, if any."""
    for i, row in enumerate(output):
        if row[0] == EOS_CODE:
            return i
    return None


def follow(output: Sequence[Sequence[int]], drawn: Sequence[int]) -> tuple[int, ...]:
    """The row a step's draw becomes, from the request's output so far: the delay pattern's
    masks, the EOS cascade after codebook 0's EOS, and the previous frame's codes."""
    codes = [int(c) for c in drawn[:N_CODEBOOKS]]
    frame = len(output) + 1  # frame 0 is the prompt's last row
    for k in range(min(frame, N_CODEBOOKS), N_CODEBOOKS):
        codes[k] = MASK_CODE
    end = eos_frame(output)
    if end is not None:
        step = min(frame - (end + 1), N_CODEBOOKS - 1)
        codes[:step] = [MASK_CODE] * step
        codes[step] = EOS_CODE
    previous = output[-1][:N_CODEBOOKS] if output else [MASK_CODE] * N_CODEBOOKS
    return frame_row(codes, previous)


def is_last(row: Sequence[int]) -> bool:
    """The request's final row: EOS reached codebook 8."""
    return row[N_CODEBOOKS - 1] == EOS_CODE
