"""What the per-request baselines share about the transformers models they run: the
configuration fields of a Llama-shaped decoder from the engine's `LlamaArgs`
(`decoder_config_fields`), and how a model's forward takes its KV cache: the keyword is `cache`
from transformers 5.24, `past_key_values` before (the project allows 5.21 and later, and a GPU
image may hold either). A cache passed under the wrong keyword is swallowed by the forward's
`**kwargs` without an error and the model runs without its context, so every baseline that
steps a transformers model token by token names the keyword through `cache_kwargs`, and reads
the cache a forward returns through `output_cache`."""

from __future__ import annotations

import inspect

from models.layers.llama import LlamaArgs


def cache_keyword(lm) -> str:
    """`cache` or `past_key_values`: the keyword `lm`'s forward takes its KV cache by."""
    parameters = inspect.signature(type(lm).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def output_cache(output):
    """The KV cache a forward returned: `output.cache` from transformers 5.24,
    `output.past_key_values` before (a deprecated alias after)."""
    return output.cache if hasattr(output, "cache") else output.past_key_values


def cache_kwargs(lm, cache) -> dict:
    """`{keyword: cache}` for `lm(..., **cache_kwargs(lm, cache))`."""
    return {cache_keyword(lm): cache}


def decoder_config_fields(args: LlamaArgs) -> dict:
    """The sizes every Llama-shaped transformers configuration (LlamaConfig, Qwen3Config …)
    takes from the engine's `LlamaArgs`; a caller adds its family's rotary and bias fields."""
    return {
        "vocab_size": args.vocab_size,
        "hidden_size": args.hidden_size,
        "intermediate_size": args.intermediate_size,
        "num_hidden_layers": args.num_layers,
        "num_attention_heads": args.num_heads,
        "num_key_value_heads": args.num_kv_heads,
        "head_dim": args.head_dim,
        "rms_norm_eps": args.rms_norm_eps,
        "max_position_embeddings": args.max_positions,
    }
