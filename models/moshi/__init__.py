"""Moshi (kyutai): full-duplex speech-to-speech with a temporal and a depth transformer."""
