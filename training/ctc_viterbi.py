"""CTC forced alignment (Viterbi) and greedy decoding, batched in torch on any device.

The extended label sequence of characters c_0..c_{L-1} is blank, c_0, blank, c_1, …, c_{L-1},
blank (S = 2L + 1 states; odd state 2i+1 is character i). A path starts in state 0 or 1, ends
in state S-1 or S-2, and at each frame stays, moves one state on, or skips a blank between two
*different* characters (two equal characters must be separated by a blank frame). The best
path is found by dynamic programming over frames, vectorised over the batch and all states.

A path visits every odd state, so every character gets at least one frame whenever the
utterance is alignable at all, i.e. frames ≥ L + (number of equal adjacent pairs). Shorter
utterances have no CTC path: they get a uniform spread and score -inf (easy to filter).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NEG = float("-inf")


@dataclass
class Alignment:
    char_index: torch.Tensor  # [B, T] int64: character spoken at each frame (0 on padding)
    score: torch.Tensor  # [B] float32: path log-prob / frames (-inf: not alignable)


def extended_labels(targets: torch.Tensor, target_lengths: torch.Tensor, blank: int):
    """targets [B, L] (padded) → ext [B, S] labels, `skip` [B, S] (may come from s-2), and
    `valid` [B, S] (state exists for that utterance)."""
    b, length = targets.shape
    s = 2 * length + 1
    ext = torch.full((b, s), blank, dtype=torch.long, device=targets.device)
    ext[:, 1::2] = targets
    skip = torch.zeros(b, s, dtype=torch.bool, device=targets.device)
    if length > 1:
        # character state 2i+1 (i ≥ 1) may be entered from 2i-1 when c_i != c_{i-1}
        skip[:, 3::2] = targets[:, 1:] != targets[:, :-1]
    valid = torch.arange(s, device=targets.device)[None] < (2 * target_lengths + 1)[:, None]
    return ext, skip & valid, valid


@torch.no_grad()
def forced_align(
    log_probs: torch.Tensor,
    lengths: torch.Tensor,
    targets: torch.Tensor,
    target_lengths: torch.Tensor,
    blank: int = 0,
) -> Alignment:
    """log_probs [B, T, C] (per-frame log-probabilities), lengths [B] frames, targets [B, L]
    character ids (padded with anything), target_lengths [B] → the Viterbi alignment.

    Blank frames inherit the previous character (leading blanks: character 0), so char_index
    is non-decreasing from 0 to L-1 over each utterance's frames."""
    device = log_probs.device
    b, t_max, _ = log_probs.shape
    lengths, target_lengths = lengths.to(device), target_lengths.to(device)
    ext, skip, valid = extended_labels(targets.to(device).long(), target_lengths, blank)
    s = ext.shape[1]
    # [B, T, S] emission score of each state at each frame; absent states never win
    emit = log_probs.float().gather(2, ext[:, None, :].expand(b, t_max, s))
    emit = emit.masked_fill(~valid[:, None, :], NEG)
    no_skip = torch.full((b, s), NEG, device=device).masked_fill(skip, 0.0)
    pad2 = torch.full((b, 2), NEG, device=device)

    delta = torch.full((b, s), NEG, device=device)
    delta[:, :2] = emit[:, 0, :2]  # start in the first blank or on the first character
    back = torch.zeros(b, t_max, s, dtype=torch.uint8, device=device)  # states moved: 0, 1, 2
    for t in range(1, t_max):
        shifted = torch.cat([pad2, delta], dim=1)  # shifted[:, j + 2] = delta[:, j]
        candidates = torch.stack(
            [delta, shifted[:, 1 : s + 1], shifted[:, :s] + no_skip], dim=0
        )  # [3, B, S]: stay, from s-1, from s-2
        best, step = candidates.max(dim=0)
        live = (t < lengths)[:, None]
        delta = torch.where(live, best + emit[:, t], delta)
        back[:, t] = step.to(torch.uint8)

    # Final state: the last blank or the last character, whichever scores higher.
    rows = torch.arange(b, device=device)
    last = 2 * target_lengths  # index of the final blank
    end_blank = delta[rows, last]
    end_char = torch.where(last > 0, delta[rows, (last - 1).clamp(min=0)], NEG)
    state = torch.where(end_char > end_blank, last - 1, last)
    total = torch.maximum(end_blank, end_char)

    path = torch.zeros(b, t_max, dtype=torch.long, device=device)
    for t in range(t_max - 1, -1, -1):
        live = t < lengths
        path[:, t] = torch.where(live, state, 0)
        moved = back[rows, t, state].long()
        state = torch.where(live & (t > 0), state - moved, state)

    char_index = ((path - 1) // 2).clamp(min=0)  # odd 2i+1 → i; blank 2i → i-1 (0 at start)
    frames = torch.arange(t_max, device=device)[None]
    char_index = char_index.masked_fill(frames >= lengths[:, None], 0)
    feasible = torch.isfinite(total)
    if not bool(feasible.all()):
        uniform = (frames * target_lengths[:, None]) // lengths.clamp(min=1)[:, None]
        uniform = uniform.clamp(max=(target_lengths - 1).clamp(min=0)[:, None])
        uniform = uniform.masked_fill(frames >= lengths[:, None], 0)
        char_index = torch.where(feasible[:, None], char_index, uniform)
    score = total / lengths.clamp(min=1).float()
    return Alignment(char_index, score)


def min_frames(chars: list[int]) -> int:
    """Fewest frames a CTC path over `chars` needs: one per character, plus a blank between
    each pair of equal neighbours."""
    return len(chars) + sum(a == b for a, b in zip(chars, chars[1:], strict=False))


def greedy_decode(
    log_probs: torch.Tensor, lengths: torch.Tensor, blank: int = 0
) -> list[list[int]]:
    """Best class per frame, repeats merged, blanks dropped: one id list per utterance."""
    best = log_probs.argmax(-1).cpu()
    out = []
    for row, n in zip(best, lengths.tolist(), strict=True):
        row = row[:n]
        keep = torch.ones_like(row, dtype=torch.bool)
        keep[1:] = row[1:] != row[:-1]
        out.append([int(c) for c in row[keep] if c != blank])
    return out
