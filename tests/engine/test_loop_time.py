"""The engine loop's time between its turns (LoopTotals.commands_s, admission_s, stats_s):
what `apply` and the stats snapshots count, so a served point can say where a loaded loop's
time outside its turns went (voxbench/engine_loop.py prints it by second)."""

from __future__ import annotations

import pytest
import torch

from engine.api import Cancel, ReportPlayback, Submit
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.loop import apply
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.base import ModelInputError
from models.registry import load_model


@pytest.fixture(scope="module")
def core():
    config = EngineConfig(num_kv_blocks=64, max_num_seqs=4, max_batch_tokens=64)
    core = EngineCore(load_model("tiny-cosyvoice2"), config, torch.device("cpu"), "sdpa")
    yield core
    core.close()


def test_commands_count_their_time_and_a_submit_its_verdict(core):
    totals = core.totals
    before = (totals.commands_s, totals.admission_s)
    spec = SpeechRequest("Hello there.", None, SamplingParams(max_tokens=8))
    request_id = apply(core, Submit(spec)).value
    submitted = (totals.commands_s, totals.admission_s)
    assert submitted[1] > before[1]  # the verdict on the submit
    assert submitted[0] - before[0] >= submitted[1] - before[1]  # within the command's time
    apply(core, ReportPlayback(request_id, 0.0))
    apply(core, Cancel(request_id))
    assert totals.commands_s > submitted[0] and totals.admission_s == submitted[1]
    bad = SpeechRequest("Hello.", None, SamplingParams(max_tokens=8), audible_after_s=-1.0)
    with pytest.raises(ModelInputError):
        apply(core, Submit(bad))  # a refused command's time counts too
    assert totals.commands_s > submitted[0]


def test_stats_snapshots_count_their_time(core):
    before = core.totals.stats_s
    snapshot = core.stats()
    assert core.totals.stats_s > before
    assert snapshot.totals.stats_s == before  # the snapshot was taken before its own time
