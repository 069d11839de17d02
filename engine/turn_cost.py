"""What a decode turn of the engine loop costs as a function of its rows (no torch).

A turn is the time between the starts of two LLM steps while the loop is busy: the step,
the inline codec's share, the host's work and whatever else shares the machine. Real-time
admission needs it at the batch a newcomer would make, which a loaded engine rarely runs:
under the scheduler's lead caps only the streams short of audio decode, so live turns carry
fewer rows than there are streams. So the cost is a line, turn seconds = fixed + per_row x
rows, fitted by weighted least squares to the last `window` live turns of every size (each
size's median turn, weighing as many turns as it has), and extrapolated along the measured
slope:

- **Seeded by the warm-up's bursts** (`seed`: each burst's decode turns' mean, or median
  beside a threaded codec: engine/warm_up_calibration.py): each figure weighs as much as `PRIOR_WEIGHT` live turns
  while the window fills, and fades out as it does. Burst figures are dearer than steady
  turns (every first chunk hits the codec at once), so once live turns of several sizes are
  in, they alone decide; live turns of a single size say nothing about the slope, so the
  bursts then keep a weight of one turn each to anchor it.
- **No steeper than the bursts on a GPU** (`slope_bound_by_bursts`, set by the warm-up where
  it prices KV pages from the device's bandwidth: engine/warm_up_calibration.py): a burst's
  turns are the dearer ones at every size there (each row's first chunk
  hits the codec in the same turns), so where the live turns' slope comes out steeper than
  the bursts' (turns of a narrow range of sizes, noisy, or dearer for a while as arrivals'
  first chunks crowd the codec), the line takes the bursts' slope through the live turns'
  weighted mean: their level, the bursts' growth. On an H200 serving Orpheus, windows of the
  ramp's turns fitted 0.019-0.023 ms a row where the bursts' was 0.008-0.010 and the served
  points' 0.004-0.006, and admission, pricing 336 rows along them, let in 154-211 streams
  where 336 hold (BENCHMARKS.md). On an H100 the bursts' median turns grow 0.005-0.006 ms
  a row, the served points' least squares -0.003 to +0.003.
- **No shallower than the live turns on a CPU**: there the live turns may rightly be the
  steeper, since every stream's audio is encoded and sent by the gateway on the same cores,
  work the bursts (no listeners) do not have. So once the live turns span two sizes, a slope
  of theirs steeper than the fit with the bursts replaces it, beyond their sizes too. With
  pages unpriced, voxgate-tiny's live turns grew 2-3 ms a row (their contexts too) where its
  bursts grew 0.5: anchored by the bursts, a ramp on one core priced room for ~50 streams in
  its first seconds, let in 14-16 and 6-10 of them ran late; with the live slope, 13-14 went
  in and 0-1 ran late (BENCHMARKS.md).
- **Never cheaper than measured, in the large**: a larger batch never costs less per step
  than a smaller one, so the sizes' median live turns (each of `FLOOR_SAMPLES` turns or more
  in the window) floor the prediction at every size above them, made non-decreasing first by
  pooling adjacent violators (`rising`: where a size's median sits above a larger size's,
  both become their mean, weighted by their turns). The highest of dozens of noisy medians
  sits above all of their means, and one crowded moment of a ramp (a burst of arrivals'
  verdicts, a collection) can make one size dear among cheaper ones: as the running maximum,
  8 turns at 155 rows 1.3-2 ms over their neighbours priced an H100's ~250-row turns 1.0 ms
  dear and decided every one of a run's 19 refusals at submit, where the pooled floors let
  13 of them in (docs/benchmark-history.md, 2026-12-08). A step up that larger sizes confirm
  stands. The outlook's records keep the line beside the floored turn, so a replay shows what
  floors cost.

- **Bent where the bursts bend, past the live sizes** (a GPU's, with `slope_bound_by_bursts`):
  a GPU's GEMMs turn compute-bound past the roofline's ridge, and the turn grows faster from
  there: an H200's Orpheus bursts grew 0.007 ms a row up to 256 rows and ~0.024 from 256 to
  336 (an H100's ridge, ~300 rows, lies past its edge). The live line, fitted to the ramp's
  small batches, misses that when it prices the plateau, so past the largest live size the
  prediction adds what the bursts grew beyond their mean slope over the live sizes (their
  figures joined by straight lines): nothing where they grow straight, the bend where they
  turn up, also once the live sizes pass the ridge while the line is still the smaller
  batches'. In the simulator with such a ridge (`--ridge 256,0.02`, H200 costs; 320 hold),
  the line alone let in 331 of 336 with 5 late and 348 of 380 all late; bent, 308 and 313,
  none late; on a straight device it changes nothing (docs/benchmark-history.md,
  2026-12-08).

Thread-safe for one writer (the engine loop) and readers elsewhere (stats from the
gateway's thread): readers fit a copy of the window.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

LIVE_WINDOW = 256  # live turns the fit looks at (~3 s on an H200, ~10 s on a CPU)
PRIOR_WEIGHT = 4.0  # a warm-up burst's figure, in live turns, while the window is empty
FLOOR_SAMPLES = 8  # live turns of a size before their median floors the prediction


@dataclass(frozen=True)
class CostLine:
    """seconds = fixed_s + per_unit_s x size: a turn's by its rows, a codec job's by the
    seconds of audio it made (engine/realtime_capacity.py)."""

    fixed_s: float
    per_unit_s: float

    def at(self, size: float) -> float:
        return self.fixed_s + self.per_unit_s * size


@dataclass(frozen=True)
class _Model:
    """A fit of the window: the line, the floors (the sizes with enough turns, their medians
    made non-decreasing), the live sizes' range, and the warm-up bursts' figures by rows
    where they shape the turn past it (a GPU's)."""

    fit: CostLine | None
    floor_sizes: np.ndarray
    floors: np.ndarray
    live: tuple[int, int] | None  # the smallest and largest live sizes
    burst_sizes: np.ndarray | None
    burst_s: np.ndarray | None


def _bend(
    sizes: np.ndarray, seconds: np.ndarray, live: tuple[int, int], rows: np.ndarray
) -> np.ndarray:
    """What the bursts (their figures joined by straight lines, past the last along the last
    two's slope) grew from the largest live size to each of `rows` beyond their mean slope
    over the live sizes `live` (smallest, largest), the range the live line was fitted on: 0
    up to the largest live size and wherever they grow no steeper than there; past a GPU's
    roofline ridge, the extra cost of a row (`rows` an array)."""
    slopes = np.diff(seconds) / np.diff(sizes)

    def along(r: np.ndarray) -> np.ndarray:
        inside = np.interp(r, sizes, seconds)
        return np.where(r > sizes[-1], seconds[-1] + slopes[-1] * (r - sizes[-1]), inside)

    lowest, reach = (np.array([float(size)]) for size in live)
    if reach[0] > lowest[0]:
        slope = (along(reach) - along(lowest)) / (reach - lowest)
    else:  # one live size: the bursts' slope just below it
        slope = slopes[np.clip(np.searchsorted(sizes, reach, side="left") - 1, 0, len(slopes) - 1)]
    grown = along(rows) - along(reach) - slope * (rows - reach)
    return np.where(rows > reach, np.maximum(grown, 0.0), 0.0)


class SampleWindow:
    """The last `size` samples of a live measurement (a turn's rows and seconds, a codec job's
    audio and seconds, a turn's rows, pages and seconds): appended by the engine loop, copied
    by readers on other threads (the gateway's stats), with a version that changes with every
    change, so that a fit of them is computed once per version."""

    def __init__(self, size: int) -> None:
        self._samples: deque[tuple[float, ...]] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.version = 0

    def append(self, *sample: float) -> None:
        with self._lock:
            self._samples.append(sample)
            self.version += 1

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()
            self.version += 1

    def snapshot(self) -> tuple[int, tuple[tuple[float, ...], ...]]:
        """The version and a copy of the samples, taken together."""
        with self._lock:
            return self.version, tuple(self._samples)

    def __len__(self) -> int:
        return len(self._samples)


class TurnCostModel:
    def __init__(
        self,
        window: int = LIVE_WINDOW,
        prior_weight: float = PRIOR_WEIGHT,
        page_price: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.window = window
        self.prior_weight = prior_weight
        # Seconds a KV page read adds to a turn (engine/page_price.py): each live turn is
        # booked less its pages at the price of the fit, not of the turn, so that a price
        # learned later applies to every turn in the window alike.
        self.page_price = page_price
        self.slope_bound_by_bursts = False  # a GPU's: see the module's notes
        self._prior: dict[int, float] = {}
        self._prior_version = 0
        self._live = SampleWindow(window)
        self._cache: tuple[tuple[int, int, bool, float], _Model] | None = None

    def seed(self, rows: int, seconds: float) -> None:
        """A warm-up burst's mean turn at `rows` (replaces an earlier figure at that size)."""
        if rows >= 1 and seconds >= 0:
            self._prior[rows] = seconds
            self._prior_version += 1

    def observe(self, rows: int, seconds: float, pages: int = 0) -> None:
        """A live decode turn of `rows` rows that took `seconds`, reading `pages` KV pages."""
        if rows >= 1 and seconds >= 0:
            self._live.append(rows, seconds, pages)

    def clear_live(self) -> None:
        """Forget the live turns (the warm-up's own, with their one-off compiles)."""
        self._live.clear()

    @property
    def measured(self) -> bool:
        return bool(self._prior) or bool(self._live)

    @property
    def seeds(self) -> dict[int, float]:
        """The warm-up's figures by rows (`seed`)."""
        return dict(self._prior)

    @property
    def live_turns(self) -> int:
        return len(self._live)

    def fit(self) -> CostLine | None:
        """The fitted line, None while nothing is measured."""
        return self._model().fit

    def predict(self, rows: int) -> float | None:
        """Expected seconds of a turn of `rows` rows; None while nothing is measured."""
        cost = self.predict_rows(np.array([rows]))
        return None if cost is None else float(cost[0])

    def predict_rows(self, rows: np.ndarray) -> np.ndarray | None:
        """Expected seconds of a turn at each of `rows` (an int array); None while nothing is
        measured: the line, at least the floors of the sizes up to each, and past the largest
        live size the bend the bursts took there (`_bend`)."""
        model = self._model()
        if model.fit is None:
            return None
        at = rows.astype(np.float64)
        cost = self._floored(model, at)
        if model.burst_sizes is not None and model.live is not None:
            cost = cost + _bend(model.burst_sizes, model.burst_s, model.live, at)
        return cost

    @staticmethod
    def _floored(model: _Model, rows: np.ndarray) -> np.ndarray:
        """The line at `rows`, at least the floors of the sizes up to each."""
        assert model.fit is not None
        cost = model.fit.fixed_s + model.fit.per_unit_s * rows
        if len(model.floor_sizes):
            at = np.searchsorted(model.floor_sizes, rows, side="right") - 1
            cost = np.where(at >= 0, np.maximum(cost, model.floors[np.maximum(at, 0)]), cost)
        return cost

    # --- the fit ---------------------------------------------------------------------------------
    def _model(self) -> _Model:
        price = self.page_price()
        cache = self._cache
        if cache is not None and cache[0] == self._inputs_version(self._live.version, price):
            return cache[1]
        live_version, turns = self._live.snapshot()
        version = self._inputs_version(live_version, price)
        prior = dict(self._prior)
        # Each size's median turn (its pages at the price taken off), weighing as many turns
        # as it has: one slow turn (a garbage collection, a page fault) moves nothing.
        sizes, medians, counts = _medians_by_size(turns, price)
        measured = list(zip(sizes.tolist(), medians.tolist(), counts.tolist(), strict=True))
        weight = self._prior_weight(len(turns), len(sizes))
        points = measured + [(rows, seconds, weight) for rows, seconds in prior.items()]
        fit = weighted_line(points)
        if fit is not None and measured and len(prior) > 1:
            if self.slope_bound_by_bursts:
                bursts = weighted_line([(rows, seconds, 1.0) for rows, seconds in prior.items()])
                if bursts is not None and fit.per_unit_s > bursts.per_unit_s:
                    fit = line_with_slope(points, bursts.per_unit_s)
            elif len(measured) > 1:
                alone = weighted_line(measured)
                if alone is not None and alone.per_unit_s > fit.per_unit_s:
                    fit = alone
        steady = counts >= FLOOR_SAMPLES
        shaped = self.slope_bound_by_bursts and len(prior) > 1
        burst_sizes = np.array(sorted(prior), dtype=np.float64) if shaped else None
        model = _Model(
            fit,
            sizes[steady],
            rising(medians[steady], counts[steady]),
            (int(sizes[0]), int(sizes[-1])) if len(sizes) else None,
            burst_sizes,
            None if burst_sizes is None else np.array([prior[int(r)] for r in burst_sizes]),
        )
        self._cache = (version, model)
        return model

    def _inputs_version(self, live_version: int, price: float) -> tuple[int, int, bool, float]:
        """What a fit depends on: the live turns, the seeds, whether they bound the slope and
        a KV page's price."""
        return live_version, self._prior_version, self.slope_bound_by_bursts, price

    def _prior_weight(self, live_turns: int, live_sizes: int) -> float:
        fading = self.prior_weight * max(0.0, 1.0 - live_turns / self.window)
        return max(fading, 1.0) if live_sizes < 2 else fading


def weighted_line(points: list[tuple[float, float, float]]) -> CostLine | None:
    """Weighted least squares of seconds on size (rows; a codec job's audio seconds), with a
    slope >= 0 and a fixed cost >= 0, from (size, seconds, weight) points. Points of one size
    only: cost in proportion to size (pessimistic for a GPU, whose small batches cost nearly
    the same)."""
    total = sum(w for _, _, w in points)
    if total <= 0:
        return None
    mean_r, mean_s = _weighted_means(points)
    srr = sum(w * (r - mean_r) ** 2 for r, _, w in points)
    if srr <= 1e-9 * total:
        return CostLine(0.0, mean_s / mean_r)
    slope = sum(w * (r - mean_r) * (s - mean_s) for r, s, w in points) / srr
    if slope < 0:
        return CostLine(mean_s, 0.0)
    fixed = mean_s - slope * mean_r
    if fixed < 0:  # through the origin instead
        rr = sum(w * r * r for r, _, w in points)
        return CostLine(0.0, sum(w * r * s for r, s, w in points) / rr)
    return CostLine(fixed, slope)


def line_with_slope(points: list[tuple[float, float, float]], slope: float) -> CostLine:
    """The line of `slope` through the weighted mean of (size, seconds, weight) `points` (least
    squares with the slope given), its fixed cost >= 0."""
    mean_r, mean_s = _weighted_means(points)
    return CostLine(max(0.0, mean_s - slope * mean_r), slope)


def _weighted_means(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """The weighted means of size and seconds of (size, seconds, weight) points, whose weights
    add up to more than 0."""
    total = sum(w for _, _, w in points)
    return sum(w * r for r, _, w in points) / total, sum(w * s for _, s, w in points) / total


def rising(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence nearest to `values` in least squares weighted by `weights`
    (isotonic regression by pooling adjacent violators): where a value sits above one after
    it, both become their weighted mean."""
    blocks: list[tuple[float, float, int]] = []  # (mean, weight, values pooled)
    for value, weight in zip(values.tolist(), weights.tolist(), strict=True):
        mean, total, pooled = value, weight, 1
        while blocks and blocks[-1][0] > mean:
            before, before_weight, before_pooled = blocks.pop()
            mean = (before * before_weight + mean * total) / (before_weight + total)
            total, pooled = before_weight + total, before_pooled + pooled
        blocks.append((mean, total, pooled))
    return np.repeat([b[0] for b in blocks], [b[2] for b in blocks]).astype(np.float64)


def _medians_by_size(
    turns: tuple[tuple[float, ...], ...], page_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The live turns (rows, seconds, pages) grouped by rows, each turn less its pages at
    `page_s` (at least 0): the sizes in order, each one's median seconds
    (statistics.median's) and its number of turns."""
    if not turns:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
    rows, seconds, pages = np.array(turns, dtype=np.float64).T
    seconds = np.maximum(0.0, seconds - page_s * pages)
    order = np.lexsort((seconds, rows))
    rows, seconds = rows[order].astype(np.int64), seconds[order]
    sizes, starts, counts = np.unique(rows, return_index=True, return_counts=True)
    upper = starts + counts // 2
    lower = np.where(counts % 2 == 1, upper, upper - 1)
    return sizes, (seconds[lower] + seconds[upper]) / 2.0, counts
