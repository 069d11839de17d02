"""Sesame CSM: a Llama backbone that predicts each Mimi frame's first codebook, and a small
depth decoder that predicts the other 31, batched across requests."""
