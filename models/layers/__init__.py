"""Transformer building blocks written for the engine's paged KV cache."""
