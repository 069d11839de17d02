"""Real-time admission's warm-up (engine/warm_up_calibration.py): the bursts that seed a turn's
cost by its rows, less the KV pages their turns read."""

from __future__ import annotations

import pytest
import torch

from engine import warm_up_calibration
from engine.config import EngineConfig
from engine.core import EngineCore


class DeviceClock:
    """The engine's clock, advanced after each step that ran the LLM as a GPU's turn would
    take: a fixed part, a part for each of the step's rows and `page_s` a KV page its
    requests hold. Nothing else moves it, so the warm-up's measurements are exact whatever
    the machine's load does to the engine's own choices (a step's rows are its own)."""

    def __init__(self, page_s: float, fixed_s: float = 0.004, row_s: float = 0.0002) -> None:
        self.now, self.page_s, self.fixed_s, self.row_s = 0.0, page_s, fixed_s, row_s

    def __call__(self) -> float:
        return self.now

    def turn(self, core: EngineCore) -> None:
        rows = core.last_timing.batch_size if core.last_timing is not None else 0
        if rows:
            pages = sum(len(r.block_table) for r in core.scheduler.requests.values())
            self.now += self.fixed_s + self.row_s * rows + self.page_s * pages


def warm_up_on(
    clock: DeviceClock, monkeypatch, page_s: float, threaded_codec: bool = False
) -> EngineCore:
    """tiny-orpheus (max_num_seqs 16) warmed up on the CPU with its steps timed by `clock`,
    its KV pages priced at `page_s`, and admission judging its codec as one on a thread of
    its own (as on CUDA) or inline (the caller closes it)."""
    from models.registry import load_model

    step = EngineCore.step

    def timed_step(core: EngineCore):
        events = step(core)
        clock.turn(core)
        return events

    monkeypatch.setattr(EngineCore, "step", timed_step)
    monkeypatch.setattr(warm_up_calibration, "page_seconds", lambda device, nbytes: page_s)
    model = load_model("tiny-orpheus")
    core = EngineCore(model, EngineConfig(max_num_seqs=16), torch.device("cpu"), "sdpa", clock)
    core.scheduler.admission.capacity.threaded_codec = threaded_codec
    core.warm_up()
    return core


def test_the_bursts_seed_the_turn_cost_less_their_pages(monkeypatch, caplog):
    """tiny-orpheus on the CPU, on a clock that turns as a GPU's decode would (a part by rows
    and a price a KV page read), its pages priced at that price: the seeds are the bursts'
    turns less their pages, so the turn cost's line by rows is the clock's."""
    page_s = 5e-6  # dear, so that a seed booked with its pages would show
    clock = DeviceClock(page_s)
    threads = torch.get_num_threads()
    # A codec on a thread of its own, as on CUDA: the bursts' figure is the median, which a
    # few turns stepped in another order (a loaded machine's) do not move.
    with caplog.at_level("INFO", logger="voxgate.engine"):
        core = warm_up_on(clock, monkeypatch, page_s, threaded_codec=True)
    try:
        capacity = core.scheduler.admission.capacity
        assert capacity.page_s == page_s
        assert sorted(capacity.steps.seeds) == [1, 2, 4, 8, 16]
        fit = capacity.steps.fit()
        assert fit.fixed_s == pytest.approx(clock.fixed_s, rel=0.02)
        assert fit.per_unit_s == pytest.approx(clock.row_s, rel=0.02)
        assert "batch 16 takes" in caplog.text
        # The engine is left as it was: nothing running, no page held, no client refused.
        assert core.scheduler.requests == {} and core.blocks.num_used == 0
        assert core.scheduler.admission.refusals == {}
        assert capacity.steps.live_turns == 0 and not capacity.pages.learned
    finally:
        core.close()
        torch.set_num_threads(threads)


class CodecTailClock(DeviceClock):
    """A DeviceClock whose codec runs on a thread of its own, as on a GPU: once a burst's
    requests are done the loop turns `tail_turns` more times, only waiting for the codec's last
    chunks, each wait longer the larger the burst was (`tail_row_s` a row). A step without
    rows while requests still run (all sitting it out) costs the device nothing."""

    def __init__(self, page_s: float, tail_turns: int = 4, tail_row_s: float = 0.002) -> None:
        super().__init__(page_s)
        self.tail_turns, self.tail_row_s = tail_turns, tail_row_s
        self.last_rows, self.tail_left = 0, 0

    def turn(self, core: EngineCore) -> None:
        rows = core.last_timing.batch_size if core.last_timing is not None else 0
        if rows:
            self.last_rows, self.tail_left = rows, self.tail_turns
            super().turn(core)
        elif self.tail_left and not core.scheduler.requests:  # the burst's requests are done
            self.tail_left -= 1
            self.now += self.tail_row_s * self.last_rows


def test_a_bursts_wait_for_its_last_codec_chunks_is_no_decode_turn(monkeypatch):
    """The turns a burst's loop spends after its last token, waiting for the codec's last
    chunks (longer for larger bursts), are not decode turns: the seeds are the decode turns'
    alone, so the line by rows is the device's, not steeper by the codec's tail (counted in,
    it doubled the slope here)."""
    page_s = 1e-6
    clock = CodecTailClock(page_s)
    has_work = EngineCore.has_work
    monkeypatch.setattr(EngineCore, "has_work", lambda core: has_work(core) or clock.tail_left > 0)
    threads = torch.get_num_threads()
    core = warm_up_on(clock, monkeypatch, page_s, threaded_codec=True)  # a tail needs a thread
    try:
        fit = core.scheduler.admission.capacity.steps.fit()
        assert sorted(core.scheduler.admission.capacity.steps.seeds) == [1, 2, 4, 8, 16]
        assert fit.per_unit_s == pytest.approx(clock.row_s, rel=0.02)
        assert fit.fixed_s == pytest.approx(clock.fixed_s, rel=0.02)
    finally:
        core.close()
        torch.set_num_threads(threads)


class CodecJobClock(DeviceClock):
    """A DeviceClock whose LLM turn that brings a burst's requests to a multiple of `every`
    tokens also runs a codec job of `job_s` (the burst's chunks): the same share of each
    burst's turns, however the engine orders its steps."""

    def __init__(self, page_s: float, every: int = 10, job_s: float = 0.008) -> None:
        super().__init__(page_s)
        self.every, self.job_s = every, job_s

    def turn(self, core: EngineCore) -> None:
        super().turn(core)
        rows = core.last_timing.batch_size if core.last_timing is not None else 0
        made = [r.num_generated for r in core.scheduler.requests.values()]
        if rows and made and max(made) % self.every == 0:
            self.now += self.job_s


@pytest.mark.parametrize("threaded_codec", [False, True])
def test_an_inline_codecs_turns_count_in_a_burst_and_a_threaded_ones_first_chunks_do_not(
    monkeypatch, threaded_codec
):
    """A turn that runs a codec job inline is one every stream waits for: the seeds are the
    bursts' mean turns, the codec's share spread over them. Beside a codec on its own thread
    a burst's few turns that its chunks slow are left to the median: the seeds are the
    device's line."""
    page_s = 1e-6
    clock = CodecJobClock(page_s)
    threads = torch.get_num_threads()
    core = warm_up_on(clock, monkeypatch, page_s, threaded_codec)
    try:
        fit = core.scheduler.admission.capacity.steps.fit()
        if threaded_codec:
            assert fit.fixed_s == pytest.approx(clock.fixed_s, rel=0.02)
        else:  # a job every 10 turns: 0.8 ms more a turn
            assert fit.fixed_s == pytest.approx(clock.fixed_s + clock.job_s / 10, rel=0.05)
        assert fit.per_unit_s == pytest.approx(clock.row_s, rel=0.05)
    finally:
        core.close()
        torch.set_num_threads(threads)


@pytest.mark.parametrize("long_chars", [warm_up_calibration.LONG_PROMPT_CHARS, 100_000])
def test_on_a_cpu_a_page_is_priced_by_turns_over_short_and_long_contexts(
    monkeypatch, caplog, long_chars
):
    """No copy bandwidth prices a page on a CPU: the warm-up times a burst with short prompts
    and one with long prompts, and prices a page at their turns' difference over their
    pages'. On a clock charging 20 µs a page, that is the price found, the bursts' seeds are
    their turns less it, and they do not bound the live slope (a CPU's live turns carry the
    gateway's work). A prompt longer than the model's context is halved until it fits."""
    page_s = 20e-6
    clock = DeviceClock(page_s)
    monkeypatch.setattr(warm_up_calibration, "LONG_PROMPT_CHARS", long_chars)
    threads = torch.get_num_threads()
    with caplog.at_level("INFO", logger="voxgate.engine"):
        core = warm_up_on(clock, monkeypatch, page_s=0.0)
    try:
        capacity = core.scheduler.admission.capacity
        assert capacity.page_s == pytest.approx(page_s, rel=0.1)
        assert "a KV page in use costs" in caplog.text and "(measured:" in caplog.text
        assert not capacity.steps.slope_bound_by_bursts
        fit = capacity.steps.fit()
        assert fit.per_unit_s == pytest.approx(clock.row_s, rel=0.1)
        assert core.scheduler.requests == {} and core.blocks.num_used == 0
    finally:
        core.close()
        torch.set_num_threads(threads)


def test_on_a_cpu_a_model_without_room_for_a_longer_prompt_leaves_pages_unpriced(monkeypatch):
    """Where even the shortest long prompt does not fit the model's context (or gives no more
    pages a row than MIN_PAGE_SPREAD), the pages stay unpriced: turns judged by their rows."""
    clock = DeviceClock(20e-6)
    monkeypatch.setattr(warm_up_calibration, "MIN_PAGE_SPREAD", 10_000)
    threads = torch.get_num_threads()
    core = warm_up_on(clock, monkeypatch, page_s=0.0)
    try:
        assert core.scheduler.admission.capacity.page_s == 0.0
        assert sorted(core.scheduler.admission.capacity.steps.seeds) == [1, 2, 4, 8, 16]
    finally:
        core.close()
        torch.set_num_threads(threads)
