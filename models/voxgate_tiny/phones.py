"""The phone inventory voxgate-tiny reads: Flite's US English phoneset without stress. Training
(training/phones.py: the teacher's phones, phones-NN.npz) and serving (the phone tokenizer, the
G2P) share it from here, so serving never imports training/."""

from __future__ import annotations

# Flite's US English phoneset (lang/usenglish/us_phoneset.c), without stress: the order is the
# id stored in phones-NN.npz, so only ever append to it.
PHONE_INVENTORY: tuple[str, ...] = (
    "pau",
    "aa", "ae", "ah", "ao", "aw", "ax", "axr", "ay", "b", "ch", "d", "dh", "dx", "eh", "el",
    "em", "en", "er", "ey", "f", "g", "hh", "hv", "ih", "iy", "jh", "k", "l", "m", "n", "nx",
    "ng", "ow", "oy", "p", "r", "s", "sh", "t", "th", "uh", "uw", "v", "w", "y", "z", "zh",
    "h#", "brth",
)  # fmt: skip
PHONE_ID = {p: i for i, p in enumerate(PHONE_INVENTORY)}
PAUSE = "pau"
