"""Model-agnostic serving engine: scheduling, paged KV, the step loops, and the clients that
run them (engine/api.py is the contract callers use; docs/engine.md maps the modules)."""
