"""Orpheus TTS (canopylabs): a Llama backbone that speaks SNAC 24 kHz codes as text tokens."""
