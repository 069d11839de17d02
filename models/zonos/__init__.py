"""Zonos v0.1 (Zyphra): eSpeak phonemes + conditioning prefix, a transformer with CFG, DAC 44.1 kHz."""
