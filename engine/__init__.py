"""Model-agnostic serving engine: lifecycle, scheduling, paged KV, worker, async client."""
