"""Realtime `instructions` and `speed` on a turn-based speech-to-speech model (tiny-glm-voice),
with the official `openai` client and typed turns: the instructions reach the model's prompt
after its output-format system prompt, and a reply played at another speed is truncated in the
time the listener heard."""

from __future__ import annotations

import base64

import pytest
from gateway_testkit import until_event, wait_engine_idle
from realtime_testkit import realtime_client

openai = pytest.importorskip("openai")

FAST = {"temperature": 0.0, "max_output_tokens": 120}
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
