"""What a KV page in use adds to a decode turn, learned from the live turns (no torch).

At warm-up the engine prices a page at its bytes over the device's copy bandwidth
(engine/memory_bandwidth.py), or on a CPU by measuring turns over short and long contexts
(engine/warm_up_calibration.py). What a page really costs served depends on what runs beside the
attention kernels (the codec's kernels on the same SMs, their precision, the batch), and it
moves with them: Orpheus' capacity points on an H200 fitted 0.217-0.250 µs a page, and at a
peak's 43,000 pages every 0.01 µs is 0.4 ms of a 14-ms turn (BENCHMARKS.md). So the price is
refitted from the live turns: turn seconds = fixed + per row × rows + price × pages, least
squares over the last `PRICE_WINDOW` turns, fitted twice so that turns far off the first line
(a collection, a page fault) move nothing. Only where the turns read widely different numbers of pages at like rows
can the two parts be told apart (while contexts grow, or streams of different ages share the
batch): until the fit's standard error on the price is within `MAX_PRICE_ERROR` of the
warm-up's, over at least `MIN_TURNS` turns, the warm-up's price stands. The learned price
stays within `PRICE_BOUNDS` of the warm-up's, so a noisy window can never price pages at
nothing.
"""

from __future__ import annotations

import numpy as np

from engine.turn_cost import SampleWindow

PRICE_WINDOW = 2048  # live decode turns (~20 s at a hundred turns a second)
MIN_TURNS = 256
MAX_PRICE_ERROR = 0.03  # the fit's standard error on the price, in shares of the warm-up's
PRICE_BOUNDS = (0.8, 1.5)  # the learned price, in shares of the warm-up's
REFIT_TURNS = 64  # the price is refitted after this many new turns (asked at every decision)
OUTLIER_SPREADS = 5.0  # a turn this many median deviations off the first fit is left out


class PagePrice:
    """The seconds a KV page in use adds to a decode turn: the warm-up's `prior_s` until the
    live turns say better."""

    def __init__(self, window: int = PRICE_WINDOW) -> None:
        self.prior_s = 0.0
        self._turns = SampleWindow(window)
        self._fitted_version = 0  # the window's version when the price was last fitted
        self._learned: float | None = None

    def observe(self, rows: int, pages: int, seconds: float) -> None:
        """A live decode turn of `rows` rows that read `pages` KV pages in `seconds`."""
        if rows >= 1 and seconds >= 0:
            self._turns.append(rows, pages, seconds)

    def clear_live(self) -> None:
        """Forget the live turns and what they taught."""
        self._turns.clear()
        self._fitted_version = self._turns.version
        self._learned = None

    @property
    def learned(self) -> bool:
        return self._learned is not None

    def seconds(self) -> float:
        """The price of a page in use: learned from the live turns where they tell it, else
        the warm-up's (0: pages unpriced)."""
        if self.prior_s <= 0:
            return 0.0
        if self._turns.version - self._fitted_version >= REFIT_TURNS:
            version, turns = self._turns.snapshot()
            self._fitted_version = version
            fitted = self._fit(turns)
            if fitted is not None:  # else the last trusted price stands
                self._learned = fitted
        return self.prior_s if self._learned is None else self._learned

    def _fit(self, turns: tuple[tuple[float, ...], ...]) -> float | None:
        if len(turns) < MIN_TURNS:
            return None
        rows, pages, secs = np.array(turns, dtype=np.float64).T
        if not pages.any():
            return None
        full = np.stack([np.ones_like(rows), rows, pages], axis=1)
        coef, *_ = np.linalg.lstsq(full, secs, rcond=None)
        # Once more without the turns far off the line (a collection, a page fault).
        residual = secs - full @ coef
        spread = np.median(np.abs(residual - np.median(residual)))
        kept = np.abs(residual) <= OUTLIER_SPREADS * max(float(spread), 1e-6)
        if kept.sum() < MIN_TURNS:
            return None
        full, secs = full[kept], secs[kept]
        coef, *_ = np.linalg.lstsq(full, secs, rcond=None)
        # Trusted only as far as the turns tell the pages' part from the rows': its standard
        # error is the turns' noise over the spread of pages the rows do not explain, which
        # is small while both grow together (a ramp of arrivals).
        noise = float(np.sum((secs - full @ coef) ** 2)) / max(1, len(secs) - 3)
        by_rows = full[:, :2]
        explained, *_ = np.linalg.lstsq(by_rows, full[:, 2], rcond=None)
        unexplained = float(np.sum((full[:, 2] - by_rows @ explained) ** 2))
        if unexplained <= 0 or np.sqrt(noise / unexplained) > MAX_PRICE_ERROR * self.prior_s:
            return None
        low, high = PRICE_BOUNDS
        return float(np.clip(coef[2], low * self.prior_s, high * self.prior_s))
