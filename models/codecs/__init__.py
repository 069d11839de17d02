"""Audio codecs used as detokenizers (SNAC, Mimi, …), each streaming with explicit per-request
state so that audio decoded chunk by chunk equals audio decoded at once."""
