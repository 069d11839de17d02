"""Qwen3-TTS's prompt as rows (code_0, code_1 … code_15, text), -1 where a column is absent.

The published generate (non-streaming text, the CustomVoice and VoiceDesign default) feeds
the talker, position by position, the sum of a text embedding and a codec embedding:

  [instruction]  "<|im_start|>user\\n{instruction}<|im_end|>\\n"     text only
  role           "<|im_start|>assistant\\n" (its first three tokens)  text only
  codec prefix   think/no-think tags (+ language), [speaker], pad     + tts_pad (tts_bos last)
  text           the text's tokens, then tts_eos                      + codec pad
  start          codec bos                                            + tts_pad
  [clip codes]   in-context cloning: the clip's frames (its transcript went before the text)

and each generated frame goes back in as the sum of its 16 codebooks' embeddings + tts_pad.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from models.base import ModelInputError

ABSENT = -1
Row = tuple[int, ...]
Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class CodecIds:
    """The talker's control ids and tables (config.json `talker_config`, top-level tts ids)."""

    pad: int
    bos: int
    eos: int
    think: int
    nothink: int
    think_bos: int
    think_eos: int
    tts_pad: int
    tts_bos: int
    tts_eos: int
    speakers: dict[str, int]
    speaker_dialects: dict[str, str | bool]
    languages: dict[str, int]

    @classmethod
    def from_config(cls, cfg: dict) -> CodecIds:
        t = cfg["talker_config"]
        return cls(
            pad=int(t["codec_pad_id"]),
            bos=int(t["codec_bos_id"]),
            eos=int(t["codec_eos_token_id"]),
            think=int(t["codec_think_id"]),
            nothink=int(t["codec_nothink_id"]),
            think_bos=int(t["codec_think_bos_id"]),
            think_eos=int(t["codec_think_eos_id"]),
            tts_pad=int(cfg["tts_pad_token_id"]),
            tts_bos=int(cfg["tts_bos_token_id"]),
            tts_eos=int(cfg["tts_eos_token_id"]),
            speakers={k.lower(): int(v) for k, v in (t.get("spk_id") or {}).items()},
            speaker_dialects={k.lower(): v for k, v in (t.get("spk_is_dialect") or {}).items()},
            languages={k.lower(): int(v) for k, v in (t.get("codec_language_id") or {}).items()},
        )

    def spoken_languages(self) -> list[str]:
        """What a request may ask for: "auto" and every language but the dialects (which a
        speaker brings with it)."""
        return ["auto", *sorted(k for k in self.languages if "dialect" not in k)]


@dataclass(frozen=True)
class Reference:
    """A cloned voice's clip for in-context cloning: its transcript's token ids (without the
    chat markers) and its codes [frames, 16]."""

    text_ids: list[int]
    codes: np.ndarray


@dataclass(frozen=True)
class PromptRequest:
    text: str
    speaker: str | None  # a preset speaker (CustomVoice); None: no speaker row (VoiceDesign)
    language: str = "auto"
    instruction: str = ""
    # The speaker row's code_0 when it is not a preset speaker's: a cloned voice (Base).
    speaker_row: int | None = None
    reference: Reference | None = None  # in-context cloning: the clip's text and codes


def _text_rows(ids: list[int], width: int) -> list[Row]:
    return [(*(ABSENT,) * width, t) for t in ids]


def _row(code: int, text: int, width: int) -> Row:
    return (code, *(ABSENT,) * (width - 1), text)


def language_id(ids: CodecIds, request: PromptRequest) -> int | None:
    language = request.language.lower()
    if language != "auto" and language not in ids.languages:
        raise ModelInputError(
            f"unknown language {request.language!r}; choose one of "
            + ", ".join(ids.spoken_languages())
        )
    chosen = None if language == "auto" else ids.languages[language]
    # A dialect speaker speaks its dialect when the language is Chinese or left to the model.
    dialect = ids.speaker_dialects.get(request.speaker or "", False)
    if language in ("chinese", "auto") and dialect:
        chosen = ids.languages[str(dialect)]
    return chosen


def _head_rows(encode: Encode, ids: CodecIds, request: PromptRequest, width: int) -> list[Row]:
    """[instruction], the role, and the codec prefix up to (not including) codec bos."""
    rows: list[Row] = []
    if request.instruction:
        rows += _text_rows(encode(f"<|im_start|>user\n{request.instruction}<|im_end|>\n"), width)
    rows += _text_rows(encode("<|im_start|>assistant\n")[:3], width)
    lang = language_id(ids, request)
    codec = (
        [ids.nothink, ids.think_bos, ids.think_eos]
        if lang is None
        else [ids.think, ids.think_bos, lang, ids.think_eos]
    )
    if request.speaker_row is not None:
        codec.append(request.speaker_row)
    elif request.speaker is not None:
        codec.append(ids.speakers[request.speaker])
    codec.append(ids.pad)
    rows += [_row(c, ids.tts_pad, width) for c in codec[:-1]]
    rows.append(_row(codec[-1], ids.tts_bos, width))
    return rows


def prompt_rows(encode: Encode, ids: CodecIds, request: PromptRequest, width: int) -> list[Row]:
    """The prompt's rows; `width` is the number of codebooks (rows are width + 1 long)."""
    text_ids = encode(f"<|im_start|>assistant\n{request.text}<|im_end|>\n<|im_start|>assistant\n")
    if len(text_ids) < 9:
        raise ModelInputError("text is empty after tokenisation: give the model something to say")
    rows = _head_rows(encode, ids, request, width)
    spoken = text_ids[3:-5]
    if request.reference is not None:  # the clip's transcript, then the text, then its codes
        spoken = [*request.reference.text_ids, *spoken]
    rows += [_row(ids.pad, t, width) for t in [*spoken, ids.tts_eos]]
    rows.append(_row(ids.bos, ids.tts_pad, width))
    if request.reference is not None:
        rows += [(*map(int, frame), ids.tts_pad) for frame in request.reference.codes]
    return rows


@dataclass(frozen=True)
class StreamingPrompt:
    """A prompt for text that is still arriving (the package's streaming-text layout)."""

    rows: list[Row]
    # Rows (their indexes) whose text column waits for the text's next ids, in order: ABSENT
    # until they come (models/text_feed.py, TextFeed.prompt_gaps).
    gaps: list[int]
    # The text's ids past the prompt: each goes in with a generated frame, one a frame.
    trailing: list[int]


def streaming_prompt(
    encode: Encode, ids: CodecIds, request: PromptRequest, width: int, text_ids: list[int]
) -> StreamingPrompt:
    """The package's streaming-text layout (generate's non_streaming_mode=False), opened with
    the text's first ids `text_ids` (at least one). The same head as prompt_rows, then:

    - a preset, designed or x-vector-only voice: codec bos with the text's first token; every
      later token of the text, then tts_eos, then tts_pad, goes in with a generated frame;
    - in-context cloning: codec bos and the clip's frames, row by row, with the clip's
      transcript then the text then tts_eos (tts_pad past their end); the rest of the text
      goes in with the generated frames. Rows the text has not reached yet are gaps, so the
      request starts once its text covers the clip (or is final)."""
    rows = _head_rows(encode, ids, request, width)
    if request.reference is None:
        rows.append(_row(ids.bos, text_ids[0], width))
        return StreamingPrompt(rows, [], text_ids[1:])
    aligned = [*request.reference.text_ids, *text_ids]
    codecs: list[Row] = [_row(ids.bos, ABSENT, width)]
    codecs += [(*map(int, frame), ABSENT) for frame in request.reference.codes]
    gaps = []
    for i, codec in enumerate(codecs):
        if i >= len(aligned):
            gaps.append(len(rows))
        rows.append((*codec[:width], aligned[i] if i < len(aligned) else ABSENT))
    return StreamingPrompt(rows, gaps, aligned[len(codecs) :])
