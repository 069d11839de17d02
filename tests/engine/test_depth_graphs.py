"""Depth-stage graphs (engine/depth_graphs.py): the static-buffer step a replay runs equals the
eager depth stage — padding rows, greedy and sampled rows, all-greedy steps — and steps the
captured sampler cannot serve are sent to the eager path. Capture itself is a GPU test."""

import pytest
import torch

from engine.code_sampling import CodeSamplingInputs, CodeSamplingPlan, DeviceCodeSampler
from engine.depth_graphs import DepthGraphs
from engine.request import SamplingParams
from engine.sampling import SamplingRow

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def moshi():
    from models.registry import load_model

    return load_model("tiny-moshi")


def _rows(params: list[SamplingParams]) -> list[SamplingRow]:
    return [SamplingRow(f"r{i}", p, step=7 + i) for i, p in enumerate(params)]


def _graphs(model) -> DepthGraphs:
    return DepthGraphs(
        model.depth_stage, model.shape.hidden_size, torch.float32, CPU, (1, 4, 8), max_k=256
    )


def _eager(model, hidden, first, rows, seeds):
    return model.depth_stage(hidden, first, DeviceCodeSampler.for_rows(rows, seeds, CPU))


@torch.inference_mode()
def test_static_step_equals_the_eager_depth_stage_with_padding(moshi):
    torch.manual_seed(0)
    rows = _rows(
        [
            SamplingParams(temperature=0.8, top_k=250, top_p=1.0, seed=1),
            SamplingParams(temperature=0.0, top_p=1.0),  # greedy
            SamplingParams(temperature=1.2, top_k=0, top_p=1.0, seed=3),  # no top-k
        ]
    )
    seeds = [11, 22, 33]
    hidden = torch.randn(3, moshi.shape.hidden_size)
    first = torch.tensor([5, 900, 31999])
    graphs = _graphs(moshi)
    assert graphs.bucket_for(3) == 4  # one padding row
    plan = CodeSamplingPlan.of(rows)
    inputs = CodeSamplingInputs.upload(rows, seeds, CPU)
    static = graphs.run_static(hidden, first, inputs)
    eager = _eager(moshi, hidden, first, rows, seeds)
    assert static.shape == eager.shape == (3, moshi.facts.row_width)
    assert torch.equal(static, eager)
    assert graphs.fits(3, plan)
    # The static buffers are reused: a second, different step is not polluted by the first.
    again = graphs.run_static(
        hidden[:1] * 2, first[:1], CodeSamplingInputs.upload(rows[:1], seeds[:1], CPU)
    )
    assert torch.equal(again, _eager(moshi, hidden[:1] * 2, first[:1], rows[:1], seeds[:1]))


@torch.inference_mode()
def test_all_greedy_steps_use_the_same_static_step(moshi):
    torch.manual_seed(1)
    rows = _rows([SamplingParams(temperature=0.0, top_p=1.0)] * 2)
    hidden = torch.randn(2, moshi.shape.hidden_size)
    first = torch.tensor([3, 4])
    plan = CodeSamplingPlan.of(rows)
    assert not plan.any_random
    graphs = _graphs(moshi)
    assert graphs.fits(2, plan)
    assert torch.equal(
        graphs.run_static(hidden, first, None), _eager(moshi, hidden, first, rows, [0, 0])
    )


def test_steps_the_captured_sampler_cannot_serve_run_eagerly(moshi):
    graphs = _graphs(moshi)
    sampled = CodeSamplingPlan(any_random=True, nucleus=False, max_k=250)
    assert graphs.fits(8, sampled)
    assert not graphs.fits(9, sampled)  # beyond the largest bucket
    assert not graphs.fits(2, CodeSamplingPlan(any_random=True, nucleus=True, max_k=250))
    assert not graphs.fits(2, CodeSamplingPlan(any_random=True, nucleus=False, max_k=512))
    assert graphs.fits(2, CodeSamplingPlan(any_random=False, nucleus=False, max_k=0))
    with pytest.raises(ValueError, match="no depth graph bucket"):
        graphs.run_static(
            torch.zeros(9, moshi.shape.hidden_size), torch.zeros(9, dtype=torch.long), None
        )


def test_the_worker_routes_fitting_steps_through_the_graphs_and_others_eagerly():
    """The engine wiring (Worker._depth_stage): with depth graphs present, a step whose plan
    fits replays them (here `run_static`, the CPU stand-in for a replay) and gets the very
    tokens the eager stage gives; a step with a nucleus row runs eagerly."""
    from models.registry import load_model

    model = load_model("voxgate-tiny", random_weights=True)

    def generate(params: list[SamplingParams], graphs: bool) -> tuple[list[tuple], int]:
        from engine.config import EngineConfig
        from engine.core import EngineCore
        from engine.outputs import SpeechRequest

        core = EngineCore(model, EngineConfig(num_kv_blocks=128), CPU, "sdpa")
        replays = 0
        if graphs:
            depth = _graphs(model)

            def replay(hidden, first, inputs):
                nonlocal replays
                replays += 1
                return depth.run_static(hidden, first, inputs)

            depth.run = replay
            core.worker.depth_graphs = depth
        requests = [core.add_request(SpeechRequest("Hello there.", None, p)) for p in params]
        while core.has_work():
            core.step()
        return [tuple(map(tuple, r.output_ids)) for r in requests], replays

    top_k = [
        SamplingParams(temperature=0.7, top_k=40, top_p=1.0, max_tokens=6, min_tokens=6, seed=i)
        for i in range(3)
    ] + [SamplingParams(temperature=0.0, top_p=1.0, max_tokens=6, min_tokens=6)]
    eager, _ = generate(top_k, graphs=False)
    graphed, replays = generate(top_k, graphs=True)
    assert graphed == eager and replays >= 6  # every decode step replayed
    nucleus = [SamplingParams(temperature=0.7, top_k=40, top_p=0.9, max_tokens=4, seed=1)]
    assert generate(nucleus, graphs=True)[1] == 0  # a nucleus: the eager stage
