"""Stage 3: train the voxgate-tiny SpeechLM on the codec-token corpus and export the published
checkpoint (codec included) as safetensors shards under 15 MiB.

    python -m training.speechlm --tokens TOKENS --codec CODEC --out CKPT [--seconds 390]

A training sequence is exactly what the engine will see: `<bos>`, characters, `<audio>` (text
rows), then one row per codec frame. Position p is scored on row p+1: codebook 0 (or the
end-of-audio id after the last frame) from the backbone's head, codebooks 1..K-1 from the depth
stage, teacher-forced with the true codes of that frame. Text rows are not scored. The data
side (shards → utterances → batches and targets) is training/speechlm_data.py.

`--reading` (needs `align-NN.npz` beside each `tokens-NN.npz`: `python -m training.aligner
align`) trains the reading pointer of models/voxgate_tiny/lm.py: each frame row carries the
aligned character at its last frame and the next one as input, and the depth stage learns how
far the pointer moved in the row.

`--phones --lexicon FILE` (needs `phones-NN.npz` beside each `tokens-NN.npz`: `codec encode` or
`training.phones_backfill`) reads PHONES instead of characters (models/voxgate_tiny/
phone_text.py: the lexicon's phones of each word, word boundaries, punctuation), with the
reading pointer from the teacher's own phone times (training/phone_reading.py), and exports a
"voxgate-phones" tokenizer (config.json `text_input`: "phones").

Batches hold sequences of similar length (length-sorted buckets, shuffled), padded on the right
(causal attention never looks at the padding). bf16 autocast on GPUs, AdamW, linear warm-up and
cosine decay over a wall-clock budget (training/common.py), so the run ends on time on any GPU.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from models.codecs.voxcodec_stream import load_voxcodec
from models.loader import read_config
from models.voxgate_tiny.checkpoint import build_lm, load_checkpoint, save_checkpoint
from models.voxgate_tiny.config import VoxgateTinyConfig, tiny_config_dict
from models.voxgate_tiny.g2p import read_lexicon
from models.voxgate_tiny.lm import DenseCausalAttention, VoxgateTinyLM
from models.voxgate_tiny.phone_text import PhoneTokenizer
from models.voxgate_tiny.text import CharTokenizer
from training.common import TimeBudget, autocast, descend, log_line, pick_device
from training.guided_attention import GuidedAttention
from training.speechlm_data import (
    IGNORE,
    ShardFeed,
    Utterance,
    batches,
    load_tokens,
    make_batch,
    model_rows_per_s,
    prefetched_batches,
)

SIZES = {
    "default": {},
    # 1.4x the default's backbone (hidden 384, MLP 896): for runs with more data than run 7's
    # 30 h, which the default size overfit; its CPU cost is measured before it ships.
    "wide": {"hidden": 384, "heads": 6, "intermediate": 896},
    "deep": {"hidden": 384, "heads": 6, "intermediate": 896, "layers": 10},  # wide + 2 layers
    "toy": {
        "hidden": 64,
        "layers": 2,
        "heads": 2,
        "kv_heads": 1,
        "intermediate": 128,
        "depth_intermediate": 64,
    },
}


@dataclass(frozen=True)
class Regularisers:
    """Training-only input corruption; the served model is unchanged.

    A deterministic teacher makes every utterance exactly learnable, so a 17M model memorises a
    10-hour corpus within a few dozen epochs and then predicts held-out speech no better than
    chance (measured: train loss → 0, held-out codebook-0 loss 6.2 of ln 1000 = 6.9). Replacing
    a share of the *input* codes by random ones (`code_noise`) makes the previous frames an
    unreliable cue, so the model has to read the text; `embed_dropout` is plain dropout on the
    summed row embeddings."""

    code_noise: float = 0.0
    embed_dropout: float = 0.0
    guided_weight: float = 0.0  # training/guided_attention.py; 0 turns it off
    guided_layers: frozenset[int] = frozenset()
    guided_heads: int = 0
    # "pointer": a reading model's frames are guided to the symbol they say; "diagonal": to
    # n/N of the text (the only choice without a pointer).
    guided_target: str = "pointer"


def corrupt_codes(rows: torch.Tensor, k: int, vocab: int, share: float) -> torch.Tensor:
    """rows [B, L, W] with `share` of the present code entries replaced by random codes."""
    if share <= 0:
        return rows
    codes = rows[..., :k]
    hit = (codes >= 0) & (torch.rand(codes.shape, device=rows.device) < share)
    noisy = torch.where(hit, torch.randint_like(codes, vocab), codes)
    return torch.cat([noisy, rows[..., k:]], dim=-1)


def losses(
    lm: VoxgateTinyLM, batch: dict[str, torch.Tensor], reg: Regularisers = Regularisers()
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training loss and its parts per codebook (detached 0-dim tensors: reading them on
    the host waits for the device, so the loop does that only when it logs)."""
    rows = batch["rows"]
    b, length, width = rows.shape
    k = lm.num_codebooks
    guided = lm.training and reg.guided_weight > 0 and reg.guided_heads > 0
    framed_rows = rows[..., 0] >= 0
    if guided:
        attn: DenseCausalAttention = GuidedAttention(
            b,
            length,
            ((rows[..., k] >= 0) & ~framed_rows).sum(1),  # frame rows may carry reading ids
            framed_rows.sum(1),
            reg.guided_layers,
            reg.guided_heads,
            pointer=(
                torch.where(framed_rows, rows[..., k + 2], -1)
                if reg.guided_target == "pointer" and width == k + 3
                else None
            ),
        )
    else:
        attn = DenseCausalAttention(b, length)
    if lm.training:
        rows = corrupt_codes(rows, lm.num_codebooks, lm.codebook_size, reg.code_noise)
    positions = torch.arange(length, device=rows.device).repeat(b)
    x = lm.embed(rows.view(b * length, width))
    if lm.training and reg.embed_dropout > 0:
        x = F.dropout(x, reg.embed_dropout)
    hidden = lm.forward_embedded(x, positions, attn)
    first = batch["first"].view(-1)
    scored = first != IGNORE
    loss0 = F.cross_entropy(lm.first_logits(hidden[scored]), first[scored])
    codes = batch["codes"].view(b * length, -1)
    framed = codes[:, 0] != IGNORE
    depth_logits, read_logits = lm.depth.teacher_forced_logits(hidden[framed], codes[framed])
    depth = F.cross_entropy(
        depth_logits.float().transpose(1, 2), codes[framed][:, 1:], reduction="none"
    ).mean(0)
    total = (loss0 + depth.sum()) / lm.num_codebooks
    parts = {"cb0": loss0.detach(), **{f"cb{j + 1}": v.detach() for j, v in enumerate(depth)}}
    if read_logits is not None:  # weighted as one more codebook
        read = F.cross_entropy(read_logits.float(), batch["read"].view(-1)[framed])
        total = total + read / lm.num_codebooks
        parts["read"] = read.detach()
    if guided and attn.terms:  # type: ignore[attr-defined]
        penalty = attn.penalty  # type: ignore[attr-defined]
        total = total + reg.guided_weight * penalty
        parts["guide"] = penalty.detach()
    return total, parts


@torch.no_grad()
def validate(
    lm: VoxgateTinyLM, utts: list[Utterance], device: torch.device, tokens: int
) -> dict[str, float]:
    lm.eval()
    sums: dict[str, float] = {}
    groups = batches(utts, tokens, random.Random(0))
    for group in groups:
        made = make_batch(group, lm.num_codebooks, lm.eos, lm.text_vocab)
        batch = {k: v.to(device) for k, v in made.items()}
        with autocast(device):
            _, parts = losses(lm, batch)
        for key, value in parts.items():
            sums[key] = sums.get(key, 0.0) + float(value) / len(groups)
    lm.train()
    return sums


def _shown(parts: dict[str, float] | dict[str, torch.Tensor]) -> str:
    return " ".join(f"{k} {float(v):.3f}" for k, v in parts.items())


class BestWeights:
    """The weights with the lowest held-out loss seen so far (summed over codebooks), kept on
    the CPU: what is exported is the best point of the run, not its (overfit) end."""

    def __init__(self) -> None:
        self.loss = float("inf")
        self.step = 0
        self.parts: dict[str, float] = {}
        self.state: dict[str, torch.Tensor] | None = None
        self.misses = 0

    def offer(self, lm: nn.Module, parts: dict[str, float], step: int) -> bool:
        loss = sum(parts.values())
        if loss >= self.loss:
            self.misses += 1
            return False
        self.loss, self.step, self.parts, self.misses = loss, step, parts, 0
        self.state = {k: v.detach().to("cpu", copy=True) for k, v in lm.state_dict().items()}
        return True

    def stale(self, patience: int) -> bool:
        return patience > 0 and self.misses >= patience

    def restore(self, lm: nn.Module) -> None:
        if self.state is not None:
            lm.load_state_dict(self.state)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--tokens", required=True, help="folder of tokens-NN.npz (training.codec encode)"
    )
    p.add_argument("--codec", required=True, help="codec folder (training.codec train)")
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    p.add_argument("--size", choices=sorted(SIZES), default="default")
    p.add_argument(
        "--init", help="start from this checkpoint folder (fine-tuning) instead of random weights"
    )
    p.add_argument("--seconds", type=float, default=390.0, help="wall-clock training budget")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--batch-tokens", type=int, default=40_000)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--sanity", type=int, default=0, help="speak this many held-out sentences at the end"
    )
    p.add_argument("--code-noise", type=float, default=0.15, help="share of input codes randomised")
    p.add_argument("--embed-dropout", type=float, default=0.1)
    p.add_argument(
        "--reading",
        action="store_true",
        help="train the reading pointer from align-NN.npz (training/aligner.py); with --init "
        "of a model without one, it is added (with_reading)",
    )
    p.add_argument(
        "--phones",
        action="store_true",
        help="read phones, not characters (phones-NN.npz beside the tokens; needs --lexicon); "
        "implies the reading pointer",
    )
    p.add_argument("--lexicon", help="word TAB phones file (.gz ok) for --phones")
    p.add_argument(
        "--loader-workers",
        type=int,
        default=-1,
        help="processes making batches ahead of the step (default: 2 on a GPU, 0 on a CPU)",
    )
    p.add_argument(
        "--grow",
        help="folder whose finished token folders (training/grow_data.sh) join the training "
        "set at each epoch's start while the run goes on; the held-out set stays --tokens'",
    )
    p.add_argument(
        "--guided-weight",
        type=float,
        default=1.0,
        help="weight of the diagonal-attention penalty (training/guided_attention.py; 0: off)",
    )
    p.add_argument(
        "--guided-layers", default="2,3,4,5", help="comma-separated layers whose heads are guided"
    )
    p.add_argument("--guided-heads", type=int, default=2, help="guided heads per guided layer")
    p.add_argument(
        "--guided-target",
        choices=("pointer", "diagonal"),
        default="pointer",
        help="where guided heads should look: a reading model's frames at the symbol they say "
        "(pointer), or n/N of the text (diagonal; run 8 and before)",
    )
    p.add_argument(
        "--pointer-positions",
        type=int,
        default=768,
        help="new reading models: embed the pointer's symbol index from a table this long "
        "(models/voxgate_tiny/lm.py; 0: off, as run 8 and before)",
    )
    p.add_argument(
        "--val-every", type=int, default=250, help="steps between held-out checks (0: end only)"
    )
    p.add_argument(
        "--patience",
        type=int,
        default=6,
        help="stop after this many held-out checks without a new best",
    )
    args = p.parse_args(argv)
    reg = Regularisers(
        args.code_noise,
        args.embed_dropout,
        args.guided_weight,
        frozenset(int(x) for x in args.guided_layers.split(",") if x.strip()),
        args.guided_heads,
        args.guided_target,
    )

    if args.phones and not args.lexicon:
        p.error("--phones needs --lexicon FILE (models/voxgate_tiny/lexicon.tsv.gz)")
    lexicon = read_lexicon(Path(args.lexicon)) if args.phones else None

    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}_train_log.txt"
    tokenizer: CharTokenizer | PhoneTokenizer = PhoneTokenizer() if args.phones else CharTokenizer()
    codec = load_voxcodec(args.codec)
    if args.init:  # fine-tune: the checkpoint's own config and weights (its codec must match)
        config = read_config(Path(args.init))
        if (config.get("text_input", "chars") == "phones") != args.phones:
            p.error(f"--init {args.init} reads {config.get('text_input', 'chars')}: match --phones")
        _, lm, _, tokenizer = load_checkpoint(Path(args.init), device, torch.float32)
        if args.reading and not lm.reading:  # add the pointer to a model trained without it
            config = {**config, "reading": True}
            lm = with_reading(lm, build_lm(VoxgateTinyConfig.from_dict(config)).to(device))
        lm.train()
    else:
        config = tiny_config_dict(
            codec.config,
            tokenizer.vocab_size,
            reading=args.reading or args.phones,
            text_input="phones" if args.phones else "chars",
            pointer_positions=args.pointer_positions if args.reading or args.phones else 0,
            **SIZES[args.size],
        )
        lm = build_lm(VoxgateTinyConfig.from_dict(config)).to(device).train()
        with torch.no_grad():
            for name, param in lm.named_parameters():
                if "norm" not in name:
                    torch.nn.init.normal_(param, 0.0, 0.02)
    reading = bool(config.get("reading", False))
    longest = config["max_position_embeddings"]

    def read_folder(folder: Path) -> list[Utterance]:
        utts = load_tokens(folder, tokenizer, config["frames_per_row"], reading, lexicon, log)
        return [u for u in utts if len(u) + 1 <= longest]

    utts = read_folder(Path(args.tokens))
    rng.shuffle(utts)
    n_val = max(1, len(utts) // 100)
    val, train = utts[:n_val], utts[n_val:]
    frames = sum(len(u.codes) for u in train)
    n_params = sum(p.numel() for p in lm.parameters())
    log_line(
        log,
        f"speechlm: {len(train)} utterances ({frames / model_rows_per_s(config) / 3600:.2f} h), {n_params / 1e6:.1f}M params, device {device}",
    )
    decay = [p for n, p in lm.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in lm.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        fused=device.type == "cuda",
    )
    budget = TimeBudget(args.seconds, args.lr, args.warmup, args.max_steps)
    best = BestWeights()
    epoch = 0
    feed = ShardFeed(Path(args.grow), read_folder) if args.grow else None
    loader_workers = (
        args.loader_workers if args.loader_workers >= 0 else (2 if device.type == "cuda" else 0)
    )
    while not budget.done() and not best.stale(args.patience):
        epoch += 1
        for folder, fresh in feed.take() if feed else []:
            train += fresh
            frames += sum(len(u.codes) for u in fresh)
            log_line(
                log,
                f"grow: +{len(fresh)} utterances from {folder.name} at step {budget.step}; "
                f"training set {frames / model_rows_per_s(config) / 3600:.2f} h",
            )
        groups = batches(train, args.batch_tokens, rng)
        made = prefetched_batches(
            groups, lm.num_codebooks, lm.eos, lm.text_vocab, loader_workers, device.type == "cuda"
        )
        for cpu_batch in made:
            batch = {k: v.to(device, non_blocking=True) for k, v in cpu_batch.items()}
            lr = budget.apply(opt)
            with autocast(device):
                loss, parts = losses(lm, batch, reg)
            descend(opt, loss, lm)
            if budget.step % args.log_every == 0:
                log_line(
                    log,
                    f"epoch {epoch} step {budget.step} t {budget.elapsed:.0f}s lr {lr:.2e} "
                    + _shown(parts),
                )
            if args.val_every and budget.step % args.val_every == 0:
                held = validate(lm, val, device, args.batch_tokens)
                better = best.offer(lm, held, budget.step)
                log_line(
                    log, f"held-out step {budget.step}: {_shown(held)}{' (best)' if better else ''}"
                )
                if best.stale(args.patience):
                    break
            if budget.done():
                break
    best.offer(lm, validate(lm, val, device, args.batch_tokens), budget.step)
    best.restore(lm)
    log_line(
        log,
        f"done: {budget.step} steps, {epoch} epochs, {budget.elapsed:.0f}s; kept step "
        f"{best.step}, held-out loss {_shown(best.parts)}",
    )
    written = save_checkpoint(out, config, lm.eval(), codec, tokenizer, torch.bfloat16)
    log_line(
        log, "wrote " + ", ".join(f"{f.name} ({f.stat().st_size / 2**20:.1f} MiB)" for f in written)
    )
    if args.sanity:
        try:
            sanity_check(out, device, args.sanity, log, lexicon)
        except Exception as exc:  # the checkpoint is written; a failed check must not lose it
            log_line(log, f"sanity check failed: {type(exc).__name__}: {exc}")


def with_reading(plain: VoxgateTinyLM, reader: VoxgateTinyLM) -> VoxgateTinyLM:
    """`reader` (a new model with the reading pointer) starting from `plain`'s weights: every
    tensor of the same shape, and the leading rows of the two tables the pointer extends (the
    prompt characters' embeddings, the depth stage's code embeddings); the pointer's own
    embeddings, the extra depth step and the advance head keep their fresh initialisation."""
    theirs = plain.state_dict()
    with torch.no_grad():
        for name, mine in reader.state_dict().items():
            old = theirs.get(name)
            if old is None:
                if "norm" not in name:
                    mine.normal_(0.0, 0.02)
            elif old.shape == mine.shape:
                mine.copy_(old)
            elif name in ("embed_text.weight", "depth.embed.weight"):
                mine.normal_(0.0, 0.02)
                mine[: len(old)] = old
            else:
                raise ValueError(f"{name}: {tuple(old.shape)} cannot start {tuple(mine.shape)}")
    return reader


def sanity_check(
    folder: Path,
    device: torch.device,
    count: int,
    log: Path | None,
    lexicon: dict[str, tuple[str, ...]] | None = None,
) -> None:
    """Reload the written checkpoint through the real loader and speak `count` held-out
    sentences through the engine: does each stop, after about as many frames as the text
    needs (~14 characters a second)? A phone checkpoint says its words with `lexicon` (the
    training one; the serving G2P may not be installed here), skipping sentences it lacks."""
    from engine.config import EngineConfig
    from engine.core import EngineCore
    from engine.outputs import Finished, SpeechRequest
    from engine.request import SamplingParams
    from models.voxgate_tiny.loading import load_voxgate_tiny
    from models.voxgate_tiny.text import normalize
    from training.sentences import heldout_sentences

    model = load_voxgate_tiny(folder, device, torch.float32)
    texts = heldout_sentences(count)
    if lexicon is not None and isinstance(model.tokenizer, PhoneTokenizer):
        model.tokenizer = PhoneTokenizer(model.tokenizer.symbols, word_phones=lexicon.__getitem__)
        texts = heldout_sentences(4 * count)
        sayable = []
        for text in texts:
            try:
                model.tokenizer.encode(normalize(text))
                sayable.append(text)
            except KeyError:
                continue
        texts = sayable[:count]
        log_line(log, f"sanity: {len(texts)} held-out sentences sayable with the lexicon")
    config = EngineConfig(cuda_graphs=False, async_detok=False, kv_memory_fraction=0.05)
    core = EngineCore(model, config, device, "sdpa")
    params = SamplingParams(**{**model.facts.sampling_defaults, "seed": 0, "max_tokens": 1000})
    ids = {core.add_request(SpeechRequest(t, None, params)).request_id: t for t in texts}
    while core.has_work():
        for event in core.step():
            if isinstance(event, Finished):
                text = ids[event.request_id]
                log_line(
                    log,
                    f"sanity: {event.reason.value} after {event.num_tokens} rows "
                    f"({event.num_tokens / model.facts.token_rate_hz:.1f} s; the text suggests ~{len(text) / 14:.1f} s): {text}",
                )


if __name__ == "__main__":
    main()
