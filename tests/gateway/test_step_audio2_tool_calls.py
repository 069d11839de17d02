"""Function calling end to end on `/v1/realtime`: a Step-Audio 2 checkpoint served by the real
engine and gateway on loopback, and the `openai` package's Realtime client.

Random weights never write a tool call by themselves, so the checkpoint here is the tiny
preset's layout with its decoder set to spell one: every layer's output projections are zero
(each position's hidden state is its own token's embedding), the tokens of one reply have
one-hot embeddings, and the output head maps each of them to the next. Greedy decoding after
the prompt's last token (`<tts_start>`) then writes, whatever the conversation, the reply
`Sure, checking.` + five speech codes + `<tool_call>function\\nget_weather\\n{"city": "Paris"}
</tool_call>` + `<|EOT|>`, with `<tool_call>` one token as in the real vocabulary. Everything
after the weights is the served path: the engine's transcript deltas, the gateway's parser,
the Realtime events, the tool result turn and the conversation's KV."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from gateway_testkit import start_server, until_event, wait_engine_idle

openai = pytest.importorskip("openai")

CALL_ARGS = ['{"city": ', '"Paris"', "}"]
REPLY_TEXT = "Sure, checking."
CODES = [f"<audio_{i}>" for i in range(101, 106)]
CHAIN = [
    "<tts_start>",
    REPLY_TEXT,
    *CODES,
    "<tool_call>",
    "function\n",
    "get_weather\n",
    *CALL_ARGS,
    "</tool_call>",
    "<|EOT|>",
]
TEXT_PIECES = [REPLY_TEXT, "<tool_call>", "function\n", "get_weather\n", *CALL_ARGS, "</tool_call>"]
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather now in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
SESSION = {
    "type": "realtime",
    "tools": [WEATHER],
    "tool_choice": "auto",
    "temperature": 0.0,
    "max_output_tokens": 40,
}


def spell_the_chain(folder) -> None:
    """The decoder's weights set so that greedy decoding follows CHAIN (see the module)."""
    import torch
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = [tokenizer.token_to_id(t) for t in CHAIN]
    assert None not in ids and len(set(ids)) == len(ids)
    tensors = load_file(str(folder / "model.safetensors"))
    for name, tensor in tensors.items():
        if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            tensor.zero_()
    embed, head = tensors["model.embed_tokens.weight"], tensors["lm_head.weight"]
    assert len(CHAIN) <= embed.shape[1]
    tensors["model.norm.weight"].fill_(1.0)
    head.zero_()
    for k, (token, following) in enumerate(zip(ids, ids[1:], strict=False)):
        embed[token] = torch.nn.functional.one_hot(torch.tensor(k), embed.shape[1]).float()
        head[following, k] = 10.0
    save_file(tensors, str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def calling_engine(tmp_path_factory):
    from engine.config import EngineConfig
    from engine.factory import build_engine
    from models.step_audio2 import configs
    from models.step_audio2.presets import ensure_tiny_step_audio2, write_checkpoint

    folder = tmp_path_factory.mktemp("tools") / "Step-Audio-2-tools"
    write_checkpoint(folder, configs.TINY_STEP_AUDIO2, seed=11, extra_tokens=TEXT_PIECES)
    shutil.copytree(ensure_tiny_step_audio2() / "token2wav", folder / "token2wav")
    spell_the_chain(folder)
    eng = build_engine(str(folder), config=EngineConfig(kv_cache_mb=64, realtime_admission=False))
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="module")
def calling_server(calling_engine):
    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model=calling_engine.facts.name), calling_engine)
    yield server
    server.stop()


def realtime(server, model: str):
    api = openai.AsyncOpenAI(
        base_url=server.http + "/v1",
        websocket_base_url=server.url.removesuffix("/stream"),
        api_key="unused",
    )
    return api.realtime.connect(model=model)


async def ask(conn, text: str) -> tuple[object, list]:
    await conn.send(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            },
        }
    )
    await conn.send({"type": "response.create"})
    return await until_event(conn, "response.done", timeout=120)


def spy_on_prompts(monkeypatch, model) -> list[list[int]]:
    """The prompt ids of every request the engine prepares from this model's turns."""
    prompts: list[list[int]] = []
    original = model.preprocess_turns

    def preprocess_turns(turns):
        prompt = original(turns)
        prompts.append(list(prompt.token_ids))
        return prompt

    monkeypatch.setattr(model, "preprocess_turns", preprocess_turns)
    return prompts


async def test_a_tool_call_round_trip(calling_server, calling_engine, conversations, monkeypatch):
    model = calling_engine.core.model
    prompts = spy_on_prompts(monkeypatch, model)
    async with realtime(calling_server, model.facts.name) as conn:
        await until_event(conn, "session.created")
        await conn.send({"type": "session.update", "session": SESSION})
        updated, _ = await until_event(conn, "session.updated")
        assert [t.name for t in updated.session.tools] == ["get_weather"]
        assert updated.session.tool_choice == "auto"

        done, seen = await ask(conn, "What is the weather in Paris?")
        kinds = [e.type for e in seen]
        # The reply's text is the transcript; the call is a function_call item, never text.
        transcript = "".join(
            e.delta for e in seen if e.type == "response.output_audio_transcript.delta"
        )
        assert transcript == REPLY_TEXT
        added = [e for e in seen if e.type == "response.output_item.added"]
        assert [a.item.type for a in added] == ["message", "function_call"]
        call = added[1].item
        assert call.name == "get_weather" and call.call_id and added[1].output_index == 1
        deltas = [e for e in seen if e.type == "response.function_call_arguments.delta"]
        assert [d.delta for d in deltas] == CALL_ARGS  # streamed as the model wrote them
        assert {(d.call_id, d.item_id) for d in deltas} == {(call.call_id, call.id)}
        (args_done,) = [e for e in seen if e.type == "response.function_call_arguments.done"]
        assert json.loads(args_done.arguments) == {"city": "Paris"}
        assert args_done.name == "get_weather"
        item_done = [e for e in seen if e.type == "response.output_item.done"]
        assert [i.item.type for i in item_done] == ["function_call", "message"]
        assert item_done[0].item.status == "completed"
        assert item_done[0].item.arguments == args_done.arguments
        assert (
            kinds.index("response.output_item.added")
            < kinds.index("response.function_call_arguments.delta")
            < kinds.index("response.function_call_arguments.done")
        )
        assert done.response.status == "completed"
        message, listed = done.response.output
        assert message.type == "message" and message.content[0].transcript == REPLY_TEXT
        assert listed.type == "function_call" and listed.call_id == call.call_id
        assert listed.arguments == '{"city": "Paris"}'

        # An output for a call that does not exist is refused, naming the calls that wait.
        await conn.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": "call_nope", "output": "x"},
            }
        )
        error, _ = await until_event(conn, "error")
        assert error.error.type == "invalid_request_error" and call.call_id in error.error.message

        output = '{"temp_c": 21, "sky": "clear"}'
        await conn.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": call.call_id, "output": output},
            }
        )
        created, _ = await until_event(conn, "conversation.item.created")
        assert created.item.type == "function_call_output" and created.item.call_id == call.call_id
        await conn.send({"type": "response.create"})
        answered, _ = await until_event(conn, "response.done", timeout=120)
        assert answered.response.status == "completed"

    # The result reached the model's prompt in its published format, after the reply that
    # made the call, and the conversation's KV up to it was reused.
    (conversation,) = conversations
    first, second = prompts
    text = model.tokenizer.decode(second, skip_special_tokens=False)
    tools_message = (
        '<|BOT|>tool_json_schemas\n[{"type": "function", "function": {"name": "get_weather"'
    )
    assert tools_message in text
    assert text.endswith(
        '</tool_call><|EOT|><|BOT|>input\n{"temp_c": 21, "sky": "clear"}<|EOT|>'
        "<|BOT|>assistant\n<tts_start>"
    )
    assert second[: len(first)] == first
    assert conversation.reused_tokens[1] >= len(first)
    await wait_engine_idle(calling_engine)


async def test_tool_choice_none_leaves_the_tools_out(
    calling_server, calling_engine, conversations, monkeypatch
):
    """With `none` the prompt lists no tools (the conversation is prefilled again from the
    system message) and the reply is not parsed: what the model wrote is its transcript."""
    model = calling_engine.core.model
    prompts = spy_on_prompts(monkeypatch, model)
    async with realtime(calling_server, model.facts.name) as conn:
        await until_event(conn, "session.created")
        await conn.send({"type": "session.update", "session": SESSION})
        await until_event(conn, "session.updated")
        await ask(conn, "Weather?")
        await conn.send({"type": "session.update", "session": {"tool_choice": "none"}})
        await until_event(conn, "session.updated")
        done, seen = await ask(conn, "Never mind.")
        assert [o.type for o in done.response.output] == ["message"]
        assert not any(e.type.startswith("response.function_call") for e in seen)
        assert done.response.output[0].content[0].transcript == "".join(TEXT_PIECES)
    (conversation,) = conversations
    first, second = prompts
    assert "tool_json_schemas" not in model.tokenizer.decode(second, skip_special_tokens=False)
    system_end = first.index(model.ids.eot) + 1
    assert conversation.reused_tokens[1] <= system_end + 1  # only the system message is kept
    await wait_engine_idle(calling_engine)


async def test_a_call_the_client_adds_is_answered_like_the_models(
    calling_server, calling_engine, conversations, monkeypatch
):
    """A `function_call` item from the client joins the conversation as an assistant message
    holding the call, written as the model writes calls; its output is then answered."""
    model = calling_engine.core.model
    prompts = spy_on_prompts(monkeypatch, model)
    async with realtime(calling_server, model.facts.name) as conn:
        await until_event(conn, "session.created")
        await conn.send({"type": "session.update", "session": SESSION})
        await until_event(conn, "session.updated")
        await ask(conn, "Weather in Rome?")
        item = {
            "type": "function_call",
            "call_id": "call_client_1",
            "name": "get_weather",
            "arguments": '{"city": "Rome"}',
        }
        await conn.send({"type": "conversation.item.create", "item": item})
        created, _ = await until_event(conn, "conversation.item.created")
        assert created.item.type == "function_call" and created.item.call_id == "call_client_1"
        await conn.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "function_call_output",
                    "call_id": "call_client_1",
                    "output": "18 C",
                },
            }
        )
        await until_event(conn, "conversation.item.created")
        await conn.send({"type": "response.create"})
        answered, _ = await until_event(conn, "response.done", timeout=120)
        assert answered.response.status == "completed"
    (conversation,) = conversations
    text = model.tokenizer.decode(prompts[-1], skip_special_tokens=False)
    assert text.endswith(
        "</tool_call><|EOT|><|BOT|>assistant\n<tts_start><tool_call>function\nget_weather\n"
        '{"city": "Rome"}</tool_call><|EOT|><|BOT|>input\n18 C<|EOT|>'
        "<|BOT|>assistant\n<tts_start>"
    )
    assert conversation.reused_tokens[1] >= len(prompts[0])
    await wait_engine_idle(calling_engine)
