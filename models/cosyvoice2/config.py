"""`cosyvoice2.yaml` → typed settings.

The published config is HyperPyYAML: `!new:cosyvoice.flow.flow.CausalMaskedDiffWithXvec` tags
build CosyVoice's own classes and `!ref <chunk_size>` refers to other keys. We read it as data
(never importing what a tag names): a tagged mapping becomes a dict with its class under
`__class__`, a reference is resolved against the top-level keys, `!apply:` (random seeds) is
dropped. Only the fields that shape the networks are kept; training-only entries are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.checkpoint_errors import CheckpointError
from models.codecs.flow_hift.dit_config import DitConfig

CONFIG_FILE = "cosyvoice2.yaml"


class _Ref(str):
    """An unresolved `!ref` expression such as "<chunk_size> * <token_mel_ratio>"."""


def _loader():
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def tagged(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            return {"__class__": suffix, **loader.construct_mapping(node, deep=True)}
        if isinstance(node, yaml.SequenceNode):
            return {"__class__": suffix, "__args__": loader.construct_sequence(node, deep=True)}
        return {"__class__": suffix}

    Loader.add_multi_constructor("!new:", tagged)
    Loader.add_multi_constructor("!name:", tagged)
    Loader.add_multi_constructor("!apply:", lambda loader, suffix, node: None)
    Loader.add_constructor("!ref", lambda loader, node: _Ref(loader.construct_scalar(node)))
    return Loader


def _resolve(value: Any, top: dict) -> Any:
    if isinstance(value, _Ref):
        expr = re.sub(r"<([\w.]+)>", lambda m: repr(_resolve(top[m.group(1)], top)), value)
        if re.fullmatch(r"[\d\s.+\-*/()e]+", expr):
            return eval(expr, {"__builtins__": {}})  # noqa: S307 - digits and operators only
        return _resolve_literal(expr)
    if isinstance(value, dict):
        return {k: _resolve(v, top) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, top) for v in value]
    return value


def _resolve_literal(expr: str) -> Any:
    import ast

    try:
        return ast.literal_eval(expr)
    except (ValueError, SyntaxError):
        return expr


def read_yaml(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint folder {path.parent} lacks {path.name}") from None
    return parse_yaml_text(text, str(path))


def parse_yaml_text(text: str, where: str) -> dict:
    """HyperPyYAML text as data (tags never imported, references resolved); `where` names it
    in errors."""
    import yaml

    try:
        raw = yaml.load(text, Loader=_loader())  # noqa: S506 - our SafeLoader subclass
    except yaml.YAMLError as exc:
        raise CheckpointError(f"{where} is not valid YAML: {exc}") from None
    return _resolve(raw, raw)


@dataclass(frozen=True)
class LlmConfig:
    speech_token_size: int  # 6561 codes; the head has 3 more rows: eos and two unused stops
    llm_input_size: int
    llm_output_size: int
    top_p: float  # ras_sampling's nucleus
    top_k: int
    win_size: int  # ras_sampling's repetition window
    tau_r: float


@dataclass(frozen=True)
class EncoderConfig:
    output_size: int
    attention_heads: int
    linear_units: int
    num_blocks: int
    static_chunk_size: int  # tokens per attention chunk (before the 2x upsampling)
    num_up_blocks: int = 4  # fixed in UpsampleConformerEncoder


@dataclass(frozen=True)
class EstimatorConfig:
    in_channels: int  # x + mu + speaker + cond, stacked: 4 x n_mels
    out_channels: int  # n_mels
    channels: tuple[int, ...]
    attention_head_dim: int
    n_blocks: int
    num_mid_blocks: int
    num_heads: int
    static_chunk_size: int  # mel frames per attention chunk in streaming mode


@dataclass(frozen=True)
class FlowConfig:
    input_size: int
    output_size: int  # n_mels
    spk_embed_dim: int
    vocab_size: int
    token_mel_ratio: int
    pre_lookahead_len: int
    encoder: EncoderConfig
    estimator: EstimatorConfig | DitConfig  # CosyVoice 2's U-Net, or Step-Audio 2's DiT
    inference_cfg_rate: float
    t_scheduler: str
    n_timesteps: int = 10  # CausalMaskedDiffWithXvec.inference's fixed step count
    # Streaming attention grid: False, chunks from the row's first token (CosyVoice 2, the
    # prompt's tokens cut to whole chunks); True, the voice prompt as one chunk and the grid
    # from its end (Step-Audio 2's streaming caches its prompt as one chunk).
    prompt_chunk: bool = False


@dataclass(frozen=True)
class HiftConfig:
    in_channels: int
    base_channels: int
    nb_harmonics: int
    sampling_rate: int
    nsf_alpha: float
    nsf_sigma: float
    nsf_voiced_threshold: float
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    n_fft: int
    hop_len: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    source_resblock_kernel_sizes: tuple[int, ...]
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    lrelu_slope: float
    audio_limit: float
    f0_cond_channels: int
    # 2: CosyVoice 2's SineGen2 (phase per frame, interpolated linearly to samples);
    # 1: CosyVoice 1's SineGen (f0 repeated to samples, phase summed per sample).
    sine_gen: int = 2

    @property
    def samples_per_frame(self) -> int:
        total = self.hop_len
        for rate in self.upsample_rates:
            total *= rate
        return total


def hift_24k(base_channels: int, f0_channels: int, sine_gen: int) -> HiftConfig:
    """HiFTGenerator()'s defaults for 24 kHz (CosyVoice 2's, and the S3Gen / token2wav vocoders
    built on it: Chatterbox, Step-Audio 2) at the given widths and sine generator."""
    return HiftConfig(
        in_channels=80,
        base_channels=base_channels,
        nb_harmonics=8,
        sampling_rate=24000,
        nsf_alpha=0.1,
        nsf_sigma=0.003,
        nsf_voiced_threshold=10,
        upsample_rates=(8, 5, 3),
        upsample_kernel_sizes=(16, 11, 7),
        n_fft=16,
        hop_len=4,
        resblock_kernel_sizes=(3, 7, 11),
        resblock_dilation_sizes=((1, 3, 5),) * 3,
        source_resblock_kernel_sizes=(7, 7, 11),
        source_resblock_dilation_sizes=((1, 3, 5),) * 3,
        lrelu_slope=0.1,
        audio_limit=0.99,
        f0_cond_channels=f0_channels,
        sine_gen=sine_gen,
    )


@dataclass(frozen=True)
class CosyVoice2Config:
    sample_rate: int
    token_frame_rate: int
    chunk_size: int  # tokens per streaming chunk (the flow's attention chunk)
    llm: LlmConfig
    flow: FlowConfig
    hift: HiftConfig


def _field(section: dict, key: str, where: str, file: str = CONFIG_FILE) -> Any:
    try:
        return section[key]
    except (KeyError, TypeError):
        raise CheckpointError(f"{file} lacks {where}.{key}") from None


def parse_config(raw: dict) -> CosyVoice2Config:
    llm, flow, hift = (_field(raw, k, "top level") for k in ("llm", "flow", "hift"))
    sampling = _field(llm, "sampling", "llm")
    enc = _field(flow, "encoder", "flow")
    cfm = _field(flow, "decoder", "flow")
    est = _field(cfm, "estimator", "flow.decoder")
    cfm_params = _field(cfm, "cfm_params", "flow.decoder")
    cfm_params = cfm_params.get("content", cfm_params)  # omegaconf.DictConfig's payload
    g = lambda section, key, where: _field(section, key, where)  # noqa: E731
    return CosyVoice2Config(
        sample_rate=int(raw.get("sample_rate", 24000)),
        token_frame_rate=int(raw.get("token_frame_rate", 25)),
        chunk_size=int(raw.get("chunk_size", 25)),
        llm=LlmConfig(
            speech_token_size=int(g(llm, "speech_token_size", "llm")),
            llm_input_size=int(g(llm, "llm_input_size", "llm")),
            llm_output_size=int(g(llm, "llm_output_size", "llm")),
            top_p=float(sampling.get("top_p", 0.8)),
            top_k=int(sampling.get("top_k", 25)),
            win_size=int(sampling.get("win_size", 10)),
            tau_r=float(sampling.get("tau_r", 0.1)),
        ),
        flow=FlowConfig(
            input_size=int(g(flow, "input_size", "flow")),
            output_size=int(g(flow, "output_size", "flow")),
            spk_embed_dim=int(g(flow, "spk_embed_dim", "flow")),
            vocab_size=int(g(flow, "vocab_size", "flow")),
            token_mel_ratio=int(flow.get("token_mel_ratio", 2)),
            pre_lookahead_len=int(flow.get("pre_lookahead_len", 3)),
            encoder=EncoderConfig(
                output_size=int(g(enc, "output_size", "flow.encoder")),
                attention_heads=int(g(enc, "attention_heads", "flow.encoder")),
                linear_units=int(g(enc, "linear_units", "flow.encoder")),
                num_blocks=int(g(enc, "num_blocks", "flow.encoder")),
                static_chunk_size=int(enc.get("static_chunk_size", 25)),
            ),
            estimator=EstimatorConfig(
                in_channels=int(g(est, "in_channels", "flow.decoder.estimator")),
                out_channels=int(g(est, "out_channels", "flow.decoder.estimator")),
                channels=tuple(int(c) for c in g(est, "channels", "flow.decoder.estimator")),
                attention_head_dim=int(g(est, "attention_head_dim", "flow.decoder.estimator")),
                n_blocks=int(g(est, "n_blocks", "flow.decoder.estimator")),
                num_mid_blocks=int(g(est, "num_mid_blocks", "flow.decoder.estimator")),
                num_heads=int(g(est, "num_heads", "flow.decoder.estimator")),
                static_chunk_size=int(est.get("static_chunk_size", 50)),
            ),
            inference_cfg_rate=float(cfm_params.get("inference_cfg_rate", 0.7)),
            t_scheduler=str(cfm_params.get("t_scheduler", "cosine")),
        ),
        hift=parse_hift(hift),
    )


def load_config(folder: Path) -> CosyVoice2Config:
    return parse_config(read_yaml(folder / CONFIG_FILE))


def parse_hift(hift: dict, file: str = CONFIG_FILE, sine_gen: int = 2) -> HiftConfig:
    """The `hift:` section (HiFTGenerator's arguments) of a CosyVoice-family YAML `file`."""
    g = lambda section, key, where: _field(section, key, where, file)  # noqa: E731
    f0 = g(hift, "f0_predictor", "hift")
    istft = g(hift, "istft_params", "hift")
    return HiftConfig(
        in_channels=int(g(hift, "in_channels", "hift")),
        base_channels=int(g(hift, "base_channels", "hift")),
        nb_harmonics=int(g(hift, "nb_harmonics", "hift")),
        sampling_rate=int(g(hift, "sampling_rate", "hift")),
        nsf_alpha=float(hift.get("nsf_alpha", 0.1)),
        nsf_sigma=float(hift.get("nsf_sigma", 0.003)),
        nsf_voiced_threshold=float(hift.get("nsf_voiced_threshold", 10)),
        upsample_rates=tuple(g(hift, "upsample_rates", "hift")),
        upsample_kernel_sizes=tuple(g(hift, "upsample_kernel_sizes", "hift")),
        n_fft=int(g(istft, "n_fft", "hift.istft_params")),
        hop_len=int(g(istft, "hop_len", "hift.istft_params")),
        resblock_kernel_sizes=tuple(g(hift, "resblock_kernel_sizes", "hift")),
        resblock_dilation_sizes=tuple(tuple(d) for d in g(hift, "resblock_dilation_sizes", "hift")),
        source_resblock_kernel_sizes=tuple(g(hift, "source_resblock_kernel_sizes", "hift")),
        source_resblock_dilation_sizes=tuple(
            tuple(d) for d in g(hift, "source_resblock_dilation_sizes", "hift")
        ),
        lrelu_slope=float(hift.get("lrelu_slope", 0.1)),
        audio_limit=float(hift.get("audio_limit", 0.99)),
        f0_cond_channels=int(f0.get("cond_channels", 512)),
        sine_gen=sine_gen,
    )
