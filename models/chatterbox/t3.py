"""T3 (`t3_cfg.safetensors`): a Llama backbone (`tfmr.*`, HF LlamaModel names) over a prefix
of conditioning rows, the text and the speech tokens, each kind with its own embedding and
learned absolute positions, and its own head over the speech tokens.

Sequence layout (T3.inference): [conditioning][start_text, text…, stop_text][start_speech at
speech position 0, twice][generated token i at speech position i + 1]. The Llama's rotary
positions run over all of it. Classifier-free guidance runs a second row identical but for
zeroed text token embeddings (their positions kept); the speech head's logits mix as
cond + w * (cond - uncond)."""

from __future__ import annotations

import torch
from torch import nn

from models.chatterbox.config import T3_FACTS, T3_FILE, T3Sizes, t3_sizes
from models.chatterbox.perceiver import CondEncoder
from models.checkpoint_errors import CheckpointError, check_state_dict
from models.layers.llama import LlamaForCausalLM

BACKBONE = "tfmr."


class LearnedPositions(nn.Module):
    def __init__(self, n: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(n, dim)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        if int(positions.max()) >= self.emb.num_embeddings:
            raise ValueError(
                f"position {int(positions.max())} past the {self.emb.num_embeddings} learned"
            )
        return self.emb(positions)


class T3(nn.Module):
    def __init__(self, sizes: T3Sizes) -> None:
        super().__init__()
        self.sizes = sizes
        h = sizes.hidden
        self.backbone = LlamaForCausalLM(sizes.llama_args())
        self.cond_enc = CondEncoder(
            T3_FACTS.speaker_embed_size, h, sizes.perceiver_queries, T3_FACTS.perceiver_heads
        )
        self.text_emb = nn.Embedding(sizes.text_vocab, h)
        self.speech_emb = nn.Embedding(sizes.speech_vocab, h)
        self.text_pos_emb = LearnedPositions(sizes.text_positions, h)
        self.speech_pos_emb = LearnedPositions(sizes.speech_positions, h)
        self.text_head = nn.Linear(h, sizes.text_vocab, bias=False)
        self.speech_head = nn.Linear(h, sizes.speech_vocab, bias=False)

    # --- embeddings ----------------------------------------------------------------------------
    def conditioning(
        self, speaker: torch.Tensor, prompt_tokens: torch.Tensor, exaggeration: float
    ) -> torch.Tensor:
        """speaker [S] voice-encoder embedding, prompt_tokens [P] reference speech tokens →
        the conditioning rows [C, H]."""
        positions = torch.arange(prompt_tokens.shape[0], device=prompt_tokens.device)
        prompt = self.speech_emb(prompt_tokens) + self.speech_pos_emb(positions)
        exag = torch.tensor([exaggeration], device=speaker.device)
        return self.cond_enc(speaker[None], prompt[None], exag)[0]

    def text_embeddings(self, text_ids: torch.Tensor, unconditional: bool) -> torch.Tensor:
        """text_ids [L] (start_text … stop_text) → [L, H]; the unconditional row keeps only
        the positions."""
        positions = torch.arange(text_ids.shape[0], device=text_ids.device)
        tokens = self.text_emb(text_ids)
        if unconditional:
            tokens = torch.zeros_like(tokens)
        return tokens + self.text_pos_emb(positions)

    def speech_embeddings(
        self, tokens: torch.Tensor, speech_positions: torch.Tensor
    ) -> torch.Tensor:
        return self.speech_emb(tokens) + self.speech_pos_emb(speech_positions)

    def prompt_embeddings(
        self, cond: torch.Tensor, text_ids: torch.Tensor, unconditional: bool
    ) -> torch.Tensor:
        """One CFG row's whole prompt [C + L + 2, H]: conditioning, text, start_speech twice."""
        start = torch.full((2,), T3_FACTS.start_speech, device=text_ids.device)
        speech = self.speech_embeddings(start, torch.zeros_like(start))
        return torch.cat([cond, self.text_embeddings(text_ids, unconditional), speech])

    # --- backbone and head ---------------------------------------------------------------------
    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """Embedded rows x [T, H] at rotary positions [T], through the paged-KV backbone."""
        return self.backbone.forward_embeddings(x, positions, attn)

    def speech_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.speech_head(hidden).float()


def load_t3(state: dict[str, torch.Tensor]) -> T3:
    """T3 from t3_cfg.safetensors' state dict (sizes read off its tensors); CheckpointError
    naming anything missing, unexpected or mis-shaped."""
    if "model" in state:
        raise CheckpointError(f"{T3_FILE} holds a training wrapper ('model'); save its state dict")
    model = T3(t3_sizes(state))
    model.backbone.load_hf_weights(
        ("model." + k.removeprefix(BACKBONE), t) for k, t in state.items() if k.startswith(BACKBONE)
    )
    rest = {k: t for k, t in state.items() if not k.startswith(BACKBONE)}
    expected = {k: t for k, t in model.state_dict().items() if not k.startswith("backbone.")}
    check_state_dict(expected, rest, f"{T3_FILE}'s tensors")
    model.load_state_dict(rest, strict=False)
    return model.eval()


def t3_state_dict(model: T3) -> dict[str, torch.Tensor]:
    """The published layout of a T3's weights (for presets made with random weights)."""
    state = {k: t for k, t in model.state_dict().items() if not k.startswith("backbone.")}
    for name, tensor in model.backbone.named_parameters():
        module, _, leaf = name.rpartition(".")
        stem, _, kind = module.rpartition(".")
        if kind == "qkv_proj":
            a = model.sizes.heads * T3_FACTS.head_dim
            b = model.sizes.kv_heads * T3_FACTS.head_dim
            for part, t in zip(
                ("q_proj", "k_proj", "v_proj"), tensor.split([a, b, b]), strict=True
            ):
                state[f"{BACKBONE}{stem}.{part}.{leaf}"] = t
        elif kind == "gate_up_proj":
            for part, t in zip(("gate_proj", "up_proj"), tensor.chunk(2), strict=True):
                state[f"{BACKBONE}{stem}.{part}.{leaf}"] = t
        else:
            state[BACKBONE + name] = tensor
    return {k: t.detach().contiguous() for k, t in state.items()}
