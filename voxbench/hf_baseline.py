"""The per-request Hugging Face baseline of the benchmark method (docs/benchmarking.md), behind the engine surface the gateway
uses (`facts`, `ready`, `start`, `submit` → event stream, `cancel`, `report_playback`,
`stats`, `shutdown`), so `gateway.app.create_app(settings, engine=HFBaseline(...))` serves it
over the very same WebSocket protocol, pacing and Opus path as the system under test.

What a model card shows, one request at a time: transformers `LlamaForCausalLM.generate` with
a streamer, and Orpheus's reference decoding scheme (orpheus_tts/decoder.py) run on the
streamed tokens as they come: every 7 new audio tokens once at least 28 exist, SNAC decodes
the last 4 frames and samples 2048:4096 (the 2nd frame) are kept. Requests wait in a FIFO and
are served one at a time by a worker thread.

Equal work: the same prompt layout and tokenizer as the engine, the same sampling parameters
(min_tokens = max_tokens), and the same audio-token constraint (random weights would
otherwise sample text tokens that decode to nothing), applied as a `LogitsProcessor` over
the full-vocabulary logits that `generate` computes.
"""

from __future__ import annotations

import logging
import time

import torch
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from engine.api import AudioChunk, FinishReason, ModelFacts
from models.orpheus import tokens as T
from models.orpheus.model import VOICES, orpheus_prompt
from voxbench.orpheus_reference import (
    WINDOW_TOKENS,
    AudioTokenMask,
    ReferenceStreamer,
    snac_reference_decoder,
)
from voxbench.per_request import Job, PerRequestBaseline

log = logging.getLogger("voxgate.bench.baseline")

# Orpheus's own server defaults (as models.orpheus.model declares them for the engine).
ORPHEUS_SAMPLING = {"temperature": 0.6, "top_p": 0.8, "repetition_penalty": 1.3}


def baseline_facts(name: str, sample_rate: int = 24000, max_context: int = 4096) -> ModelFacts:
    frames_per_s = sample_rate / 2048
    return ModelFacts(
        name=name,
        sample_rate=sample_rate,
        token_rate_hz=frames_per_s * T.CODES_PER_FRAME,
        stop_token_ids=(T.END_OF_SPEECH,),
        first_chunk_tokens=WINDOW_TOKENS,
        chunk_tokens=T.CODES_PER_FRAME,
        voices=VOICES,
        default_voice="tara",
        max_context=max_context,
        sampling_defaults=dict(ORPHEUS_SAMPLING),
    )


# --- the engine surface -------------------------------------------------------------------------
class _Cancelled(StoppingCriteria):
    def __init__(self, job: Job) -> None:
        self.job = job

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs
    ) -> torch.BoolTensor:
        return torch.full(
            (input_ids.shape[0],), self.job.cancelled, dtype=torch.bool, device=input_ids.device
        )


class HFBaseline(PerRequestBaseline):
    def __init__(self, llm, tokenizer, snac, name: str, device: torch.device) -> None:
        super().__init__()
        self.llm = llm.eval()
        self.tokenizer = tokenizer  # tokenizers.Tokenizer (the checkpoint's tokenizer.json)
        self.device = device
        sample_rate = int(snac.sampling_rate)
        self.facts = baseline_facts(name, sample_rate, int(llm.config.max_position_embeddings))
        self._decode = snac_reference_decoder(snac, device)

    def prompt_ids(self, text: str, voice: str | None) -> list[int]:
        """The engine's Orpheus prompt: "{voice}: {text}" between the speaker-turn tokens."""
        return orpheus_prompt(self.tokenizer, text, voice or self.facts.default_voice)

    def _generate(self, job: Job) -> tuple[FinishReason, int]:
        s = job.sampling
        sample_rate = self.facts.sample_rate
        streamer = ReferenceStreamer(
            self._decode, lambda pcm: job.stream.push(AudioChunk(job.request_id, pcm, sample_rate))
        )
        ids = torch.tensor([job.prompt], device=self.device)
        options: dict = {"do_sample": not s.greedy}
        if not s.greedy:
            options.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
        if s.seed is not None:
            torch.manual_seed(s.seed)
        started = time.monotonic()
        with torch.inference_mode():
            out = self.llm.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=s.max_tokens,
                min_new_tokens=s.min_tokens,
                repetition_penalty=s.repetition_penalty,
                eos_token_id=T.END_OF_SPEECH,
                pad_token_id=T.END_OF_SPEECH,
                logits_processor=LogitsProcessorList(
                    [AudioTokenMask(len(job.prompt), s.min_tokens)]
                ),
                stopping_criteria=StoppingCriteriaList([_Cancelled(job)]),
                streamer=streamer,
                **options,
            )
        generated = out.shape[1] - len(job.prompt)
        log.debug("%s: %d tokens in %.2f s", job.request_id, generated, time.monotonic() - started)
        if job.cancelled:
            return FinishReason.CANCELLED, generated
        return (FinishReason.LENGTH if generated >= s.max_tokens else FinishReason.STOP), generated


# --- building it ----------------------------------------------------------------------------
def random_hf_llama(cfg: dict, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """transformers' LlamaForCausalLM of a published config with its own random init (normal
    0.02, unit norms), built on `device` in `dtype`: real shapes, no download."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        **{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")}
    )
    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def load_orpheus_baseline(
    model: str, dev: torch.device, dtype: torch.dtype, random_weights: bool = False
) -> HFBaseline:
    """Orpheus's baseline for `tiny-orpheus`, `orpheus-3b` or an Orpheus checkpoint folder /
    repo id, loaded the way its model card does; started and ready to serve."""
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    from models.codecs.snac_checkpoint import load_snac
    from models.codecs.snac_noise import install_positional_noise
    from models.loader import resolve_source
    from models.orpheus import configs
    from models.orpheus.presets import ensure_tiny_orpheus

    if random_weights and model != "orpheus-3b":
        # As the engine's loader says it (models/load_checks.py).
        raise ValueError(
            "--random-weights works with orpheus-3b only"
            + (" (tiny-orpheus is random already)" if model == "tiny-orpheus" else "")
        )
    tiny_model, tiny_codec = ensure_tiny_orpheus()
    if model == "tiny-orpheus":
        folder, codec = tiny_model, str(tiny_codec)
    elif model == "orpheus-3b" and random_weights:
        from snac import SNAC

        from models.codecs.snac_checkpoint import snac_24khz_config

        llm = random_hf_llama(configs.ORPHEUS_3B, dev, dtype)
        torch.manual_seed(0)  # the engine's random SNAC (models.registry) is built the same way
        snac = SNAC(**snac_24khz_config()).to(dev).eval()
        install_positional_noise(snac)
        # As the engine does: the tiny preset's tokenizer has Llama 3's special ids.
        tokenizer = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
        return _started(HFBaseline(llm, tokenizer, snac, model, dev))
    else:
        source = configs.REPO_ID if model == "orpheus-3b" else model
        folder, codec = (
            resolve_source(source, ("config.json", "tokenizer.json")),
            configs.CODEC_REPO_ID,
        )
    llm = LlamaForCausalLM.from_pretrained(folder, dtype=dtype).to(dev)
    snac = load_snac(codec, device=dev)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return _started(HFBaseline(llm, tokenizer, snac, model, dev))


def _started(baseline: HFBaseline) -> HFBaseline:
    baseline.start()
    return baseline
