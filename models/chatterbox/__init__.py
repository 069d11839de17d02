"""Chatterbox (Resemble AI, MIT): T3, a Llama backbone that turns text plus a conditioning
prefix (voice-encoder speaker embedding, reference speech tokens through a perceiver, an
emotion-exaggeration scalar) into 25 Hz S3 speech tokens with classifier-free guidance; and
S3Gen, CosyVoice's flow matching + HiFT (models/codecs/flow_hift/), 24 kHz out."""
