"""The network edge: WebSocket sessions, audio codecs, pacing, auth, metrics, the CLI."""
