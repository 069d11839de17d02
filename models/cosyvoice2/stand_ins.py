"""Small stand-ins for the checkpoint's ONNX models and Qwen2 tokenizer, with the published
signatures, for the tiny preset: nothing is downloaded and voice prompts still run end to end.

- speech_tokenizer_v2.onnx: (feats [1, 128, T] float32, feats_length [1] int32) → tokens
  [1, T/4] (one code per 4 Whisper frames, 25 Hz, as the real one): 4-frame average pooling,
  a random projection to the 6561 codes, argmax.
- campplus.onnx: (fbank [1, T, 80] float32) → x-vector [1, 192]: the time average of the
  squared (mean-normalised) fbank, i.e. its variance per bin, projected.
- CosyVoice-BlankEN: a byte-level BPE without merges (every UTF-8 byte a token) plus
  <|endoftext|>, saved by transformers so AutoTokenizer loads it like Qwen2's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.byte_level import byte_alphabet


def write_speech_tokenizer(path: Path, codes: int, seed: int) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    proj = np.random.default_rng(seed).standard_normal((128, codes)).astype(np.float32)
    nodes = [
        helper.make_node("AveragePool", ["feats"], ["pooled"], kernel_shape=[4], strides=[4]),
        helper.make_node("Transpose", ["pooled"], ["frames"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["frames", "proj"], ["scores"]),
        helper.make_node("ArgMax", ["scores"], ["indices"], axis=2, keepdims=0),
        # feats_length is part of the signature; the stand-in derives the length from feats.
        helper.make_node("Identity", ["feats_length"], ["feats_length_out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "speech_tokenizer_v2_stand_in",
        [
            helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, "T"]),
            helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1]),
        ],
        [
            helper.make_tensor_value_info("indices", TensorProto.INT64, [1, "N"]),
            helper.make_tensor_value_info("feats_length_out", TensorProto.INT32, [1]),
        ],
        initializer=[numpy_helper.from_array(proj, "proj")],
    )
    onnx.save(_model(graph, opset=17), str(path))


def write_campplus(path: Path, dim: int, seed: int) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    proj = (0.1 * np.random.default_rng(seed).standard_normal((80, dim))).astype(np.float32)
    nodes = [
        helper.make_node("Mul", ["input", "input"], ["squared"]),
        helper.make_node("ReduceMean", ["squared"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("MatMul", ["mean", "proj"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "campplus_stand_in",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, "T", 80])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, dim])],
        initializer=[numpy_helper.from_array(proj, "proj")],
    )
    onnx.save(_model(graph, opset=13), str(path))


def write_byte_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    fast.save_pretrained(str(folder))


# The IR version onnx writes by default follows the onnx package (IR 14 with onnx 1.21), and an
# onnxruntime older than that package refuses the file ("Unsupported model IR version"), as the
# GPU machine's onnxruntime did. The stand-ins use no newer IR feature: write IR 10 (onnxruntime
# >= 1.17 reads it).
STAND_IN_IR_VERSION = 10


def _model(graph, opset: int):
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = STAND_IN_IR_VERSION
    return model
