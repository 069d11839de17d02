"""torch.compile with the eager code standing by: a compile that fails (no working Triton or
C compiler on this machine, an Inductor bug) must cost speed, not the server. The first call
that fails to compile warns, naming what and where the compiler failed, and from then on the
eager code runs. Errors of the code itself are not the compiler's: the eager call raises
them again."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable

import torch

log = logging.getLogger("voxgate.graphs")


def _compile_failures() -> tuple[type[BaseException], ...]:
    """What a failing compile raises: dynamo's and Inductor's own errors, and dynamo's refusal
    to compile past its recompile limit under fullgraph (not one of them: a plain Exception).
    Looked up when an error is caught, not at import: `torch._dynamo` is ~70 MB of resident
    memory that a server compiling nothing (voxgate-tiny on a CPU) must not carry."""
    return (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit)


class CompiledOrEager:
    """`compiled` until it fails to compile, `eager` after. `name` and `cost` complete the
    warning ("compiling {name} failed (…); it runs uncompiled{cost}"); `on_failure` runs once,
    on that failure (compile_regions puts a block's whole kind back on eager)."""

    def __init__(
        self,
        compiled: Callable,
        eager: Callable,
        name: str,
        cost: str = "",
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self.compiled = compiled
        self.eager = eager
        self.name = name
        self.cost = cost
        self.on_failure = on_failure
        self.failed = False

    def __call__(self, *args, **kwargs):
        if self.failed:
            return self.eager(*args, **kwargs)
        try:
            return self.compiled(*args, **kwargs)
        except _compile_failures() as error:
            self.failed = True
            log.warning(
                "compiling %s failed (%s); it runs uncompiled%s",
                self.name, where_it_failed(error), self.cost,
            )  # fmt: skip
            if self.on_failure is not None:
                self.on_failure()
            return self.eager(*args, **kwargs)


def where_it_failed(error: BaseException) -> str:
    """The error's innermost cause and the source line it came from (an Inductor failure
    can wrap an AssertionError with no message: the line is what says which)."""
    root = error
    while root.__cause__ is not None or root.__context__ is not None:
        root = root.__cause__ or root.__context__
    frames = traceback.extract_tb(root.__traceback__)
    place = f" at {frames[-1].filename}:{frames[-1].lineno} ({frames[-1].line})" if frames else ""
    message = (str(root).strip().splitlines() or [""])[0][:200]
    return (
        f"{type(error).__name__}: {type(root).__name__}{': ' + message if message else ''}{place}"
    )
