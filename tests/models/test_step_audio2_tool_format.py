"""Step-Audio 2's tool calls as text (models/step_audio2/tool_format.py, prompt.py): the
incremental call parser, whatever way the reply's text is split, and the prompt with tools and
tool results written as StepFun's published chat format writes them."""

from __future__ import annotations

import json
import random

import pytest

from models.step_audio2.tool_format import (
    MAX_ARGUMENT_CHARS,
    StepAudio2CallParser,
    call_text,
    tools_json,
)
from models.tool_calls import (
    CallArguments,
    CallDone,
    CallMalformed,
    CallStarted,
    FunctionTool,
    ReplyText,
    parser_for,
)

NAMES = frozenset({"get_weather", "search"})


def merged(pieces):
    """Adjacent text pieces and adjacent argument pieces joined: how a stream is split must
    not change what it says."""
    out = []
    for p in pieces:
        if out and type(p) is type(out[-1]) and isinstance(p, ReplyText):
            out[-1] = ReplyText(out[-1].text + p.text)
        elif out and type(p) is type(out[-1]) and isinstance(p, CallArguments):
            out[-1] = CallArguments(out[-1].delta + p.delta)
        else:
            out.append(p)
    return out


def parse(chunks, names=NAMES):
    parser = StepAudio2CallParser(names)
    out = []
    for chunk in chunks:
        out += parser.feed(chunk)
    return out + parser.finish()


def splits(text: str):
    """The text whole, one character at a time, cut at every boundary in two, and cut at
    random boundaries (seeded)."""
    yield [text]
    yield list(text)
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]
    rng = random.Random(7)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(text)), min(6, len(text) - 1)))
        yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


ARGS = '{"city": "Pa}ris {x}", "q": "a \\" </tool", "n": {"deep": [1, {"k": "}"}]}}'
REPLY = "Sure, let me check. " + call_text("get_weather", ARGS) + " One moment."


@pytest.mark.parametrize("chunks", list(splits(REPLY)), ids=lambda c: str(len(c)))
def test_a_call_parses_the_same_however_the_text_is_split(chunks):
    assert merged(parse(chunks)) == [
        ReplyText("Sure, let me check. "),
        CallStarted("get_weather"),
        CallArguments(ARGS),
        CallDone("get_weather", ARGS),
        ReplyText(" One moment."),
    ]
    assert json.loads(ARGS)["q"] == 'a " </tool'  # braces and tags inside strings are data


def test_text_is_held_back_only_while_it_could_open_a_call():
    parser = StepAudio2CallParser(NAMES)
    assert parser.feed("Hello <tool") == [ReplyText("Hello ")]
    assert parser.feed("box> done") == [ReplyText("<toolbox> done")]
    assert parser.feed("<") == []
    assert parser.finish() == [ReplyText("<")]


def test_arguments_stream_before_the_call_ends():
    parser = StepAudio2CallParser(NAMES)
    assert parser.feed('<tool_call>function\nsearch\n{"query": ') == [
        CallStarted("search"),
        CallArguments('{"query": '),
    ]
    assert parser.feed('"tides"}</tool_') == [CallArguments('"tides"}')]
    assert parser.feed("call>") == [CallDone("search", '{"query": "tides"}')]


def test_whitespace_around_the_head_is_let_pass():
    text = '<tool_call>\nfunction\n search \n{"query": "q"}</tool_call>'
    for chunks in ([text], list(text)):
        assert merged(parse(chunks)) == [
            CallStarted("search"),
            CallArguments('{"query": "q"}'),
            CallDone("search", '{"query": "q"}'),
        ]


def test_calls_one_after_another():
    text = call_text("search", '{"query": "a"}') + call_text("get_weather", '{"city": "b"}')
    assert merged(parse(list(text))) == [
        CallStarted("search"),
        CallArguments('{"query": "a"}'),
        CallDone("search", '{"query": "a"}'),
        CallStarted("get_weather"),
        CallArguments('{"city": "b"}'),
        CallDone("get_weather", '{"city": "b"}'),
    ]


@pytest.mark.parametrize(
    "text, reason, started",
    [
        (call_text("launch", "{}"), "'launch', which is not a session tool", False),
        ("<tool_call>method\nsearch\n{}</tool_call>", "then the function's name", False),
        ("<tool_call>function</tool_call>", "then the function's name", False),
        ("<tool_call>function\nsearch</tool_call>", "then the function's name", False),
        (call_text("search", '{"query": '), "not a JSON object", True),
        (call_text("search", "[1, 2]"), "not a JSON object", True),
        (call_text("search", ""), "not a JSON object", True),
        ('<tool_call>function\nsearch\n{"query": "x', "ended inside the call", True),
        ("<tool_call>funct", "ended inside the call", False),
    ],
)
def test_malformed_calls_are_told_with_their_text_and_never_raise(text, reason, started):
    for chunks in ([text], list(text)):
        pieces = merged(parse(chunks))
        bad = [p for p in pieces if isinstance(p, CallMalformed)]
        assert len(bad) == 1 and reason in bad[0].reason, pieces
        assert bad[0].text == text and bad[0].started is started
        assert not any(isinstance(p, CallDone) for p in pieces)
        # CallStarted went out exactly when the malformed call says it did.
        assert any(isinstance(p, CallStarted) for p in pieces) is started


def test_text_after_a_malformed_call_is_still_text():
    pieces = merged(parse([call_text("launch", "{}") + " and then"]))
    assert isinstance(pieces[0], CallMalformed) and pieces[1] == ReplyText(" and then")


def test_arguments_past_the_limit_end_the_call_as_malformed():
    text = call_text("search", '{"q": "' + "x" * MAX_ARGUMENT_CHARS + '"}') + "after"
    pieces = merged(parse([text[i : i + 4096] for i in range(0, len(text), 4096)]))
    assert isinstance(pieces[0], CallStarted)
    bad = next(p for p in pieces if isinstance(p, CallMalformed))
    assert "too long" in bad.reason and bad.started and len(bad.text) < len(text)
    assert pieces[-1] == ReplyText("after")


def test_parser_for_names_the_syntax():
    tools = (FunctionTool("search", "", {"type": "object"}),)
    assert isinstance(parser_for("step_audio2", tools), StepAudio2CallParser)
    with pytest.raises(ValueError, match="unknown tool-call syntax"):
        parser_for("hermes", tools)


# --- the prompt ---------------------------------------------------------------------------------
SEARCH = FunctionTool(
    "search",
    "搜索工具",
    {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "搜索关键词"}},
        "required": ["query"],
        "additionalProperties": False,
    },
)
# StepFun's examples.py tool_call_test writes its tools message content exactly so.
PUBLISHED_TOOLS = (
    '[{"type": "function", "function": {"name": "search", "description": "搜索工具", '
    '"parameters": {"type": "object", "properties": {"query": {"type": "string", '
    '"description": "搜索关键词"}}, "required": ["query"], "additionalProperties": false}}}]'
)


def test_the_tools_message_is_written_as_the_published_example():
    assert tools_json([SEARCH]) == PUBLISHED_TOOLS


@pytest.fixture(scope="module")
def tiny():
    from tokenizers import Tokenizer

    from models.step_audio2.presets import ensure_tiny_step_audio2
    from models.step_audio2.tokens import StepAudio2Ids

    tokenizer = Tokenizer.from_file(str(ensure_tiny_step_audio2() / "tokenizer.json"))
    return tokenizer, StepAudio2Ids.from_tokenizer(tokenizer)


def test_a_conversation_with_tools_and_a_result_is_the_published_format(tiny):
    from models.base import ModelInputError
    from models.step_audio2.prompt import (
        AssistantTurn,
        UserTurn,
        conversation_ids,
        tool_result_turn,
        tools_message,
    )

    tokenizer, ids = tiny
    reply = "Let me look. " + call_text("search", '{"query": "tides"}')
    turns = [
        tools_message(PUBLISHED_TOOLS),
        UserTurn(text="When is high tide?", system="Be brief."),
        AssistantTurn(tuple(tokenizer.encode(reply).ids)),
        tool_result_turn(["High tide at 14:05."]),
    ]
    prompt = conversation_ids(tokenizer, ids, turns, lambda key, embeds: [])
    expected = (
        "<|BOT|>system\nBe brief.<|EOT|>"
        f"<|BOT|>tool_json_schemas\n{PUBLISHED_TOOLS}<|EOT|>"
        "<|BOT|>human\nWhen is high tide?<|EOT|>"
        f"<|BOT|>assistant\n<tts_start>{reply}<|EOT|>"
        "<|BOT|>input\nHigh tide at 14:05.<|EOT|>"
        "<|BOT|>assistant\n<tts_start>"
    )
    assert tokenizer.decode(prompt, skip_special_tokens=False) == expected
    # The same conversation without tools shares only the system message (and the next
    # message's <|BOT|>): a change of tools re-prefills from there.
    plain = conversation_ids(tokenizer, ids, turns[1:], lambda key, embeds: [])
    shared = next(i for i, (a, b) in enumerate(zip(plain, prompt, strict=False)) if a != b)
    assert shared == prompt.index(ids.eot) + 2
    with pytest.raises(ModelInputError, match="at least one result"):
        tool_result_turn([])
    with pytest.raises(ModelInputError, match="tools take"):
        tools_message("x" * 40000)


def test_the_transcript_keeps_call_tags_a_tokenizer_marks_special(tmp_path):
    """Where the vocabulary has `<tool_call>` / `</tool_call>` as special tokens, decoding
    with special tokens skipped would drop them, and the call with them."""
    from tokenizers import AddedToken, Tokenizer

    from models.step_audio2.presets import write_tokenizer
    from models.step_audio2.tokens import StepAudio2Ids

    write_tokenizer(tmp_path)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tags = [AddedToken(t, special=True, normalized=False) for t in ("<tool_call>", "</tool_call>")]
    tokenizer.add_special_tokens(tags)
    ids = StepAudio2Ids.from_tokenizer(tokenizer)
    assert sorted(ids.call_tags.values()) == ["</tool_call>", "<tool_call>"]
    text = "Ok " + call_text("search", '{"query": "é"}') + " bye"
    encoded = tokenizer.encode(text).ids
    assert "<tool_call>" not in tokenizer.decode(encoded, skip_special_tokens=True)
    assert ids.decode_text(tokenizer, encoded) == text


def test_a_call_from_the_client_is_an_assistant_message_of_its_own(tiny):
    from models.step_audio2.prompt import (
        AssistantTurn,
        UserTurn,
        conversation_ids,
        tool_call_turn,
        tool_result_turn,
    )

    tokenizer, ids = tiny
    turns = [
        UserTurn(text="Hi", system="S"),
        AssistantTurn(tuple(tokenizer.encode("Hello.").ids)),
        tool_call_turn(tokenizer, "search", '{"query": "news"}'),
        tool_result_turn(["Nothing new."]),
    ]
    prompt = conversation_ids(tokenizer, ids, turns, lambda key, embeds: [])
    assert tokenizer.decode(prompt, skip_special_tokens=False) == (
        "<|BOT|>system\nS<|EOT|><|BOT|>human\nHi<|EOT|>"
        "<|BOT|>assistant\n<tts_start>Hello.<|EOT|>"
        '<|BOT|>assistant\n<tts_start><tool_call>function\nsearch\n{"query": "news"}'
        "</tool_call><|EOT|>"
        "<|BOT|>input\nNothing new.<|EOT|><|BOT|>assistant\n<tts_start>"
    )
