"""CUDA graphs for decode steps: static buffers, batch buckets, one memory pool, eager switch.

A decode step of n requests (one token, or one row of tokens, each) is padded to the smallest
captured bucket ≥ n (padding rows read token 0 at position 0 and write their k/v to the KV cache's scratch page), the attention
backend plans for that bucket outside the graph, and the graph replays the whole backbone in
one launch. Steps with prefill, or larger than the biggest bucket, run eagerly.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from functools import partial

import torch

from engine.attention import AttentionBackend, StepLayout
from engine.compile_guard import CompiledOrEager
from models.device_util import StagingRing

log = logging.getLogger("voxgate.graphs")

# A step of n rows runs the smallest bucket >= n, padding rows included. From ~200 rows a
# decode step's bfloat16 GEMMs are bound by compute rather than by reading the weights (an
# H200 does ~989 TFLOPS against 4.8 TB/s: ~200 FLOP a byte, and a GEMM does one FLOP a weight
# byte a row), so a padding row costs about what a real one does: the buckets step by 16 rows
# where the large batches run (272 rows replay 272, not 320: 15 % less GEMM work).
DEFAULT_BUCKETS = (
    (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112)
    + tuple(range(128, 320, 16))
    + (320, 352, 384, 416, 448, 480, 512)
)

Forward = Callable[[torch.Tensor, torch.Tensor, AttentionBackend], torch.Tensor]


class PerBucketGraphs:
    """Graphs captured per batch bucket (`buckets`, ascending): a step of n rows replays the
    smallest bucket that holds it, padded; None when n exceeds them all (run eagerly)."""

    buckets: tuple[int, ...]

    def bucket_for(self, n: int) -> int | None:
        return next((b for b in self.buckets if b >= n), None)


class DecodeGraphs(PerBucketGraphs):
    kind = "decode graphs for batch sizes"  # what the capture's log line names

    def __init__(
        self,
        forward: Forward,
        attn: AttentionBackend,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        block_size: int,
        buckets: tuple[int, ...] = DEFAULT_BUCKETS,
        row_width: int = 0,
    ) -> None:
        if not attn.supports_graphs:
            raise ValueError(f"attention backend {attn.name!r} cannot be captured in CUDA graphs")
        self.forward = forward
        self.attn = attn
        self.block_size = block_size
        self.buckets = tuple(sorted(buckets))
        self.max_batch = self.buckets[-1]
        # One id per request, or one row of ids for models whose tokens are rows (CSM, Moshi,
        # voxgate-tiny: codebooks + text). A padding row of zeros is valid in every column.
        ids_shape = (self.max_batch, row_width) if row_width else (self.max_batch,)
        self._ids = torch.zeros(ids_shape, dtype=torch.long, device=device)  # [B] or [B, W]
        self._pos = torch.zeros(self.max_batch, dtype=torch.long, device=device)  # [B]
        self._pos_staging = StagingRing(self.max_batch, torch.long, device)
        self._out = torch.zeros(self.max_batch, hidden_size, dtype=dtype, device=device)  # [B, H]
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._pool = None

    @property
    def hidden_buffer(self) -> torch.Tensor:
        """[max_batch, H]: where each replay leaves its rows' hidden states (a graph of the
        step's head and sampling reads them here: engine/sampling_graphs.py)."""
        return self._out

    def _dummy_layout(self, batch: int) -> StepLayout:
        scratch = self.attn.cache.scratch_block
        return StepLayout(
            query_lens=[1] * batch,
            context_lens=[1] * batch,
            slot_mapping=[scratch * self.block_size] * batch,
            block_tables=[[scratch]] * batch,
            block_size=self.block_size,
        )

    @torch.inference_mode()
    def capture(self) -> None:
        """Largest bucket first so smaller ones reuse its pool memory."""
        for batch in reversed(self.buckets):
            self.attn.prepare(self._dummy_layout(batch), graph_batch=batch)
            ids, pos = self._ids[:batch], self._pos[:batch]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # warm up kernels and allocator outside capture
                    self.forward(ids, pos, self.attn)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                self._out[:batch] = self.forward(ids, pos, self.attn)
            if self._pool is None:
                self._pool = graph.pool()
            self._graphs[batch] = graph
        torch.cuda.synchronize()
        log.info("captured %s %s", self.kind, list(self.buckets))

    def run(
        self,
        input_ids: torch.Tensor,
        positions: list[int],
        layout: StepLayout,
        prepare: Callable[..., None] | None = None,
    ) -> torch.Tensor:
        """Replay the decode graph for n requests; input_ids [n] or [n, W] on the device (with async
        scheduling some were gathered from the previous step's tokens there: nothing here
        waits for them). `prepare` plans attention (default: the backend's own prepare).
        Returns hidden [n, H]."""
        n = input_ids.shape[0]
        batch = self.bucket_for(n)
        if batch is None or batch not in self._graphs:
            raise ValueError(f"no captured graph for a batch of {n}")
        self.stage(input_ids, positions, layout, batch, prepare)
        self._graphs[batch].replay()
        return self._out[:n]

    def stage(
        self,
        input_ids: torch.Tensor,
        positions: list[int],
        layout: StepLayout,
        batch: int,
        prepare: Callable[..., None] | None = None,
    ) -> None:
        """Fill the static inputs for a step padded to `batch` and plan its attention."""
        n = input_ids.shape[0]
        self._ids[:n].copy_(input_ids, non_blocking=True)
        self._ids[n:batch].zero_()  # padding rows read token 0 (a row of 0s) at position 0
        with self._pos_staging.fill(self._pos[:batch]) as pos:
            pos[:n] = positions
            pos[n:] = 0
        (prepare or self.attn.prepare)(layout, graph_batch=batch)


def capture_per_bucket(
    buckets: tuple[int, ...], call: Callable[[int], torch.Tensor], device: torch.device
) -> tuple[dict[int, torch.cuda.CUDAGraph], dict[int, torch.Tensor]]:
    """Capture call(batch) for every bucket, largest first: its eager warm-up (twice, on a side
    stream) allocates a stage's own buffers outside any graph, and the smaller graphs reuse
    its pool. Returns the graphs and their output buffers by bucket."""
    graphs: dict[int, torch.cuda.CUDAGraph] = {}
    outs: dict[int, torch.Tensor] = {}
    pool = None
    current = torch.cuda.current_stream(device)
    for batch in sorted(buckets, reverse=True):
        side = torch.cuda.Stream(device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(2):
                call(batch)
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            outs[batch] = call(batch)
        pool = graph.pool() if pool is None else pool
        graphs[batch] = graph
    torch.cuda.synchronize(device)
    return graphs, outs


# Modules already handed to compile_regions by any CallableGraphs (a model's lane and steady
# codec capture on two threads at start-up).
_COMPILED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
_COMPILED_LOCK = threading.Lock()
_BLOCKS_COMPILED = 0  # blocks handed to compile_regions in this process (under the lock)


def compile_regions(modules: Iterable[torch.nn.Module]) -> None:
    """Regional compilation for capture in CUDA graphs afterwards: each module's forward
    through torch.compile (Inductor) in place. Pass a model's *repeated* blocks: modules of
    one class share one compiled program (their weights are the program's inputs), so the
    compile costs one block of each kind, not the model's depth: a whole deep model as one
    graph (CosyVoice 2's flow estimator, 56 transformer blocks) does not finish compiling in
    550 s on an H200 (docs/benchmark-history.md). `fullgraph`: a graph break would split the
    fused kernels back up; dynamic shapes: every bucket of rows and frames shares the
    program. Inductor fuses what eager torch launches one by one (layer norms with their
    residual adds, masks, activations), so a replay holds fewer, larger kernels.

    A block whose compile fails (no working Triton or C compiler on this machine, an
    Inductor bug) goes back to eager on its first call, with the blocks of its kind, and a
    warning naming the kind and where the compiler failed: the other kinds stay compiled,
    and the server starts either way."""
    # Every block's program is cached on one code object (nn.Module._call_impl), one per
    # block kind, attribute value (a dilation) and dtype, and dynamo refuses a compile past
    # its recompile limit (default 8). So the limit grows with the blocks this process has
    # handed to compile_regions, its programs' bound: SNAC's 10 on CUDA (22 where its
    # residual units compile too) in float32 and float16 in one process are 20.
    global _BLOCKS_COMPILED
    modules = list(modules)
    with _COMPILED_LOCK:  # a model's lane and steady codec may capture on two threads
        _BLOCKS_COMPILED += len(modules)
        torch._dynamo.config.recompile_limit = max(
            torch._dynamo.config.recompile_limit, 32, _BLOCKS_COMPILED + 8
        )
    kinds: dict[type, list[torch.nn.Module]] = {}
    for module in modules:
        kinds.setdefault(type(module), []).append(module)
    for module in modules:
        kind = kinds[type(module)]
        module._compiled_call_impl = CompiledOrEager(
            torch.compile(module._call_impl, fullgraph=True, dynamic=True),
            module._call_impl,
            f"{type(module).__name__} ({len(kind)} blocks)",
            ", which serves fewer streams on a GPU; --no-compile-codec skips compiling",
            on_failure=partial(uncompile_regions, kind),
        )


def uncompile_regions(modules: Iterable[torch.nn.Module]) -> None:
    """Undo compile_regions: the modules run their eager forward again (nn.Module.compile
    keeps the compiled call in `_compiled_call_impl`; None is eager)."""
    for module in modules:
        module._compiled_call_impl = None


def compiled_of(modules: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """Those of `modules` that run compiled now (a failed compile may have undone them,
    through any CallableGraphs sharing them)."""
    return [m for m in modules if m._compiled_call_impl is not None]


def warm_up(fn: Callable, inputs: list[torch.Tensor]) -> None:
    """Run fn(*inputs) twice before a capture: allocations, library handles, and the first
    call of compiled regions, which compiles them (or puts them back on eager)."""
    for _ in range(2):
        fn(*inputs)


class CallableGraphs:
    """Captured graphs of arbitrary fixed-shape callables (a codec's calls), sharing
    one memory pool. A model captures the shapes it uses most at start-up (`capture`) and
    calls `run`, which replays when the key was captured and runs eagerly otherwise.

    Capture uses thread-local mode: the detokenizer captures and replays on its own thread and
    stream while the LLM's graphs replay on the engine thread."""

    def __init__(self, device: torch.device, paced: bool = False, compiled: bool = False) -> None:
        self.device = device
        self.paced = paced
        self.compiled = compiled  # compile_regions compiles what a codec names before capture
        self._regions: list[torch.nn.Module] = []  # blocks named for compiling
        self._pool = torch.cuda.graph_pool_handle()
        self._graphs: dict[
            object, tuple[torch.cuda.CUDAGraph, list[torch.Tensor], torch.Tensor]
        ] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._graphs

    @torch.inference_mode()
    def capture(
        self,
        key: object,
        fn: Callable[..., torch.Tensor],
        inputs: list[torch.Tensor],
        borrow: tuple[int, ...] = (),
    ):
        """Capture fn(*inputs) for `key`; returns the graph's output buffer(s), which each
        replay rewrites. `borrow`: indices of inputs that are themselves the graph's input
        buffers (another graph's outputs, say): `run` copies nothing into them when handed
        the same tensors."""
        static = [t if i in borrow else t.clone() for i, t in enumerate(inputs)]
        current = torch.cuda.current_stream(self.device)
        # A worker thread's own stream is the capture stream, so its graphs are captured where
        # they replay. On the default stream, which cannot capture, a side stream and torch's
        # capture stream serve.
        own = current != torch.cuda.default_stream(self.device)
        stream = current if own else torch.cuda.Stream(self.device)
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            warm_up(fn, static)
        current.wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(
            graph,
            pool=self._pool,
            stream=stream if own else None,
            capture_error_mode="thread_local",
        ):
            out = fn(*static)
        self._graphs[key] = (graph, static, out)
        return out

    def compile_regions(self, modules: Iterable[torch.nn.Module]) -> None:
        """With `compiled` (ModelFacts.compile_codec: --compile-codec, on by default), compile
        the blocks a codec names before it captures them (module-level compile_regions); each
        once, so a lane and the steady codec sharing a model share the programs. The first
        capture pays the compile time."""
        if not self.compiled:
            return
        modules = list(modules)
        with _COMPILED_LOCK:
            fresh = [m for m in modules if m not in _COMPILED]
            _COMPILED.update(fresh)
        compile_regions(fresh)
        self._regions = modules  # named for compiling; compiled_of says which still are

    @property
    def compiled_blocks(self) -> int:
        """How many blocks this set's graphs run compiled (0: none named, or compiling
        failed and they run eager kernels)."""
        return len(compiled_of(self._regions))

    def pace(self) -> None:
        """With `paced`, wait (GIL released) until the work queued on this thread's stream has
        run. A caller that replays a job as several graphs calls it between them, so the GPU
        never holds a whole job of its kernels at once: kernels queued ahead of another
        stream's in the device's shared work queues delay that stream too, stream priority
        notwithstanding (which is also why larger launch queues make CosyVoice 2's LLM step
        under load slower, not faster)."""
        if self.paced:
            torch.cuda.current_stream(self.device).synchronize()

    def run(
        self, key: object, fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]
    ) -> torch.Tensor:
        """fn(*inputs); the result of a replay is a view of the graph's output buffer, valid
        until the next replay of the same key."""
        entry = self._graphs.get(key)
        if entry is None:
            return fn(*inputs)
        graph, static, out = entry
        for buffer, value in zip(static, inputs, strict=True):
            if value is not buffer:
                buffer.copy_(value, non_blocking=True)
        graph.replay()
        return out
