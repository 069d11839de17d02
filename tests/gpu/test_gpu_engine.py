"""GPU fast path: FlashInfer vs SDPA, graph replay vs eager, GPU engine vs CPU engine.

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from engine.attention import KVCache, SdpaBackend, StepLayout
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from tests.gpu.markers import needs_flashinfer

pytestmark = pytest.mark.gpu


def _mimi_transformers() -> bool:
    from models.checkpoint_errors import CheckpointError
    from models.codecs.mimi import require_transformers

    try:
        require_transformers()
    except CheckpointError:
        return False
    return True


# The tiny Moshi of the row-model and depth-stage tests needs transformers' Mimi (>= 5.21); an
# older transformers (the GPU machine's image has 5.17) skips them rather than failing them.
needs_mimi = pytest.mark.skipif(
    not _mimi_transformers(),
    reason="tiny-moshi needs transformers >= 5.21 (pip install -U transformers)",
)
CUDA = torch.device("cuda")
TEXTS = [
    "Hello there.",
    "The quick brown fox jumps over the lazy dog.",
    "Hi!",
    "One, two, three.",
    "Good morning, how can I help you today?",
    "Okay.",
]


def random_layout(query_lens, context_lens, block_size, num_blocks, gen):
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables, slots = [], []
    for q, ctx in zip(query_lens, context_lens, strict=True):
        pages = -(-ctx // block_size)
        table = [perm.pop() for _ in range(pages)]
        tables.append(table)
        slots += [table[p // block_size] * block_size + p % block_size for p in range(ctx - q, ctx)]
    return StepLayout(list(query_lens), list(context_lens), slots, tables, block_size)


@needs_flashinfer
@pytest.mark.parametrize("query_lens", [[1, 1, 1, 1, 1], [7, 1, 30, 1, 3]])
def test_flashinfer_equals_sdpa(query_lens):
    from engine.flashinfer_backend import FlashInferBackend

    gen = torch.Generator().manual_seed(0)
    hq, hkv, d, bs = 24, 8, 128, 16
    context_lens = [q + extra for q, extra in zip(query_lens, [40, 3, 0, 129, 17], strict=True)]
    layout = random_layout(query_lens, context_lens, bs, 64, gen)
    outs = []
    for backend_cls in (SdpaBackend, FlashInferBackend):
        torch.manual_seed(1)
        cache = KVCache(1, 64, bs, hkv, d, torch.bfloat16, CUDA)
        cache.k[0].normal_()
        cache.v[0].normal_()
        backend = backend_cls(cache) if backend_cls is SdpaBackend else backend_cls(cache, hq)
        t = sum(query_lens)
        q = torch.randn(t, hq, d, device=CUDA, dtype=torch.bfloat16, generator=None)
        k = torch.randn(t, hkv, d, device=CUDA, dtype=torch.bfloat16)
        v = torch.randn(t, hkv, d, device=CUDA, dtype=torch.bfloat16)
        backend.prepare(layout)
        outs.append(backend.forward(0, q, k, v).float())
    torch.testing.assert_close(outs[1], outs[0], atol=2e-2, rtol=2e-2)  # bf16 accumulation order


@pytest.fixture(scope="module")
def gpu_tiny_dirs(tmp_path_factory, tiny_orpheus_dirs):
    """tiny-orpheus with Orpheus-3B's attention shape (head_dim 128, 3 query heads a KV head):
    FlashInfer has no kernels for the preset's head_dim 16, and these are the kernels serving
    Orpheus-3B compiles (carried to the GPU machine in .gpu/aot.txz), so the tests compile
    none of their own."""
    from models.orpheus.configs import TINY_ORPHEUS
    from models.orpheus.presets import write_orpheus_checkpoint

    folder = tmp_path_factory.mktemp("gpu-tiny") / "model"
    cfg = {
        **TINY_ORPHEUS,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 128,
    }
    write_orpheus_checkpoint(folder, cfg, seed=5)
    return folder, tiny_orpheus_dirs[1]


def load_tiny(dirs, device, dtype):
    from models.orpheus.loading import load_orpheus

    return load_orpheus(str(dirs[0]), str(dirs[1]), device, dtype)


@needs_flashinfer
def test_graph_replay_equals_eager(gpu_tiny_dirs):
    from engine.cuda_graphs import DecodeGraphs
    from engine.flashinfer_backend import FlashInferBackend

    model = load_tiny(gpu_tiny_dirs, CUDA, torch.bfloat16)
    shape = model.shape
    gen = torch.Generator().manual_seed(3)
    cache = KVCache(
        shape.num_layers, 128, 16, shape.num_kv_heads, shape.head_dim, shape.dtype, CUDA
    )
    for t in cache.k + cache.v:
        t.normal_()
    attn = FlashInferBackend(cache, shape.num_q_heads)
    graphs = DecodeGraphs(model.forward, attn, shape.hidden_size, shape.dtype, CUDA, 16, (4, 8))
    graphs.capture()
    ctx = [5, 40, 17, 90, 33]
    layout = random_layout([1] * 5, ctx, 16, 128, gen)
    ids = [128266 + i * 11 for i in range(5)]
    positions = [c - 1 for c in ctx]
    with torch.inference_mode():
        attn.prepare(layout)
        eager = model.forward(
            torch.tensor(ids, device=CUDA), torch.tensor(positions, device=CUDA), attn
        )
        replay = graphs.run(torch.tensor(ids, device=CUDA), positions, layout).clone()
    torch.testing.assert_close(replay, eager, atol=1e-2, rtol=1e-2)
    assert (replay - eager).abs().max().item() < 1e-2


@needs_flashinfer
@needs_mimi
def test_row_model_graph_replay_equals_eager():
    """Models whose tokens are rows (Moshi here: text + 16 codebooks) replay the same decode
    graphs with a [bucket, W] input; a Moshi temporal stack at a FlashInfer head size."""
    from engine.cuda_graphs import DecodeGraphs
    from engine.flashinfer_backend import FlashInferBackend
    from models.moshi.configs import TINY_MOSHI
    from models.moshi.loading import build_moshi, complete_config

    cfg = complete_config(
        {
            **TINY_MOSHI,
            "hidden_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 64,
        },
        "a test config",
    )
    torch.manual_seed(0)
    temporal, _, _ = build_moshi(cfg, CUDA, torch.bfloat16)
    with torch.no_grad():
        for name, param in temporal.named_parameters():
            param.fill_(1.0) if "norm" in name else param.normal_(0.0, 0.02)
    args = temporal.args
    cache = KVCache(
        args.num_layers, 128, 16, args.num_kv_heads, args.head_dim, torch.bfloat16, CUDA
    )
    for t in cache.k + cache.v:
        t.normal_()
    attn = FlashInferBackend(cache, args.num_heads)
    graphs = DecodeGraphs(
        temporal, attn, args.hidden_size, torch.bfloat16, CUDA, 16, (4, 8), row_width=17
    )
    graphs.capture()
    gen = torch.Generator().manual_seed(5)
    ctx = [5, 40, 17, 90, 33]
    layout = random_layout([1] * 5, ctx, 16, 128, gen)
    rows = torch.randint(0, 2048, (5, 17), generator=gen).to(CUDA)
    positions = [c - 1 for c in ctx]
    with torch.inference_mode():
        attn.prepare(layout)
        eager = temporal(rows, torch.tensor(positions, device=CUDA), attn)
        replay = graphs.run(rows, positions, layout).clone()
    torch.testing.assert_close(replay, eager, atol=1e-2, rtol=1e-2)


def greedy_tokens(model, device, attention, cuda_graphs=True, async_scheduling=True):
    config = EngineConfig(
        num_kv_blocks=512,
        max_num_seqs=8,
        cuda_graphs=cuda_graphs,
        async_scheduling=async_scheduling,
    )
    core = EngineCore(model, config, device, attention)
    params = [
        SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=n, min_tokens=n)
        for n in (21, 35, 14, 28, 42, 7)
    ]
    reqs = [
        core.add_request(SpeechRequest(t, sampling=p)) for t, p in zip(TEXTS, params, strict=True)
    ]
    while core.has_work():
        core.step()
    return [r.output_ids for r in reqs]


def test_gpu_engine_greedy_tokens_equal_cpu_engine(gpu_tiny_dirs):
    cpu = greedy_tokens(
        load_tiny(gpu_tiny_dirs, torch.device("cpu"), torch.float32), torch.device("cpu"), "sdpa"
    )
    gpu = greedy_tokens(load_tiny(gpu_tiny_dirs, CUDA, torch.float32), CUDA, "sdpa")
    assert gpu == cpu


@needs_flashinfer
def test_flashinfer_graph_engine_equals_eager_sdpa_engine_in_bf16(gpu_tiny_dirs):
    model = load_tiny(gpu_tiny_dirs, CUDA, torch.bfloat16)
    eager = greedy_tokens(model, CUDA, "sdpa", cuda_graphs=False)
    fast = greedy_tokens(model, CUDA, "flashinfer", cuda_graphs=True)
    agree = sum(a == b for x, y in zip(eager, fast, strict=True) for a, b in zip(x, y, strict=True))
    total = sum(len(x) for x in eager)
    # bf16 kernels sum in different orders; a near-tie can flip one argmax and the rest of that
    # sequence follows it, so demand agreement on the vast majority rather than bitwise identity.
    assert agree / total > 0.9, (eager, fast)


@pytest.mark.parametrize(
    ("attention", "dtype"),
    [("sdpa", torch.float32), pytest.param("flashinfer", torch.bfloat16, marks=needs_flashinfer)],
)
def test_async_scheduling_equals_sync_on_gpu(gpu_tiny_dirs, attention, dtype):
    """Same steps, same batches, same kernels: bitwise the same tokens. A race between the
    overlapped host work and the device (inputs gathered from the previous step's tokens,
    FlashInfer's staged plans, pinned token copies) would show up here."""
    model = load_tiny(gpu_tiny_dirs, CUDA, dtype)
    overlapped = greedy_tokens(model, CUDA, attention, async_scheduling=True)
    assert greedy_tokens(model, CUDA, attention, async_scheduling=False) == overlapped


def _detok_audio(detok) -> list[torch.Tensor]:
    """Three streams' audio from the same seeded pushes and decode calls (8 rounds, the last
    final), whatever the detokenizer runs them on."""
    gen = torch.Generator().manual_seed(11)
    streams = [detok.new_stream(seed=i) for i in range(3)]
    pieces = [[] for _ in streams]
    for step in range(8):
        for i, s in enumerate(streams):
            frames = torch.randint(0, 4096, (2 + i, 7), generator=gen).tolist()
            detok.push(s, frames)
        final = [step == 7] * 3
        for i, audio in enumerate(detok.decode(streams, final)):
            pieces[i].append(torch.from_numpy(audio))
    return [torch.cat(p) for p in pieces]


def test_detokenizer_graph_replay_equals_eager(gpu_tiny_dirs, ieee_float32):
    from engine.cuda_graphs import CallableGraphs

    eager = load_tiny(gpu_tiny_dirs, CUDA, torch.float32).detok
    graphed = load_tiny(gpu_tiny_dirs, CUDA, torch.float32).detok
    graphed.enable_cuda_graphs(CallableGraphs(CUDA))
    for a, b in zip(_detok_audio(eager), _detok_audio(graphed), strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def test_float32_snac_graphs_run_their_gemms_in_tf32(gpu_tiny_dirs):
    """Served in float32, SNAC's GEMM forms of its convs take the convs' TF32 arithmetic
    (models/device_util.py, gemms_in_conv_precision): as IEEE float32 GEMMs they ran on SIMT
    cores beside the LLM's steps. The audio stays within TF32's rounding of IEEE float32's."""
    from engine.cuda_graphs import CallableGraphs

    torch.backends.cudnn.conv.fp32_precision = "tf32"  # restored after the test (conftest)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    exact = _detok_audio(load_tiny(gpu_tiny_dirs, CUDA, torch.float32).detok)
    graphed = load_tiny(gpu_tiny_dirs, CUDA, torch.float32).detok
    graphed.enable_cuda_graphs(CallableGraphs(CUDA))
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    for a, b in zip(exact, _detok_audio(graphed), strict=True):
        error = (b - a).pow(2).mean().sqrt() / a.pow(2).mean().sqrt()
        assert error < 0.01, f"relative RMS error {error:.4f}"


@pytest.mark.parametrize("half", [False, True], ids=["float32", "float16"])
def test_compiled_detokenizer_graphs_equal_eager(gpu_tiny_dirs, ieee_float32, half):
    """--compile-codec on CUDA: SNAC's graphs, its residual units, Snakes and upsamplings with
    their noise as the hand-written kernels of models/codecs/snac_triton.py and its two
    symmetric convs compiled (Inductor's kernels: the input conv, the output conv's channel
    sum), decode what eager float32's torch ops do; in float16 (--snac-fp16, its 1x1 convs as
    matmuls) to float16's rounding."""
    from engine.cuda_graphs import CallableGraphs, compiled_of

    eager = load_tiny(gpu_tiny_dirs, CUDA, torch.float32).detok
    graphed = load_tiny(gpu_tiny_dirs, CUDA, torch.float32).detok
    if half:
        graphed.model.half()
    graphs = CallableGraphs(CUDA, compiled=True)
    graphed.enable_cuda_graphs(graphs)
    assert eager.decoder.kernels is None and graphed.decoder.kernels is not None
    blocks = graphed.repeated_blocks()
    # The residual units, the Snakes' joins and the upsamplings with their noise run
    # kernels: the two symmetric convs' blocks compile.
    assert len(blocks) == 2
    assert compiled_of(blocks) == blocks  # none fell back to eager kernels
    for a, b in zip(_detok_audio(eager), _detok_audio(graphed), strict=True):
        assert a.shape == b.shape
        if half:
            error = (b - a).pow(2).mean().sqrt() / a.pow(2).mean().sqrt()
            assert error < 0.01, f"relative RMS error {error:.4f}"
        else:
            torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


@needs_flashinfer
def test_fused_llama_kernels_match_the_reference_block(gpu_tiny_dirs):
    """FlashInfer's fused norm/RoPE/SiLU path against the plain torch block, same weights, a
    mixed prefill + decode step through the same attention backend (bf16 rounding apart)."""
    from engine.flashinfer_backend import FlashInferBackend

    model = load_tiny(gpu_tiny_dirs, CUDA, torch.bfloat16)
    shape = model.shape
    layout = random_layout([9, 1, 17, 1], [9, 40, 20, 77], 16, 64, torch.Generator().manual_seed(4))
    ids = torch.randint(128266, 128266 + 7 * 4096, (sum(layout.query_lens),), device=CUDA)
    positions = torch.tensor(
        [
            p
            for q, c in zip(layout.query_lens, layout.context_lens, strict=True)
            for p in range(c - q, c)
        ],
        device=CUDA,
    )
    outs = []
    for fused in (False, True):
        torch.manual_seed(2)
        cache = KVCache(
            shape.num_layers, 64, 16, shape.num_kv_heads, shape.head_dim, shape.dtype, CUDA
        )
        for t in cache.k + cache.v:
            t.normal_()
        attn = FlashInferBackend(cache, shape.num_q_heads)
        if fused:
            assert model.use_fused_kernels()
        with torch.inference_mode():
            attn.prepare(layout)
            outs.append(model.llm.forward(ids, positions, attn).float())
    reference, fused_out = outs
    assert ((fused_out - reference).norm() / reference.norm()).item() < 2e-2


@pytest.fixture(scope="module")
def gpu_glm_dir(tmp_path_factory):
    """tiny-glm-voice with head_dim 64 (FlashInfer has no kernels for the preset's 16)."""
    from models.glm_voice.configs import TINY_GLM_VOICE
    from models.glm_voice.presets import write_glm_checkpoint

    folder = tmp_path_factory.mktemp("gpu-glm") / "glm-4-voice-9b"
    cfg = {**TINY_GLM_VOICE, "hidden_size": 256, "kv_channels": 64, "ffn_hidden_size": 384}
    write_glm_checkpoint(folder, cfg, seed=7)
    return folder


def second_turns(model, device, attention, reuse: bool, cuda_graphs=True, async_scheduling=True):
    """Two conversations' first turns, then their second turns (the second one barged in
    on), batched together: with reuse, the second turns start from the kept KV."""
    from engine.outputs import Finished
    from models.glm_voice.prompt import UserTurn

    config = EngineConfig(
        num_kv_blocks=512,
        max_num_seqs=8,
        block_size=16,
        cuda_graphs=cuda_graphs,
        async_scheduling=async_scheduling,
        # The second turns arrive after the first turns' decodes were measured: admission,
        # not what this tests, must not refuse one of them.
        realtime_admission=False,
    )
    core = EngineCore(model, config, device, attention)
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=24, min_tokens=24)
    firsts = [(UserTurn(text=t),) for t in TEXTS[:2]]
    conv = (lambda i: f"c{i}") if reuse else (lambda i: None)
    reqs = [
        core.add_request(SpeechRequest("", sampling=greedy, turns=t, conversation_id=conv(i)))
        for i, t in enumerate(firsts)
    ]
    while core.has_work():
        core.step()
    heard = [
        model.heard_reply(reqs[0].output_ids, None),
        model.heard_reply(reqs[1].output_ids[:9], 0.0),
    ]
    seconds = [(*f, h, UserTurn(text=TEXTS[4])) for f, h in zip(firsts, heard, strict=True)]
    reqs = [
        core.add_request(SpeechRequest("", sampling=greedy, turns=t, conversation_id=conv(i)))
        for i, t in enumerate(seconds)
    ]
    finished = {}
    while core.has_work():
        finished.update({e.request_id: e for e in core.step() if isinstance(e, Finished)})
    return [r.output_ids for r in reqs], [finished[r.request_id].reused_tokens for r in reqs]


@pytest.mark.parametrize(
    ("attention", "dtype"),
    [("sdpa", torch.float32), pytest.param("flashinfer", torch.bfloat16, marks=needs_flashinfer)],
)
def test_prefix_reuse_equals_a_fresh_prefill_on_gpu(gpu_glm_dir, attention, dtype):
    """Reused KV is only num_computed at admission: FlashInfer's plans and the decode graphs
    see ordinary chunked prefills and decodes."""
    from models.glm_voice.loading import load_glm_voice

    model = load_glm_voice(str(gpu_glm_dir), CUDA, dtype)
    fresh, none_reused = second_turns(model, CUDA, attention, reuse=False)
    reused, counts = second_turns(model, CUDA, attention, reuse=True)
    from models.glm_voice.prompt import UserTurn

    prompts = [len(model.preprocess_turns([UserTurn(text=t)]).token_ids) for t in TEXTS[:2]]
    # The whole first reply but its last token (never run) / nothing of a reply none heard.
    assert none_reused == [0, 0] and counts == [prompts[0] + 23, prompts[1]]
    if dtype == torch.float32:
        assert reused == fresh
    else:  # bf16: reused KV came from decode kernels, the fresh one from a prefill kernel
        agree = sum(
            a == b for x, y in zip(fresh, reused, strict=True) for a, b in zip(x, y, strict=True)
        )
        assert agree / sum(len(x) for x in fresh) > 0.9, (fresh, reused)


@needs_mimi
def test_depth_stage_graph_replay_equals_eager():
    """Moshi's depth stage (8 codebooks, the device code sampler) replayed from a CUDA graph
    equals the eager stage, for sampled and greedy rows with a padding row."""
    from engine.code_sampling import CodeSamplingInputs, DeviceCodeSampler
    from engine.depth_graphs import DepthGraphs
    from engine.sampling import SamplingRow
    from models.registry import load_model

    model = load_model("tiny-moshi", None, CUDA, torch.float32)
    params = [
        SamplingParams(temperature=0.8, top_k=250, top_p=1.0, seed=1),
        SamplingParams(temperature=0.0, top_p=1.0),
        SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=3),
    ]
    rows = [SamplingRow(f"r{i}", p, step=4 + i) for i, p in enumerate(params)]
    seeds = [11, 22, 33]
    graphs = DepthGraphs(
        model.depth_stage, model.shape.hidden_size, torch.float32, CUDA, (1, 4, 8), 256
    )
    graphs.capture()
    gen = torch.Generator(device=CUDA).manual_seed(0)
    with torch.inference_mode():
        for _ in range(3):  # several replays: static buffers refilled each time
            hidden = torch.randn(3, model.shape.hidden_size, device=CUDA, generator=gen)
            first = torch.randint(0, 32000, (3,), device=CUDA, generator=gen)
            inputs = CodeSamplingInputs.upload(rows, seeds, CUDA)
            replay = graphs.run(hidden, first, inputs).clone()
            eager = model.depth_stage(hidden, first, DeviceCodeSampler.for_rows(rows, seeds, CUDA))
            assert torch.equal(replay, eager)


def test_fused_fp8_kv_write_equals_the_eager_writes_in_a_graph():
    """store_kv_pair on CUDA fp8 caches: one compiled (Triton) kernel a layer, warmed up and
    then replayed in a CUDA graph, leaves store_kv's bytes, and its compile did not fall
    back to the eager writes."""
    from engine.attention import _fused_fp8_store, store_kv, store_kv_pair

    fp8 = torch.float8_e4m3fn
    shape = (4096, 8, 128)
    gen = torch.Generator(device=CUDA).manual_seed(3)
    slots = torch.randperm(shape[0], device=CUDA, generator=gen)[:40]
    k, v = (torch.randn(40, 8, 128, device=CUDA, generator=gen).bfloat16() * 300 for _ in range(2))
    fused = [torch.zeros(shape, dtype=fp8, device=CUDA) for _ in range(2)]
    with torch.inference_mode():
        # The warm-up writes the shape the graph captures, as every capture in the engine
        # does (a first launch at a new size can autotune, which synchronises: inside a
        # capture that fails it); other values, so that only the replay leaves k and v.
        store_kv_pair(*fused, slots, -k, -v)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            store_kv_pair(*fused, slots, k, v)
        graph.replay()
    torch.cuda.synchronize()
    assert not _fused_fp8_store().failed
    eager = [torch.zeros(shape, dtype=fp8, device=CUDA) for _ in range(2)]
    store_kv(eager[0], slots, k)
    store_kv(eager[1], slots, v)
    for a, b in zip(eager, fused, strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@needs_flashinfer
@pytest.mark.parametrize("graph_batch", [None, 8])
def test_fp8_cache_decode_through_xqa_equals_bf16(graph_batch):
    """fp8 pages: decode steps run XQA (engine/xqa_decode.py). Against FlashInfer's bf16
    kernel on the same K/V values (the fp8 ones, widened), the outputs agree to what XQA's
    Hopper kernel rounds besides (its matrix products take the queries and the softmax
    weights in fp8 too), and padding rows of a graph bucket do not disturb the real ones."""
    from engine.flashinfer_backend import FlashInferBackend

    gen = torch.Generator().manual_seed(4)
    hq, hkv, d, bs = 24, 8, 128, 16
    context_lens = [41, 3, 200, 130, 17]
    layout = random_layout([1] * 5, context_lens, bs, 64, gen)
    torch.manual_seed(2)
    fp8 = torch.float8_e4m3fn
    # Values fp8 holds exactly, so both caches see the same K and V.
    q = torch.randn(5, hq, d, device=CUDA, dtype=torch.bfloat16)
    k, v = (torch.randn(5, hkv, d, device=CUDA).to(fp8).to(torch.bfloat16) for _ in range(2))
    keys = torch.randn(65 * bs, hkv, d, device=CUDA).to(fp8)
    values = torch.randn(65 * bs, hkv, d, device=CUDA).to(fp8)
    outs = {}
    for storage in (torch.bfloat16, fp8):
        cache = KVCache(1, 64, bs, hkv, d, storage, CUDA, compute_dtype=torch.bfloat16)
        cache.k[0].copy_(keys.to(storage))
        cache.v[0].copy_(values.to(storage))
        backend = FlashInferBackend(cache, hq, max_batch=16, max_context=4096)
        assert (backend._xqa is not None) == (storage == fp8)
        pad = (graph_batch or 5) - 5
        backend.prepare(layout, graph_batch)
        qp, kp, vp = (torch.cat([x, x[:1].expand(pad, *x.shape[1:])]) for x in (q, k, v))
        outs[storage] = backend.forward(0, qp, kp, vp)[:5].float()
    err = (outs[fp8] - outs[torch.bfloat16]).abs()
    assert err.max().item() < 0.1 and err.mean().item() < 0.01, (err.max(), err.mean())


@needs_flashinfer
def test_xqa_reads_each_requests_pages_gathered_as_the_dense_table_held_them():
    """XQA's page table kept per request on the device (engine/xqa_page_table.py): over steps
    that reorder, skip, grow and pad their rows, it holds what the dense table rebuilt from
    the block tables holds wherever the kernel reads, and the kernel's outputs are the same."""
    from engine.xqa_decode import XQA_ARCHS, XqaDecode

    if torch.cuda.get_device_capability()[0] not in XQA_ARCHS:
        pytest.skip("XQA needs a Hopper or Blackwell GPU")
    torch.manual_seed(3)
    hq, hkv, d, bs, fp8 = 24, 8, 128, 16, torch.float8_e4m3fn
    cache = KVCache(1, 64, bs, hkv, d, fp8, CUDA, compute_dtype=torch.bfloat16)
    cache.k[0].copy_(torch.randn(65 * bs, hkv, d, device=CUDA).to(fp8))
    cache.v[0].copy_(torch.randn(65 * bs, hkv, d, device=CUDA).to(fp8))
    paged = tuple(x.view(65, bs, hkv, d) for x in (cache.k[0], cache.v[0]))
    gathered, dense = XqaDecode(cache, 16, 4096), XqaDecode(cache, 16, 4096)
    free = list(range(63, 10, -1))
    tables = {"a": [3, 9], "b": [5], "c": [1, 2, 4]}
    contexts = {"a": 31, "b": 16, "c": 40}
    steps = [("abc", 8), ("ca", 4), ("bca", 3), ("b", 1), ("acb", 16)]  # (rows, graph bucket)
    for owners, rows in steps * 3:
        for o in owners:  # one token each; a request at a page's end gets a new page
            contexts[o] += 1
            if -(-contexts[o] // bs) > len(tables[o]):
                tables[o].append(free.pop())
        layout = StepLayout(
            [1] * len(owners), [contexts[o] for o in owners], [], [tables[o] for o in owners],
            bs, owners=list(owners),
        )  # fmt: skip
        gathered.prepare(layout, rows)
        dense.prepare(dataclasses.replace(layout, owners=[]), rows)
        for row, o in enumerate(owners):
            pages = -(-contexts[o] // bs)
            got = gathered.tables.page_table[row, :pages]
            assert torch.equal(got, dense.tables.page_table[row, :pages])
        assert torch.equal(gathered.tables.seq_lens[:rows], dense.tables.seq_lens[:rows])
        q = torch.randn(rows, hq, d, device=CUDA, dtype=torch.bfloat16)
        assert torch.equal(gathered.run(q, paged), dense.run(q, paged))
    gathered.release("b")  # a new request takes its row, written from its first page
    layout = StepLayout([1], [5], [], [[60]], bs, owners=["d"])
    gathered.prepare(layout, 2)
    assert gathered.tables.page_table[:2, 0].tolist() == [60, cache.scratch_block]


@needs_flashinfer
def test_fp8_cache_engine_runs_every_step_kind(gpu_tiny_dirs):
    """An engine with an fp8 KV cache runs prefill (FlashInfer over fp8 pages), graph-replayed
    decode and eager decode (XQA) to the end of every request, with valid audio tokens only
    and every page returned. (The kernel-level test above bounds fp8's numeric effect.)"""
    from models.orpheus import tokens as T

    model = load_tiny(gpu_tiny_dirs, CUDA, torch.bfloat16)
    core = EngineCore(
        model,
        EngineConfig(num_kv_blocks=256, kv_cache_dtype="fp8", realtime_admission=False),
        CUDA,
        "flashinfer",
    )
    assert core.worker.cache.k[0].dtype == torch.float8_e4m3fn
    reqs = [
        core.add_request(
            SpeechRequest(
                text, sampling=SamplingParams(temperature=0.0, max_tokens=42, min_tokens=42)
            )
        )
        for text in ("Hello there.", "A longer sentence to speak, with a comma.", "Hi!")
    ]
    while core.has_work():
        core.step()
    for r in reqs:
        assert len(r.output_ids) == 42
        assert all(T.code_of(t, i) is not None for i, t in enumerate(r.output_ids))
        assert len(set(r.output_ids)) > 1
    assert core.blocks.num_used == 0


@needs_flashinfer
def test_arrivals_beside_decodes_replay_the_prompt_graphs(gpu_tiny_dirs):
    """Arrivals while others decode, with every graph set and async scheduling: a step of
    decodes and fresh prompts replays the decode, prompt and sampling graphs
    (Worker._launch_graphed), and each request gets its own tokens back: every token is an
    audio token of its request's code position (a row given another request's token would
    break that, the requests being at different positions). Token-for-token equality with
    eager forwards is the CPU test's (tests/models/test_orpheus_async.py): in bf16 the grouping
    of rows into GEMMs moves logits by rounding, enough to flip a near-tie in sampling."""
    from models.orpheus import tokens as T
    from tests.cpu_graphs import count_graphed_steps

    model = load_tiny(gpu_tiny_dirs, CUDA, torch.bfloat16)
    defaults = model.facts.sampling_defaults
    lengths = (42, 35, 28, 21, 35, 14)
    specs = [
        SpeechRequest(t, sampling=SamplingParams(seed=i, max_tokens=n, min_tokens=n, **defaults))
        for i, (t, n) in enumerate(zip(TEXTS, lengths, strict=True))
    ]
    # Admission off: arrivals come after the first turns, whose costs include the graphs'
    # first replays, and a tiny model's turn is all launch overhead, not a real-time budget.
    config = EngineConfig(
        num_kv_blocks=512, max_num_seqs=8, async_scheduling=True, realtime_admission=False
    )
    core = EngineCore(model, config, CUDA, "flashinfer")
    assert core.worker.prompt_graphs is not None
    graphed = count_graphed_steps(core.worker)
    pending, reqs, step = list(specs), [], 0
    while pending or core.has_work():
        if pending and step % 3 == 0:  # one arrival every third step
            reqs.append(core.add_request(copy.deepcopy(pending.pop(0))))
        core.step()
        step += 1
    core.close()
    assert len(graphed) >= 3 and max(graphed) > 1  # arrivals beside decodes, from graphs
    for r, n in zip(reqs, lengths, strict=True):
        assert len(r.output_ids) == n
        assert all(T.code_of(t, i) is not None for i, t in enumerate(r.output_ids)), r.request_id


@needs_flashinfer
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_prompt_graph_replay_matches_the_eager_prefill(gpu_tiny_dirs, kv_cache_dtype):
    """Three prompts packed in one step: the captured prompt graph's hidden states and the k/v
    it writes match FlashInfer's eager prefill over the paged cache (bf16 rounding apart; with
    fp8 pages the eager prefill attends to the k/v as stored, the graph to them as computed)."""
    model = load_tiny(gpu_tiny_dirs, CUDA, torch.bfloat16)
    config = EngineConfig(num_kv_blocks=64, max_num_seqs=8, kv_cache_dtype=kv_cache_dtype)
    core = EngineCore(model, config, CUDA, "flashinfer")
    worker, block = core.worker, config.block_size
    lengths, tables = [5, 40, 3], [[3], [1, 0, 12], [5]]
    slots = [
        t[p // block] * block + p % block
        for n, t in zip(lengths, tables, strict=True)
        for p in range(n)
    ]
    layout = StepLayout(lengths, lengths, slots, tables, block)
    torch.manual_seed(0)
    ids = torch.randint(0, model.shape.vocab_size, (sum(lengths),), device=CUDA)
    positions = [p for n in lengths for p in range(n)]
    slot_t = torch.tensor(slots, device=CUDA)
    cache = worker.cache
    with torch.inference_mode():
        worker.attn.prepare(layout)
        eager = model.forward(ids, torch.tensor(positions, device=CUDA), worker.attn).float()
        stored = [
            (cache.k[i][slot_t].float(), cache.v[i][slot_t].float()) for i in range(len(cache.k))
        ]
        for i in range(len(cache.k)):
            cache.k[i].zero_()
            cache.v[i].zero_()
        graphed = worker.prompt_graphs.run(ids, positions, layout).float()
    torch.cuda.synchronize()
    core.close()
    cosine = torch.nn.functional.cosine_similarity(graphed, eager, dim=-1)
    assert cosine.min() > (0.999 if kv_cache_dtype == "auto" else 0.99), cosine.min()
    # bf16 pages: rounding apart. fp8 (e4m3) pages: a value the two paths compute a hair apart
    # may round to neighbouring float8 steps, one mantissa step (2**-3 of the value) apart.
    rtol = 0.05 if kv_cache_dtype == "auto" else 2**-3 + 0.01
    for i, (k, v) in enumerate(stored):
        torch.testing.assert_close(cache.k[i][slot_t].float(), k, atol=0.05, rtol=rtol)
        torch.testing.assert_close(cache.v[i][slot_t].float(), v, atol=0.05, rtol=rtol)


def test_orpheus_sampling_graphs_draw_the_eager_samplers_tokens(gpu_tiny_dirs):
    """tiny-orpheus with its own sampling defaults (nucleus, repetition penalty): the head's
    code-position masking replayed in the graph, from each row's output position on the
    device, gives the eager path's seeded tokens, stops at frame boundaries included."""
    model = load_tiny(gpu_tiny_dirs, CUDA, torch.bfloat16)
    defaults = model.facts.sampling_defaults
    specs = [
        SpeechRequest(t, sampling=SamplingParams(seed=i, max_tokens=n, min_tokens=7, **defaults))
        for i, (t, n) in enumerate(zip(TEXTS, (21, 35, 14, 28, 42, 7), strict=True))
    ]
    tokens = {}
    for graphed in (True, False):
        config = EngineConfig(
            num_kv_blocks=512, max_num_seqs=8, sampling_graphs=graphed, async_scheduling=True
        )
        core = EngineCore(model, config, CUDA, "flashinfer")
        assert (core.worker.sampling_graphs is not None) == graphed
        reqs = [core.add_request(copy.deepcopy(s)) for s in specs]
        while core.has_work():
            core.step()
        tokens[graphed] = [r.output_ids for r in reqs]
        if graphed:
            assert core.worker.sampling_graphs.replays > 20
        core.close()
    assert tokens[True] == tokens[False]
