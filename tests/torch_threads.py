"""One torch thread for the length of a test or module: tiny models' kernels are microseconds
long, and on a shared 2-core box a second thread only waits on a busy core (the Qwen3-TTS tests
ran 20× slower with two)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
