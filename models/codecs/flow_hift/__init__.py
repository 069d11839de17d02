"""The flow-matching + HiFT detokenizer family (CosyVoice 2; GLM-4-Voice, Step-Audio 2 and
Chatterbox use variations): speech tokens → mel (upsampling conformer encoder + causal
conditional flow matching) → waveform (HiFT: neural source-filter + iSTFT)."""
