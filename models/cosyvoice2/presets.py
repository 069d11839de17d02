"""The `tiny-cosyvoice2` preset: FunAudioLLM/CosyVoice2-0.5B's layout (YAML, llm.pt, flow.pt,
hift.pt, CosyVoice-BlankEN/, the two ONNX models, spk2info.pt) scaled down with seeded random
weights, written once to a cache folder so it loads through the real loader."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from models.cosyvoice2 import configs
from models.cosyvoice2.config import CONFIG_FILE, parse_config, read_yaml
from models.cosyvoice2.stand_ins import write_byte_tokenizer, write_campplus, write_speech_tokenizer
from models.preset_cache import materialise

TINY_VERSION = "v2"  # bump when the tiny config or its weight recipe changes
TINY_SPEAKERS = ("narrator", "guide")


def write_cosyvoice2_checkpoint(folder: Path, sizes: dict, qwen: dict, seed: int) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from models.codecs.flow_hift.audible_weights import make_audible
    from models.codecs.flow_hift.flow import CausalFlow
    from models.codecs.flow_hift.hift import HiFTGenerator

    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(configs.cosyvoice2_yaml(sizes))
    cfg = parse_config(read_yaml(folder / CONFIG_FILE))
    qwen_dir = folder / configs.QWEN_FOLDER
    qwen_dir.mkdir()
    (qwen_dir / "config.json").write_text(json.dumps(qwen, indent=2))
    write_byte_tokenizer(qwen_dir)

    torch.manual_seed(seed)
    backbone = Qwen2ForCausalLM(Qwen2Config.from_dict(qwen))
    hidden, rows = qwen["hidden_size"], cfg.llm.speech_token_size + 3
    llm = {f"llm.model.{k}": v for k, v in backbone.state_dict().items()}
    llm["llm_embedding.weight"] = torch.randn(2, hidden) * 0.5
    llm["speech_embedding.weight"] = torch.randn(rows, hidden) * 0.5
    llm["llm_decoder.weight"] = torch.randn(rows, hidden) * 0.1
    llm["llm_decoder.bias"] = torch.zeros(rows)
    torch.save(llm, folder / "llm.pt")

    flow = CausalFlow(cfg.flow)
    with torch.no_grad():  # pos_bias_* start at zero; random values exercise the attention path
        for name, p in flow.named_parameters():
            if "pos_bias" in name:
                p.normal_(0.0, 0.1)
    torch.save(flow.state_dict(), folder / "flow.pt")
    torch.save(make_audible(HiFTGenerator(cfg.hift)).state_dict(), folder / "hift.pt")

    write_speech_tokenizer(folder / "speech_tokenizer_v2.onnx", cfg.llm.speech_token_size, seed)
    write_campplus(folder / "campplus.onnx", cfg.flow.spk_embed_dim, seed)
    speakers = {
        name: {"embedding": torch.randn(1, cfg.flow.spk_embed_dim)} for name in TINY_SPEAKERS
    }
    torch.save(speakers, folder / "spk2info.pt")


def ensure_tiny_cosyvoice2(root: Path | None = None) -> Path:
    """The tiny preset's folder, created on first use in a temporary folder renamed into
    place, so concurrent first uses never see half a checkpoint."""

    def write(folder: Path) -> None:
        write_cosyvoice2_checkpoint(
            folder / "model", configs.TINY_SIZES, configs.TINY_QWEN2, seed=2025
        )

    return materialise(f"tiny-cosyvoice2-{TINY_VERSION}", write, root) / "model"


def ensure_real_config(root: Path | None = None) -> Path:
    """CosyVoice2-0.5B's configuration without its weights (for `--random-weights`): the real
    YAML and Qwen2-0.5B config.json, with the tiny byte tokenizer standing in for Qwen2's (text
    ids mean nothing to random weights)."""

    def write(staging: Path) -> None:
        folder = staging / "model"
        (folder / configs.QWEN_FOLDER).mkdir(parents=True)
        (folder / CONFIG_FILE).write_text(configs.cosyvoice2_yaml(configs.REAL_SIZES))
        (folder / configs.QWEN_FOLDER / "config.json").write_text(
            json.dumps(configs.QWEN2_0_5B, indent=2)
        )
        write_byte_tokenizer(folder / configs.QWEN_FOLDER)

    return materialise(f"cosyvoice2-0.5b-config-{TINY_VERSION}", write, root) / "model"
