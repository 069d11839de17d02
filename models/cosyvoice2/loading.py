"""Build a CosyVoice2Model from FunAudioLLM/CosyVoice2-0.5B's layout:

cosyvoice2.yaml             HyperPyYAML config (config.py reads it as data)
llm.pt                      Qwen2LM state dict (llm.model.model.* = Qwen2, + speech head)
flow.pt                     CausalMaskedDiffWithXvec state dict
hift.pt                     HiFTGenerator state dict
CosyVoice-BlankEN/          Qwen2 config.json and tokenizer files
speech_tokenizer_v2.onnx    prompt audio → speech tokens   (voice prompts only)
campplus.onnx               prompt audio → x-vector        (voice prompts only)
spk2info.pt                 optional preset speakers
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError, check_state_dict, one_line
from models.codecs.flow_hift.checkpoint import hift_state, load_pt
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from models.cosyvoice2.config import CONFIG_FILE, CosyVoice2Config, load_config
from models.cosyvoice2.configs import QWEN_FOLDER
from models.cosyvoice2.llm import SpeechLM
from models.cosyvoice2.model import CosyVoice2Model
from models.cosyvoice2.voices import (
    SPEAKER_ENCODER,
    SPEECH_TOKENIZER,
    PromptEncoder,
    VoiceBank,
    read_spk2info,
)
from models.layers.llama import LlamaArgs
from models.random_weights import randomise

# Generated tokens in the first audio chunk (CosyVoice's own streaming: a whole 25-token flow
# chunk). 20 tokens plus the 3 of look-ahead: 5 decode steps sooner, and still 0.64 s of audio
# (HiFT holds 4 tokens back) to play while the next chunk is made. docs/models.md says why.
DEFAULT_FIRST_HOP = 20

REQUIRED = (CONFIG_FILE, "llm.pt", "flow.pt", "hift.pt", f"{QWEN_FOLDER}/config.json")
# CosyVoice2Tokenizer's additions to Qwen2's vocabulary, in its order (their ids follow it).
SPECIAL_TOKENS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endofprompt|>",
    "[breath]",
    "<strong>",
    "</strong>",
    "[noise]",
    "[laughter]",
    "[cough]",
    "[clucking]",
    "[accent]",
    "[quick_breath]",
    "<laughter>",
    "</laughter>",
    "[hissing]",
    "[sigh]",
    "[vocalized-noise]",
    "[lipsmack]",
    "[mn]",
]


def is_cosyvoice2_folder(folder: Path) -> bool:
    return (folder / CONFIG_FILE).exists()


def resolve_folder(source: str) -> Path:
    path = Path(source).expanduser()
    if not path.is_dir():
        if source.count("/") != 1 or source.startswith((".", "/", "~")):
            raise CheckpointError(f"no CosyVoice 2 checkpoint folder at {source!r}")
        path = _download(source)
    missing = [name for name in REQUIRED if not (path / name).exists()]
    if missing:
        raise CheckpointError(f"CosyVoice 2 checkpoint folder {path} lacks {', '.join(missing)}")
    return path


def _download(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(
                repo_id, allow_patterns=["*.yaml", "*.pt", "*.onnx", f"{QWEN_FOLDER}/*"]
            )
        )
    except Exception as exc:  # offline, gated or missing repo: say which and how to fix it
        raise CheckpointError(
            f"could not fetch {repo_id!r} from the Hugging Face Hub "
            f"({type(exc).__name__}: {one_line(str(exc))}). "
            "Download it elsewhere and pass the local folder instead."
        ) from exc


def qwen_args(folder: Path) -> LlamaArgs:
    cfg = json.loads((folder / QWEN_FOLDER / "config.json").read_text())
    # The text head is never used, so the backbone is built as if tied (no lm_head).
    return dataclasses.replace(LlamaArgs.from_hf_config(cfg), tie_word_embeddings=True)


def load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder / QWEN_FOLDER))
    except Exception as exc:
        raise CheckpointError(
            f"could not load the Qwen2 tokenizer in {folder / QWEN_FOLDER}: {exc}"
        ) from exc
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    return tokenizer


def build_parts(cfg: CosyVoice2Config, args: LlamaArgs):
    return SpeechLM(args, cfg.llm.speech_token_size), CausalFlow(cfg.flow), HiFTGenerator(cfg.hift)


def load_cosyvoice2(
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    name: str | None = None,
    random_weights: bool = False,
    seed: int = 0,
    first_hop: int | None = None,
    flow_dtype: torch.dtype | None = None,
) -> CosyVoice2Model:
    """`random_weights`: the folder's config and tokenizer, seeded random weights (benchmarks).
    `first_hop`: tokens in the first audio chunk (None: DEFAULT_FIRST_HOP; docs/models.md).
    `flow_dtype`: the flow's (None: `dtype`, the LLM's); HiFT is float32."""
    folder = resolve_folder(source) if not random_weights else Path(source)
    cfg = load_config(folder)
    torch.manual_seed(seed)
    llm, flow, hift = build_parts(cfg, qwen_args(folder))
    if random_weights:
        randomise(llm)
    else:
        llm.load_llm_pt(load_pt(folder / "llm.pt"))
        load_flow_hift_weights(folder, flow, hift)
    llm = llm.to(device=device, dtype=dtype).eval()
    flow, hift, voices = ready_flow_hift(
        folder,
        cfg.chunk_size,
        cfg.flow.spk_embed_dim,
        flow,
        hift,
        device,
        dtype if flow_dtype is None else flow_dtype,
    )
    if first_hop is None:
        first_hop = min(DEFAULT_FIRST_HOP, cfg.chunk_size)
    detok = FlowHiftDetokenizer(flow, hift, cfg.chunk_size, first_hop=first_hop)
    return CosyVoice2Model(cfg, llm, load_tokenizer(folder), detok, voices, name or folder.name)


def load_flow_hift_weights(folder: Path, flow: CausalFlow, hift: HiFTGenerator) -> None:
    """flow.pt and hift.pt of a CosyVoice 2-layout folder into `flow` and `hift`, each checked
    tensor by tensor against the model's (a wrong file names what differs)."""
    flow_sd = load_pt(folder / "flow.pt")
    check_state_dict(flow.state_dict(), flow_sd, "flow.pt's tensors")
    flow.load_state_dict(flow_sd)
    hift_sd = hift_state(load_pt(folder / "hift.pt"))
    check_state_dict(hift.state_dict(), hift_sd, "hift.pt's tensors")
    hift.load_state_dict(hift_sd)


def ready_flow_hift(
    folder: Path,
    chunk: int,
    speaker_dim: int,
    flow: CausalFlow,
    hift: HiFTGenerator,
    device: torch.device,
    dtype: torch.dtype,
    tokenizer: str = SPEECH_TOKENIZER,
) -> tuple[CausalFlow, HiFTGenerator, VoiceBank]:
    """The loaded flow and HiFT on `device` for serving (HiFT's weight norm folded, HiFT kept
    in float32: the iSTFT and the sine phase want it), and the folder's voices: its
    spk2info.pt speakers, and clips once it has the speech `tokenizer` (its ONNX file name)
    and speaker encoder. `chunk`: the flow's streaming chunk in tokens."""
    hift.fold_weight_norm()
    flow = flow.to(device=device, dtype=dtype).eval()
    hift = hift.to(device=device).eval()
    encoder = None
    if (folder / tokenizer).exists() and (folder / SPEAKER_ENCODER).exists():
        encoder = PromptEncoder(folder, tokenizer)
    voices = VoiceBank(
        read_spk2info(folder / "spk2info.pt", speaker_dim), chunk, speaker_dim, encoder
    )
    return flow, hift, voices
