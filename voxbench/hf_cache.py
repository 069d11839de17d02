"""How a transformers model's forward takes its KV cache: the keyword is `cache` from
transformers 5.24, `past_key_values` before (the project allows 5.21 and later, and a GPU
image may hold either). A cache passed under the wrong keyword is swallowed by the forward's
`**kwargs` without an error and the model runs without its context, so every baseline that
steps a transformers model token by token names the keyword through `cache_kwargs`."""

from __future__ import annotations

import inspect


def cache_keyword(lm) -> str:
    """`cache` or `past_key_values`: the keyword `lm`'s forward takes its KV cache by."""
    parameters = inspect.signature(type(lm).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def cache_kwargs(lm, cache) -> dict:
    """`{keyword: cache}` for `lm(..., **cache_kwargs(lm, cache))`."""
    return {cache_keyword(lm): cache}
