"""Helpers for the gateway's asyncio tasks."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel a task and wait for it to unwind (its `finally` runs: a session's tasks free
        their engine requests there). A task already done, or None, is left as it is. The task's
        own cancellation is swallowed; a cancellation of the caller is not, nor any other exception
    the task ends with."""
    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # we are being cancelled ourselves: do not swallow that
