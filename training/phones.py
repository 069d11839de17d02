"""The teacher's phones: Flite's phone inventory, parsing its `-psdur` output, and turning phone
end times into a per-codec-frame phone index (what training/aligner.py's CTC alignment gives for
characters, here exact: the teacher says which phone it synthesised when).

Flite (`flite -voice slt -t TEXT -psdur -o FILE`) prints `pau:0.162 hh:0.253 aw:0.370 ...`:
each phone with its END time in seconds from the start of the audio it writes to FILE.
"""

from __future__ import annotations

import numpy as np

# The inventory lives with the model (serving reads it too); re-exported for training code.
from models.voxgate_tiny.phones import PHONE_ID, PHONE_INVENTORY  # noqa: F401


def parse_psdur(output: str) -> tuple[list[str], np.ndarray]:
    """Flite's `-psdur` stdout → (phone names, end times in seconds, float64 [n]).

    Flite restarts the clock for each utterance it splits a long text into while the audio runs
    on, so an end time smaller than the previous one continues from the previous utterance's end.
    """
    names, ends, base, last = [], [], 0.0, 0.0
    for item in output.split():
        name, sep, end = item.rpartition(":")
        if not sep or not name:
            raise ValueError(f"unexpected flite -psdur item {item!r} (expected PHONE:SECONDS)")
        t = float(end)
        if t + base < last:
            base = last
        last = t + base
        names.append(name)
        ends.append(last)
    return names, np.array(ends, np.float64)


def phone_ids(names: list[str]) -> np.ndarray:
    """Phone names → int16 ids into PHONE_INVENTORY."""
    unknown = sorted({n for n in names if n not in PHONE_ID})
    if unknown:
        raise ValueError(f"phones {unknown} are not in PHONE_INVENTORY: append them there")
    return np.array([PHONE_ID[n] for n in names], np.int16)


def frame_phone_index(ends_s: np.ndarray, frames: int, frame_rate: float) -> np.ndarray:
    """Per frame, the index (0..len(ends_s)-1) of the phone sounding at the frame's centre.

    ends_s: [phones] end times in seconds from the first sample of the encoded audio (phones the
    trim cut away have negative ends). Frame f covers [f, f+1) / frame_rate, so a phone boundary
    lands at most half a frame from where Flite put it; phones shorter than a frame may get no
    frame. Monotone non-decreasing; frames after the last end carry the last phone.
    Returns int16 [frames]."""
    if len(ends_s) == 0:
        raise ValueError("an utterance without phones has no phone index")
    centres = (np.arange(frames) + 0.5) / frame_rate
    index = np.searchsorted(np.asarray(ends_s, np.float64), centres, side="right")
    return np.minimum(index, len(ends_s) - 1).astype(np.int16)
