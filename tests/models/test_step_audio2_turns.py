"""The tiny-step-audio2 preset through the registry, and what the turn machinery needs from it:
a turn's audio → adapter embeddings in the prompt's audio slots; the chat template with its
system prompt; a reply → transcript text, speech codes and filler; a barged-in reply → the
part the user heard; a second turn reusing the first's KV; token2wav streamed == whole."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from engine.api import ErasedTurn, ModelInputError, ReplyFromText, TurnFromSpeech, TurnFromText
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.loop import prepare_speech_turns, prepare_turn
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.registry import load_model
from models.step_audio2 import tokens as T
from models.step_audio2.prompt import AssistantTurn, ToolResultTurn, UserTurn
from models.step_audio2.token2wav import FIRST_HOP
from tests.models.engine_run import run
from tests.models.hift_seams import assert_within_seams


@pytest.fixture(scope="module")
def model():
    return load_model("tiny-step-audio2")


def speech(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (0.1 * rng.standard_normal(int(16000 * seconds))).astype(np.float32)


def encode(model, text: str) -> list[int]:
    return model.tokenizer.encode(text, add_special_tokens=False).ids


def test_audio_turn_fills_audio_slots_in_the_chat_template(model):
    ids = model.ids
    turn = model.user_audio_turn(speech(1.0, 1))
    assert turn.audio.embeds.shape == (13, model.llm.args.hidden_size)  # 12.5 a second
    prompt = model.preprocess_turns([turn]).token_ids
    system = [ids.bot, *encode(model, f"system\n{T.DEFAULT_SYSTEM_PROMPT}"), ids.eot]
    human = [ids.bot, *encode(model, "human\n")]
    slots = prompt[len(system) + len(human) + 1 : -len(encode(model, "assistant\n")) - 4]
    assert prompt[: len(system) + len(human) + 1] == [*system, *human, ids.audio_start]
    assert slots == list(range(model.slots.base, model.slots.base + 13))
    assert prompt[-(len(encode(model, "assistant\n")) + 4) :] == [
        ids.audio_end,
        ids.eot,
        ids.bot,
        *encode(model, "assistant\n"),
        ids.tts_start,
    ]
    torch.testing.assert_close(model.slots.table[:13], turn.audio.embeds)
    # The same turn again (the next prompt of the conversation) keeps its slots.
    assert model.preprocess_turns([turn]).token_ids == prompt
    with pytest.raises(ModelInputError, match="empty"):
        model.user_audio_turn(np.zeros(0, np.float32))
    with pytest.raises(ModelInputError, match="too short"):
        model.user_audio_turn(speech(0.02, 2))


def test_system_prompt_is_written_when_it_changes(model):
    ids = model.ids
    first = UserTurn(text="hello", system="Be terse.")
    history = [first, AssistantTurn((5, 6)), UserTurn(text="again")]
    prompt = model.preprocess_turns(history).token_ids
    assert prompt[: len(encode(model, "system\nBe terse.")) + 2] == [
        ids.bot,
        *encode(model, "system\nBe terse."),
        ids.eot,
    ]
    assert prompt.count(ids.bot) == 5  # system, human, assistant, human, assistant
    changed = [*history[:2], UserTurn(text="again", system="Be verbose.")]
    longer = model.preprocess_turns(changed).token_ids
    assert longer.count(ids.bot) == 6 and "Be verbose." in model.tokenizer.decode(longer)
    first_turn = model.preprocess_turns(history[:1]).token_ids
    assert longer[: len(first_turn)] == first_turn  # earlier turns' ids never change
    # Through the engine's turn commands: the system prompt rides with the user turn.
    turn = prepare_turn(model, TurnFromText("hi", system="Be kind."))
    assert turn == UserTurn(text="hi", system="Be kind.")
    spoken = prepare_turn(model, TurnFromSpeech(speech(0.5, 3), system="Be kind."))
    assert spoken.system == "Be kind." and spoken.audio.embeds.shape[0] == 6  # compute_token_num


def test_an_erased_turn_leaves_an_empty_message_and_its_system_prompt(model):
    """A turn taken out of the conversation (the engine's ErasedTurn) is an empty message of
    its role in its place: the turns alternate as before, nothing of what was said is left,
    and the system prompt the erased user turn set still holds for the turns after it."""
    ids = model.ids
    said = prepare_turn(model, TurnFromSpeech(speech(1.0, 4), system="Be terse."))
    words = prepare_turn(model, ReplyFromText(" Aye "))  # the client's words for the model
    assert words == AssistantTurn(tuple(encode(model, "Aye")))
    with pytest.raises(ModelInputError, match="empty"):
        prepare_turn(model, ReplyFromText("  "))
    history = [said, words, UserTurn(text="again")]
    erased = [prepare_turn(model, ErasedTurn(turn)) for turn in history[:2]]
    assert erased == [UserTurn(system="Be terse.", erased=True), AssistantTurn(())]
    prompt = model.preprocess_turns([*erased, history[2]]).token_ids
    human, assistant = encode(model, "human\n"), encode(model, "assistant\n")
    expected = [ids.bot, *encode(model, "system\nBe terse."), ids.eot]
    expected += [ids.bot, *human, ids.eot, ids.bot, *assistant, ids.tts_start, ids.eot]
    expected += [ids.bot, *human, *encode(model, "again"), ids.eot, ids.bot, *assistant]
    assert prompt == [*expected, ids.tts_start]
    results = prepare_turn(model, ErasedTurn(ToolResultTurn(("sunny", "12 C"))))
    assert results == ToolResultTurn(("", ""))
    with pytest.raises(ModelInputError, match="not a"):
        prepare_turn(model, ErasedTurn("not a turn"))


def test_several_sessions_turns_are_encoded_together(model):
    """The engine process hands the spoken turns that arrive together to one batched run of
    the audio encoder; a bad turn gets its own error, the others their turns as if alone."""
    commands = [
        TurnFromSpeech(speech(1.0, 6)),
        TurnFromSpeech(speech(0.02, 7)),
        TurnFromSpeech(speech(0.6, 8), system="Be brief."),
    ]
    first, short, third = prepare_speech_turns(model, commands)
    assert isinstance(short, ModelInputError) and "too short" in str(short)
    assert third.system == "Be brief." and first.system is None
    for batched, command in ((first, commands[0]), (third, commands[2])):
        alone = prepare_turn(model, command)
        torch.testing.assert_close(batched.audio.embeds, alone.audio.embeds, rtol=1e-5, atol=1e-5)
        assert batched.audio.key != alone.audio.key  # a turn of its own, with slots of its own


def test_reply_routing_and_truncation_to_what_was_heard(model):
    ids = model.ids
    text = encode(model, "Hi there")
    codes = [ids.audio_base + i for i in range(32)]
    filler = [ids.tts_pad, ids.audio_base + ids.num_codes]
    reply = [*text[:4], *codes[:28], filler[0], *text[4:], *codes[28:], filler[1], ids.tts_end]
    reply.append(ids.eot)
    assert model.reply_text(reply) == "Hi there"
    assert [t for t in reply if model.is_text_token(t)] == text
    assert model.heard_reply(reply, None) == AssistantTurn(tuple(reply[:-1]))
    # 1 s heard = 25 codes: the first text and 25 codes, no more.
    assert model.heard_reply(reply, 1.0).token_ids == tuple([*text[:4], *codes[:25]])
    assert model.heard_reply(reply, 0.0).token_ids == ()
    state = model.new_stream_state()
    pcm = model.detokenize([state], [reply], [True])[0]
    assert state.text_ids == text and state.codes == 32
    assert len(pcm) == 32 * 2 * 480  # 25 codes/s → 50 mel frames/s → 24 kHz
    assert model.facts.sample_rate == 24000 and model.facts.system_prompt


def test_token2wav_streamed_equals_whole(model):
    codes = torch.randint(0, T.NUM_CODES, (36,), generator=torch.Generator().manual_seed(7))
    codes = codes.tolist()
    whole = model.token2wav.new_stream()
    model.token2wav.push(whole, codes)
    ref = model.token2wav.decode([whole], [True])[0]
    stream, parts, at = model.token2wav.new_stream(), [], 0
    for n in (10, 14, 12):  # nothing yet, the first chunk (14 codes + 3 ahead), the rest
        model.token2wav.push(stream, codes[at : at + n])
        at += n
        parts.append(model.token2wav.decode([stream], [at == len(codes)])[0])
    assert len(parts[0]) == 0 and len(parts[1]) > 0
    streamed = np.concatenate(parts)
    assert len(streamed) == len(ref) == 36 * 2 * 480
    # The flow's mel is exact (tests/models/test_flow_hift.py); HiFT's seams are not.
    assert_within_seams(streamed, ref)


def test_first_token2wav_chunk_is_its_first_hop_and_look_ahead(model):
    """A reply's first audio waits for FIRST_HOP codes and the flow's 3 look-ahead codes, not
    one more: 17 codes give 400 ms (20 frames past HiFT's right context), 16 give nothing. And
    that chunk covers the next one's wait with the model's margin at the H200's costs: the
    next chunk's 30 tokens at 5.5 ms a step and a 40-ms token2wav job."""
    t2w = model.token2wav
    assert (t2w.first_hop, t2w.lookahead) == (FIRST_HOP, 3) == (14, 3)
    codes = torch.randint(0, T.NUM_CODES, (17,), generator=torch.Generator().manual_seed(3))
    stream = t2w.new_stream()
    t2w.push(stream, codes[:16].tolist())
    assert len(t2w.decode([stream], [False])[0]) == 0
    t2w.push(stream, codes[16:].tolist())
    first = t2w.decode([stream], [False])[0]
    assert len(first) == (2 * 14 - 8) * 480 == round(t2w.first_audio_s(17) * 24000)
    assert t2w.first_audio_s(16) == 0.0
    facts = model.facts
    # The engine looks at the first chunk from first_chunk_tokens generated tokens on; with
    # random weights' 5 text tokens first, its 17 codes exist after 22.
    assert facts.first_chunk_tokens <= 5 + 17
    heard_s = t2w.first_audio_s(17) - 0.020  # less the output encoder's held-back frame
    assert heard_s >= facts.first_audio_margin * (facts.chunk_tokens * 0.0055 + 0.040)


def test_tokens_to_come_add_audio_only_at_the_token2wavs_chunk_edges(model):
    """What a first chunk would play after `more` tokens to come (the scheduler's past-budget
    wait asks): they count at 25 codes in 30 tokens, and the token2wav makes no more audio
    until the next 25-code chunk and its 3 look-ahead codes exist (42 codes)."""
    t2w = model.token2wav
    reply = [*encode(model, "Hi there"), *(model.ids.audio_base + i for i in range(17))]
    first = model.first_chunk_audio_s(reply)
    assert first == t2w.first_audio_s(17) > 0
    assert model.first_chunk_audio_s(reply, 29) == first  # 24 codes more: 41
    assert model.first_chunk_audio_s(reply, 30) == t2w.first_audio_s(42) > first


def test_second_turn_reuses_the_first_turns_kv_and_equals_a_fresh_prefill(model):
    model = copy.copy(model)
    model.token2wav = None  # transcript only: the tokens are the subject here
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=8, min_tokens=8)
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=64, num_kv_blocks=64, block_size=16)
    first = model.user_audio_turn(speech(1.5, 4))
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    (req,), _, done, _ = run(core, [SpeechRequest("", turns=(first,), sampling=params,
                                                  conversation_id="c")])  # fmt: skip
    history = (first, model.heard_reply(req.output_ids, None), model.user_audio_turn(speech(1, 5)))
    (again,), _, done, _ = run(
        core, [SpeechRequest("", turns=history, sampling=params, conversation_id="c")]
    )
    assert done[again.request_id].reused_tokens >= 16
    fresh = EngineCore(model, config, torch.device("cpu"), "sdpa")
    (alone,), _, _, _ = run(fresh, [SpeechRequest("", turns=history, sampling=params)])
    assert list(again.output_ids) == list(alone.output_ids)


def test_real_configuration_shapes_and_clear_errors(tmp_path):
    from models.checkpoint_errors import CheckpointError
    from models.loader import read_config
    from models.step_audio2.loading import audio_config, decoder_args, load_tokenizer
    from models.step_audio2.presets import ensure_real_config
    from models.step_audio2.token2wav import load_token2wav
    from models.step_audio2.tokens import StepAudio2Ids

    folder = ensure_real_config()
    cfg = read_config(folder)
    a = decoder_args(cfg)
    assert (a.num_layers, a.num_heads, a.num_kv_heads, a.head_dim) == (28, 28, 4, 128)
    assert a.vocab_size == 158720 and a.attention_bias and not a.tie_word_embeddings
    audio = audio_config(cfg)
    assert (audio.n_state, audio.n_head, audio.n_layer, audio.n_ctx) == (1280, 20, 32, 1500)
    assert audio.llm_dim == a.hidden_size == 3584
    ids = StepAudio2Ids.from_tokenizer(load_tokenizer(folder))
    assert ids.num_codes == 6561 and ids.audio_base + ids.num_codes < a.vocab_size
    with pytest.raises(CheckpointError, match="random weights already"):
        load_model("tiny-step-audio2", random_weights=True)
    with pytest.raises(CheckpointError, match="drop --codec"):
        load_model("tiny-step-audio2", codec="snac")
    with pytest.raises(CheckpointError, match="neither flow.yaml"):
        load_token2wav(tmp_path, torch.device("cpu"), torch.float32)
    (tmp_path / "flow.yaml").write_text("flow: {}\n")  # Step-Audio 2's layout, incomplete
    with pytest.raises(CheckpointError, match="lacks flow.pt"):
        load_token2wav(tmp_path, torch.device("cpu"), torch.float32)
    for name in ("flow.pt", "hift.pt"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(CheckpointError, match="not Step-Audio 2's"):
        load_token2wav(tmp_path, torch.device("cpu"), torch.float32)
    bad = {**cfg, "audio_encoder_config": {**cfg["audio_encoder_config"], "llm_dim": 4096}}
    with pytest.raises(CheckpointError, match="llm_dim 4096"):
        audio_config(bad)
