"""Realtime `instructions` and `speed` on a turn-based speech-to-speech model (tiny-glm-voice),
with the official `openai` client and typed turns: the instructions reach the model's prompt
after its output-format system prompt, and a reply played at another speed is truncated in the
time the listener heard. Also response.create's own options (instructions, budget, metadata)
for the one response it starts, to a typed turn and to held ones."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from gateway_testkit import until_event, wait_engine_idle
from realtime_testkit import RATE, append, realtime_client

openai = pytest.importorskip("openai")

# Greedy; replies of 60 tokens (GLM-4-Voice's blocks of 13 text and 26 speech tokens: 34
# speech tokens, 2.72 s, played out in real time), past the 800 ms a truncate keeps.
FAST = {"temperature": 0.0, "max_output_tokens": 60}
INSTRUCTIONS = "Answer like a pirate."


async def test_instructions_and_speed_reach_a_turn_based_model(
    glm_server, glm_engine, conversations
):
    from models.glm_voice.tokens import TEXT_SYSTEM_PROMPT

    model = glm_engine.core.model
    async with realtime_client(glm_server).realtime.connect(model="tiny-glm-voice") as conn:
        await until_event(conn, "session.created")
        session = {
            "type": "realtime",
            "instructions": INSTRUCTIONS,
            "audio": {"input": {"turn_detection": None}, "output": {"speed": 2.0}},
            **FAST,
        }
        await conn.send({"type": "session.update", "session": session})
        updated, _ = await until_event(conn, "session.updated")
        assert updated.session.instructions == INSTRUCTIONS
        assert updated.session.audio.output.speed == 2.0
        await conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Where is the ship?"}],
            }
        )
        await conn.response.create()
        done, seen = await until_event(conn, "response.done")
        assert done.response.status in ("completed", "incomplete")
        audio = b"".join(
            base64.b64decode(e.delta) for e in seen if e.type == "response.output_audio.delta"
        )
        assert len(audio) > 0
        (conversation,) = conversations
        user, reply = conversation.history
        assert user.system == INSTRUCTIONS
        ids = model.preprocess_turns([user]).token_ids
        start = ids.index(model.ids.system) + 1
        system = model.tokenizer.decode(ids[start : ids.index(model.ids.user)])
        assert system == "\n" + TEXT_SYSTEM_PROMPT + " " + INSTRUCTIONS
        spoken = sum(model.ids.is_audio(t) for t in reply.token_ids)
        assert spoken > 10, spoken  # enough of a reply to cut

        # Heard 400 ms at speed 2: 800 ms of the model's audio, 10 speech tokens (12.5/s).
        item = done.response.output[0].id
        await conn.conversation.item.truncate(item_id=item, content_index=0, audio_end_ms=400)
        await until_event(conn, "conversation.item.truncated")
        kept = conversation.history[-1]
        assert sum(model.ids.is_audio(t) for t in kept.token_ids) == 10
    await wait_engine_idle(glm_engine)


async def greedy_session(conn, max_output_tokens: int, **fields) -> None:
    """session.update to greedy sampling with this budget (`fields`: more of the session)."""
    session = {"type": "realtime", "temperature": 0.0, "max_output_tokens": max_output_tokens}
    await conn.send({"type": "session.update", "session": {**session, **fields}})
    await until_event(conn, "session.updated")


async def ask(conn, text: str, **create):
    """A typed user turn, then response.create (`create`: its fields); its response.done."""
    content = [{"type": "input_text", "text": text}]
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": content}
    )
    await conn.response.create(**create)
    done, _ = await until_event(conn, "response.done")
    return done


async def test_a_responses_own_instructions_and_budget_are_for_it_only(
    glm_server, glm_engine, conversations
):
    """response.create's `instructions` go before the user turn it answers, its
    `max_output_tokens` bound that reply; the next turn has the session's (none: the model's
    own system prompt, written again) and the session's budget."""
    from models.glm_voice.tokens import TEXT_SYSTEM_PROMPT

    model = glm_engine.core.model
    async with realtime_client(glm_server).realtime.connect(model="tiny-glm-voice") as conn:
        await until_event(conn, "session.created")
        await greedy_session(conn, 30)
        own = {"instructions": INSTRUCTIONS, "max_output_tokens": 8, "metadata": {"k": "v"}}
        done = await ask(conn, "Where is the ship?", response=own)
        assert done.response.metadata == {"k": "v"}
        assert done.response.status_details.reason == "max_output_tokens"
        done = await ask(conn, "And the crew?")
        assert done.response.metadata is None
        (conversation,) = conversations
        first, short, second, reply = conversation.history
        assert (first.system, second.system) == (INSTRUCTIONS, "")
        assert len(short.token_ids) == 8 < len(reply.token_ids)
        ids = model.preprocess_turns([first, short, second]).token_ids
        systems = [at for at, t in enumerate(ids) if t == model.ids.system]
        users = [at for at, t in enumerate(ids) if t == model.ids.user]
        prompts = [
            model.tokenizer.decode(ids[s + 1 : u]) for s, u in zip(systems, users, strict=True)
        ]
        assert prompts == [
            "\n" + TEXT_SYSTEM_PROMPT + " " + INSTRUCTIONS,
            "\n" + TEXT_SYSTEM_PROMPT,
        ]
    await wait_engine_idle(glm_engine)


async def test_held_turns_are_answered_with_the_responses_own_budget(
    glm_server, glm_engine, conversations
):
    """Manual turns (turn detection off) wait for response.create, whose own budget bounds
    that reply; the next one has the session's."""
    noise = np.random.default_rng(1).standard_normal(RATE) * 0.1  # a second of it
    turn = (noise * 32767).astype("<i2").tobytes()
    async with realtime_client(glm_server).realtime.connect(model="tiny-glm-voice") as conn:
        await until_event(conn, "session.created")
        await greedy_session(conn, 30, audio={"input": {"turn_detection": None}})
        (conversation,) = conversations
        spoken = []
        for create in ({"response": {"max_output_tokens": 8, "metadata": {"k": "v"}}}, {}):
            await append(conn, turn)
            await conn.input_audio_buffer.commit()
            await until_event(conn, "conversation.item.created")
            await conn.response.create(**create)
            done, _ = await until_event(conn, "response.done")
            spoken.append((done.response.metadata, len(conversation.history[-1].token_ids)))
        (metadata, short), (none, longer) = spoken
        assert (metadata, none) == ({"k": "v"}, None) and short == 8 < longer
    await wait_engine_idle(glm_engine)


async def test_delete_takes_items_out_of_what_the_model_hears(
    glm_server, glm_engine, conversations
):
    """A typed message deleted before response.create never reaches the model's prompt; a turn
    already in the history, typed, spoken or the model's reply, is erased in its place: the
    next prompt has nothing of it and the turns still alternate. A turn of two messages goes
    out whole, each of its items deleted."""
    from models.glm_voice.prompt import AssistantTurn, UserTurn

    model = glm_engine.core.model
    noise = np.random.default_rng(2).standard_normal(RATE) * 0.1  # a second of it
    spoken = (noise * 32767).astype("<i2").tobytes()
    async with realtime_client(glm_server).realtime.connect(model="tiny-glm-voice") as conn:
        await until_event(conn, "session.created")
        await greedy_session(conn, 8, audio={"input": {"turn_detection": None}})
        content = [{"type": "input_text", "text": "Skip this parrot."}]
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": content}
        )
        created, _ = await until_event(conn, "conversation.item.created")
        await conn.conversation.item.delete(item_id=created.item.id)
        await until_event(conn, "conversation.item.deleted")
        first = await ask(conn, "Where is the ship?")
        (conversation,) = conversations
        (user, _reply) = conversation.history
        prompt = model.tokenizer.decode(model.preprocess_turns([user]).token_ids)
        assert "ship" in prompt and "parrot" not in prompt

        # A spoken turn (held: turn detection off), answered; then two typed messages as one.
        await append(conn, spoken)
        await conn.input_audio_buffer.commit()
        audio_item, _ = await until_event(conn, "conversation.item.created")
        await conn.response.create()
        await until_event(conn, "response.done")
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [_text("Hoist the sails.")]}
        )
        together, _ = await until_event(conn, "conversation.item.created")
        await ask(conn, "And the crew?")
        assert len(conversation.history) == 6

        await conn.conversation.item.delete(item_id=first.response.output[0].id)
        deleted, _ = await until_event(conn, "conversation.item.deleted")
        assert deleted.item_id == first.response.output[0].id
        await conn.conversation.item.delete(item_id=audio_item.item.id)
        await until_event(conn, "conversation.item.deleted")
        await conn.conversation.item.delete(item_id=together.item.id)
        both = [(await until_event(conn, "conversation.item.deleted"))[0] for _ in range(2)]
        assert both[0].item_id == together.item.id  # and the message answered with it
        await conn.conversation.item.retrieve(item_id=both[1].item_id)
        error, _ = await until_event(conn, "error")
        assert "no item" in error.error.message  # it is gone from the conversation too

        history = list(conversation.history)
        assert history[1] == AssistantTurn(()) and history[2].erased
        assert history[2].speech_tokens == () and history[4].erased  # still a spoken turn
        assert isinstance(history[0], UserTurn) and not history[0].erased
        await ask(conn, "Now the anchor.")
        assert len(conversation.history) == 8
        prompt = model.tokenizer.decode(model.preprocess_turns(conversation.history[:7]).token_ids)
        assert "ship" in prompt and "anchor" in prompt
        assert "sails" not in prompt and "crew" not in prompt
    await wait_engine_idle(glm_engine)


def _text(text: str) -> dict:
    return {"type": "input_text", "text": text}


async def test_an_assistant_message_joins_the_conversation_as_the_models_words(
    glm_server, glm_engine, conversations
):
    """An assistant message is the model's own turn, unanswered and unspoken (a text-to-speech
    model would speak it); the user message before it joins first, unanswered too; the next
    response answers the user message after it, the model having "said" the assistant's."""
    from models.glm_voice.prompt import AssistantTurn, UserTurn

    model = glm_engine.core.model
    async with realtime_client(glm_server).realtime.connect(model="tiny-glm-voice") as conn:
        await until_event(conn, "session.created")
        await greedy_session(conn, 8)
        for role, text in (("user", "Where is the ship?"), ("assistant", "It sank by the reef.")):
            await conn.conversation.item.create(
                item={"type": "message", "role": role, "content": [_text(text)]}
            )
            await until_event(conn, "conversation.item.created")
        done = await ask(conn, "And the crew?")
        assert done.response.status in ("completed", "incomplete")
        (conversation,) = conversations
        asked, said, user, _reply = conversation.history
        assert isinstance(asked, UserTurn) and asked.text == "Where is the ship?"
        said_ids = model.tokenizer.encode("It sank by the reef.", add_special_tokens=False).ids
        assert said == AssistantTurn(tuple(said_ids))
        assert user.text == "And the crew?"
        prompt = model.tokenizer.decode(model.preprocess_turns([asked, said, user]).token_ids)
        assert prompt.index("ship") < prompt.index("reef") < prompt.index("crew")
    await wait_engine_idle(glm_engine)
