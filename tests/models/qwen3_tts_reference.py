"""Runs the official qwen-tts package on a checkpoint folder: greedy codes from its generate,
and its speech tokenizer's decode of given codes. A script, run by official_qwen3_tts.py in a
subprocess of its own, because qwen-tts 0.1.1 is written for transformers 4.57 (the project
pins 5.x): `make reference-deps` puts transformers 4.57.3 and the hub/tokenizers versions it
needs in .ref/tf457, first on this process's path only.

usage: python qwen3_tts_reference.py REFERENCE_DIR JOB.json OUT.npz
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from pathlib import Path


def _unused(name: str) -> types.ModuleType:
    """A stand-in for a module qwen-tts imports at load time for paths these runs never take
    (librosa's mel filters: the Base models' speaker encoder; audio file I/O; the 25 Hz
    tokenizer's sox/torchaudio/onnxruntime). Using it raises."""

    def refuse(*args, **kwargs):
        raise RuntimeError(f"{name} is not installed for the reference run")

    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)

    def attribute(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return refuse

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


def _slaney_mel(sr, n_fft, n_mels, fmin, fmax):
    """librosa.filters.mel(sr=, n_fft=, n_mels=, fmin=, fmax=) with its defaults (Slaney
    scale and norm): [n_mels, n_fft // 2 + 1]."""
    from transformers.audio_utils import mel_filter_bank

    return mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1,
        num_mel_filters=n_mels,
        min_frequency=float(fmin),
        max_frequency=float(fmax if fmax is not None else sr / 2),
        sampling_rate=sr,
        norm="slaney",
        mel_scale="slaney",
    ).T


def main(ref: str, job_path: str, out_path: str) -> None:
    sys.path[:0] = [f"{ref}/tf457", ref]
    import numpy as np
    import torch
    import transformers  # noqa: F401 - the 4.57 copy, before the stand-ins exist

    for name in (
        "librosa",
        "librosa.filters",
        "soundfile",
        "sox",
        "torchaudio",
        "torchaudio.compliance",
        "torchaudio.compliance.kaldi",
        "onnxruntime",
    ):
        sys.modules.setdefault(name, _unused(name))
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])
    # The speaker encoder's mel filters: librosa's Slaney filter bank, here transformers'
    # implementation of it (the package's own STFT, padding and log run as they are).
    sys.modules["librosa.filters"].mel = _slaney_mel
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )
    from safetensors.torch import load_file

    job = json.loads(Path(job_path).read_text())
    torch.set_grad_enabled(False)
    out = {}

    def speech_tokenizer(folder: str):
        """The package's 12 Hz tokenizer (encoder and decoder) with the folder's weights."""
        sub = Path(folder, "speech_tokenizer")
        config = Qwen3TTSTokenizerV2Config(**json.loads((sub / "config.json").read_text()))
        tokenizer = Qwen3TTSTokenizerV2Model(config).eval()
        result = tokenizer.load_state_dict(load_file(str(sub / "model.safetensors")), strict=False)
        # Only the decoder quantizers' input projections (used to encode) may be absent.
        absent = [k for k in result.missing_keys if ".input_proj." not in k]
        if absent or result.unexpected_keys:
            raise SystemExit(f"speech tokenizer layout mismatch: {absent} {result.unexpected_keys}")
        return tokenizer

    # Each generate job: a checkpoint folder and a batch of requests, greedy.
    for j, g in enumerate(job.get("generate", [])):
        cfg = json.loads(Path(g["folder"], "config.json").read_text())
        model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**cfg)).eval()
        model.load_state_dict(load_file(f"{g['folder']}/model.safetensors"), strict=True)
        clone, ref_ids = None, None
        if g.get("clone_audio"):  # voice cloning, one clip per request
            clips = [np.asarray(a, dtype=np.float32) for a in g["clone_audio"]]
            xvectors = [model.extract_speaker_embedding(a, 24000) for a in clips]
            for i, x in enumerate(xvectors):
                out[f"xvector{j}_{i}"] = x.numpy()
            n = len(xvectors)
            clone = {
                "ref_spk_embedding": xvectors,
                "x_vector_only_mode": [True] * n,
                "icl_mode": [False] * n,
                "ref_code": [None] * n,
            }
            if g.get("clone_text_ids"):  # in-context: the clip's codes and transcript too
                tokenizer = speech_tokenizer(g["folder"])
                ref_codes = []
                for i, a in enumerate(clips):
                    wave = torch.from_numpy(a)[None]
                    codes = tokenizer.encode(
                        wave, padding_mask=torch.ones_like(wave, dtype=torch.long)
                    ).audio_codes
                    ref_codes.append(codes[0])
                    out[f"refcodes{j}_{i}"] = codes[0].numpy()
                clone.update(
                    x_vector_only_mode=[False] * n, icl_mode=[True] * n, ref_code=ref_codes
                )
                ref_ids = [torch.tensor([ids]) for ids in g["clone_text_ids"]]
        codes, _ = model.generate(
            input_ids=[torch.tensor([ids]) for ids in g["input_ids"]],
            ref_ids=ref_ids,
            voice_clone_prompt=clone,
            instruct_ids=[torch.tensor([i]) if i else None for i in g["instruct_ids"]],
            languages=g["languages"],
            speakers=g["speakers"],
            non_streaming_mode=g.get("non_streaming_mode", True),
            do_sample=False,
            subtalker_dosample=False,
            repetition_penalty=1.0,
            max_new_tokens=g["max_new_tokens"],
        )
        for i, c in enumerate(codes):
            out[f"codes{j}_{i}"] = c.numpy()
    # Each decode job: a checkpoint folder and utterances' frames [T, 16].
    for j, d in enumerate(job.get("decode", [])):
        decoder = speech_tokenizer(d["folder"]).decoder
        for i, frames in enumerate(d["frames"]):
            codes = torch.tensor(frames).T[None]  # [1, 16, T], as Qwen3TTSTokenizerV2Model.decode
            out[f"audio{j}_{i}"] = decoder.chunked_decode(codes).squeeze(1)[0].numpy()
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
