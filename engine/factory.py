"""From names and settings to a running engine: device, dtype and attention backend choice, and
the settings left unset made concrete from the model family's serving defaults
(models/families.py). Nothing here names a model."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from dataclasses import replace

import torch

from engine.client import AsyncEngine
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.duplex import DuplexEngine
from engine.flashinfer_backend import DTYPES as FLASHINFER_DTYPES
from engine.flashinfer_backend import HEAD_DIMS as FLASHINFER_HEAD_DIMS
from engine.gc_pauses import freeze_loaded
from engine.loop import EngineLoop
from engine.request import ConfigError
from models.base import SpeechModel
from models.families import known_family
from models.family_spec import ServingDefaults
from models.registry import DEFAULT_MODEL, load_model

log = logging.getLogger("voxgate.engine")

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(config: EngineConfig) -> torch.device:
    """`--device` as a torch device on this machine: the engine runs on the CPU or a CUDA GPU,
    so any other name (or a GPU index the machine lacks) is refused here, naming the flag,
    before a model loads."""
    if config.device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    asked = f"--device {config.device!r}"
    try:
        device = torch.device(config.device)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"{asked} is not a device Voxgate runs on: give cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{asked} asked for, but no CUDA GPU is visible: use --device cpu")
    if (
        device.type == "cuda"
        and device.index is not None
        and device.index >= torch.cuda.device_count()
    ):
        count = torch.cuda.device_count()
        raise ConfigError(
            f"{asked}: this machine has {count} CUDA GPUs, give cuda:0 to cuda:{count - 1}"
        )
    return device


def resolve_dtype(config: EngineConfig, device: torch.device) -> torch.dtype:
    if config.dtype is not None:
        return _DTYPES[config.dtype]
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def resolve_attention(
    config: EngineConfig,
    device: torch.device,
    head_dim: int = 128,
    dtype: torch.dtype = torch.bfloat16,
) -> str:
    """The attention backend's name: `--attention` where given (refused with the reason where
    FlashInfer cannot serve), else FlashInfer where it is installed, the device is an NVIDIA
    GPU and it has kernels for the model's head size and dtype, else sdpa."""
    has_flashinfer = importlib.util.find_spec("flashinfer") is not None
    if config.attention == "flashinfer":
        if head_dim not in FLASHINFER_HEAD_DIMS:
            raise ConfigError(
                f"attention 'flashinfer' has kernels for head sizes {FLASHINFER_HEAD_DIMS}, this "
                f"model's is {head_dim}: use --attention sdpa"
            )
        if dtype not in FLASHINFER_DTYPES:
            raise ConfigError(
                f"attention 'flashinfer' runs in bfloat16 or float16, not {str(dtype)[6:]}: "
                "serve with --dtype bfloat16, or --attention sdpa"
            )
        if device.type != "cuda" or not has_flashinfer:
            raise ConfigError(
                "attention 'flashinfer' needs an NVIDIA GPU and the gpu extra "
                "(pip install 'voxgate[gpu]'); use --attention sdpa"
            )
        return "flashinfer"
    if config.attention == "sdpa":
        return "sdpa"
    if head_dim not in FLASHINFER_HEAD_DIMS or dtype not in FLASHINFER_DTYPES:
        return "sdpa"  # FlashInfer has no kernels for this head size or dtype
    return "flashinfer" if device.type == "cuda" and has_flashinfer else "sdpa"


def build_core(model: SpeechModel, config: EngineConfig, device: torch.device) -> EngineLoop:
    """The engine loop for a loaded model: full-duplex models step all their sessions once per
    frame (DuplexEngine), the others batch requests continuously (EngineCore). `cpu_int8`
    None counts as off here: the model family's defaults are settled by `serving_defaults`."""
    if config.cpu_int8:
        apply_cpu_int8(model, device)
    loop = DuplexEngine if model.facts.full_duplex else EngineCore
    shape = model.shape
    return loop(
        model, config, device, resolve_attention(config, device, shape.head_dim, shape.dtype)
    )


def apply_cpu_int8(model: SpeechModel, device: torch.device) -> None:
    """`--cpu-int8`: the model's int8 CPU weights, or an error saying why not."""
    if device.type != "cpu":
        raise ConfigError(f"--cpu-int8 is for CPU serving; this engine runs on {device.type}")
    if not model.quantize_for_cpu():
        raise ConfigError(f"{model.facts.name} has no int8 CPU path; run without --cpu-int8")


def uses_engine_process(config: EngineConfig, model: str | None = None) -> bool:
    if config.engine_process is not None:
        return config.engine_process
    device = resolve_device(config).type
    if device == "cpu":
        return model is not None and _family_defaults(model).cpu_engine_process
    return device == "cuda"


def half_the_cores() -> int:
    """Cores this process may run on, halved (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


def _family_defaults(model: str) -> ServingDefaults:
    """The serving defaults of `model`'s family; a model not recognised without loading it (a
    Hub repo id not yet on disk) gets the plain ones."""
    family = known_family(model)
    return ServingDefaults() if family is None else family.serving


def serving_defaults(config: EngineConfig, model: str) -> EngineConfig:
    """`config` with the settings left to the engine (None) made concrete for `model`, from its
    family's serving defaults (models/family_spec.py, ServingDefaults). The CPU ones apply on
    the CPU only; elsewhere torch's and the device's defaults stand. Real-time admission is on
    for every model (EngineConfig.realtime_admission), so no family decides it."""
    on_cpu = resolve_device(config).type == "cpu"
    wants = _family_defaults(model) if on_cpu else ServingDefaults()
    return replace(
        config,
        engine_process=uses_engine_process(config, model),
        cpu_int8=config.cpu_int8 if config.cpu_int8 is not None else wants.cpu_int8,
        cpu_threads=config.cpu_threads or (half_the_cores() if wants.cpu_half_threads else None),
    )


def apply_gil_switch(config: EngineConfig) -> None:
    """The engine's thread switch interval for this process (EngineConfig.gil_switch_ms says
    why). Called in each process an engine loop runs in: the gateway's, or the engine's own
    (a spawned child starts with Python's 5 ms)."""
    sys.setswitchinterval(config.gil_switch_ms / 1000)


def apply_cpu_threads(config: EngineConfig, device: torch.device) -> None:
    """torch's intra-op threads for this process, when the engine on the CPU asks for a number."""
    if device.type == "cpu" and config.cpu_threads is not None:
        torch.set_num_threads(config.cpu_threads)


def load_engine_loop(
    model: str,
    codec: str | None,
    config: EngineConfig,
    progress: bool = False,
    random_weights: bool = False,
    voices_dir: str | None = None,
) -> tuple[SpeechModel, EngineLoop]:
    """Load the model and build its engine loop, warmed up, in this process: the caller's
    (build_engine) or the engine's own (engine/engine_host.py). The model family's own
    options (config.load_options) are checked by the family as it loads."""
    device = resolve_device(config)
    dtype = resolve_dtype(config, device)
    apply_cpu_threads(config, device)
    speech_model = load_model(
        model,
        codec,
        device,
        dtype,
        progress,
        random_weights,
        voices_dir,
        dict(config.load_options),
    )
    core = build_core(speech_model, config, device)
    core.warm_up()
    freeze_loaded()  # before serving: full collections would walk the whole model each time
    return speech_model, core


def build_engine(
    model: str = DEFAULT_MODEL,
    codec: str | None = None,
    config: EngineConfig | None = None,
    progress: bool = False,
    random_weights: bool = False,
    voices_dir: str | None = None,
) -> AsyncEngine:
    """Load the model and start the engine loop; returns the running AsyncEngine (or, with
    `config.engine_process`, a ProcessEngine with the same surface)."""
    config = serving_defaults(config or EngineConfig(), model)
    apply_gil_switch(config)  # this process's threads too, where the engine runs in a child
    if config.engine_process:
        from engine.process_engine import EngineSpec, ProcessEngine

        engine = ProcessEngine(EngineSpec(model, codec, config, random_weights, voices_dir))
        engine.start()
        freeze_loaded()  # the child freezes its own; this process holds the gateway's
        return engine
    _, core = load_engine_loop(model, codec, config, progress, random_weights, voices_dir)
    engine = AsyncEngine(core)
    engine.start()
    return engine
