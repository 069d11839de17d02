"""Step-Audio 2's tool calls as text, torch-free: the tools message, the call syntax and its
incremental parser, the tool-result message.

The published chat format (stepfun-ai/Step-Audio2 examples.py `tool_call_test`, and StepFun's
vLLM `step_audio_2` tool parser):

    <|BOT|>system\\n{system prompt}<|EOT|>
    <|BOT|>tool_json_schemas\\n[{"type": "function", "function": {"name": …, "description": …,
        "parameters": {…}}}, …]<|EOT|>                      (right after the system message)
    <|BOT|>human\\n…<|EOT|>
    <|BOT|>assistant\\n<tts_start>{reply: text and speech, then}
        <tool_call>function\\n{name}\\n{arguments: a JSON object}</tool_call><|EOT|>
    <|BOT|>input\\n{the tool's result}<|EOT|>
    <|BOT|>assistant\\n<tts_start>{the answer from it}

The reply that makes the call is kept whole (its speech tokens too) as the assistant message;
several calls may follow one another, and text may follow a call. This module writes the
message contents and parses calls out of reply text; models/step_audio2/prompt.py puts them in
the prompt."""

from __future__ import annotations

import json
from collections.abc import Sequence

from models.tool_calls import (
    CallArguments,
    CallDone,
    CallMalformed,
    CallStarted,
    FunctionTool,
    ParsedPiece,
    ReplyText,
)

TOOLS_ROLE = "tool_json_schemas"  # the message that lists the tools
TOOL_RESULT_ROLE = "input"  # the message that carries a tool's result
CALL_START, CALL_END = "<tool_call>", "</tool_call>"
CALL_KIND = "function"  # the first line of a call
MAX_HEAD_CHARS = 256  # "function\n{name}\n": longer means this is not a call
MAX_ARGUMENT_CHARS = 65536  # one call's arguments, bounding what a reply can make us hold
HEAD_ERROR = f"a call must be {CALL_KIND!r}, then the function's name, then its arguments, each on a line of its own"


def tools_json(tools: Sequence[FunctionTool]) -> str:
    """The tools message's content: the tools as OpenAI chat `tools` (each under `function`),
    written as StepFun's example writes them (json.dumps' default separators, non-ASCII kept)."""
    listed = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            },
        }
        for t in tools
    ]
    return json.dumps(listed, ensure_ascii=False)


def call_text(name: str, arguments: str) -> str:
    """A call as the model writes it in its reply."""
    return f"{CALL_START}{CALL_KIND}\n{name}\n{arguments}{CALL_END}"


def _held_back(text: str, tag: str) -> int:
    """How many characters at the end of `text` could be the start of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class StepAudio2CallParser:
    """Reply text, fed in any pieces, → ReplyText / CallStarted / CallArguments / CallDone /
    CallMalformed (models/tool_calls.py). Text outside calls is held back only while it could
    be the start of `<tool_call>`; a call's arguments stream as they come, held back only while
    they could be the start of `</tool_call>`. A call is malformed when its first line is not
    `function`, its name is not one of `names`, its arguments are not a JSON object (or grow
    past MAX_ARGUMENT_CHARS), or the reply ends inside it."""

    def __init__(self, names: frozenset[str]) -> None:
        self._names = names
        self._buf = ""  # text not yet handed back
        self._state = "text"  # text | head | args | skip (a malformed call, up to its end)
        self._raw: list[str] = []  # the current call's text after <tool_call>, bounded
        self._raw_len = 0
        self._name = ""
        self._args: list[str] = []  # the current call's arguments so far
        self._args_len = 0
        self._started = False  # a CallStarted went out for the current call
        self._why = ""  # skip: why the call is malformed

    def feed(self, text: str) -> list[ParsedPiece]:
        self._buf += text
        out: list[ParsedPiece] = []
        while self._step(out):
            pass
        return out

    def finish(self) -> list[ParsedPiece]:
        out: list[ParsedPiece] = []
        if self._state == "text":
            if self._buf:
                out.append(ReplyText(self._buf))
        else:
            why = self._why if self._state == "skip" else "the reply ended inside the call"
            self._keep_raw(self._buf)
            out.append(CallMalformed(why, self._raw_text(), self._started))
        self._buf, self._state = "", "text"
        return out

    # --- one step: True while it made progress ---------------------------------------------
    def _step(self, out: list[ParsedPiece]) -> bool:
        if self._state == "text":
            return self._text(out)
        if self._state == "head":
            return self._head(out)
        if self._state == "args":
            return self._arguments(out)
        return self._skip(out)

    def _text(self, out: list[ParsedPiece]) -> bool:
        at = self._buf.find(CALL_START)
        if at < 0:
            ready = self._buf[: len(self._buf) - _held_back(self._buf, CALL_START)]
            if ready:
                out.append(ReplyText(ready))
            self._buf = self._buf[len(ready) :]
            return False
        if at:
            out.append(ReplyText(self._buf[:at]))
        self._buf = self._buf[at + len(CALL_START) :]
        self._state, self._raw, self._raw_len = "head", [], 0
        self._name, self._args, self._args_len, self._started = "", [], 0, False
        return True

    def _head(self, out: list[ParsedPiece]) -> bool:
        """`function\\n{name}\\n`: wait for both lines, then judge the call. Whitespace
        before `function` and around the name is let pass (StepFun's parser strips them)."""
        lead = len(self._buf) - len(self._buf.lstrip())
        if lead:
            self._keep_raw(self._buf[:lead])
            self._buf = self._buf[lead:]
        lines = self._buf.split("\n", 2)
        head_len = len(lines[0]) + len(lines[1]) + 2 if len(lines) == 3 else len(self._buf)
        first_line_done = len(lines) > 1
        if (
            CALL_END in self._buf[:head_len]
            or head_len > MAX_HEAD_CHARS
            or (first_line_done and lines[0] != CALL_KIND)
            or not CALL_KIND.startswith(lines[0])
        ):
            return self._malformed(HEAD_ERROR)
        if len(lines) < 3:
            return False
        name = lines[1].strip()
        if name not in self._names:
            return self._malformed(f"the model called {name[:64]!r}, which is not a session tool")
        self._keep_raw(self._buf[:head_len])
        self._buf, self._state = lines[2], "args"
        self._name, self._started = name, True
        out.append(CallStarted(name))
        return True

    def _arguments(self, out: list[ParsedPiece]) -> bool:
        at = self._buf.find(CALL_END)
        if at < 0:
            piece = self._buf[: len(self._buf) - _held_back(self._buf, CALL_END)]
        else:
            piece = self._buf[:at]
        if self._args_len + len(piece) > MAX_ARGUMENT_CHARS:
            return self._malformed("the call's arguments are too long")
        if piece:
            self._args_len += len(piece)
            self._args.append(piece)
            self._keep_raw(piece)
            out.append(CallArguments(piece))
            self._buf = self._buf[len(piece) :]
        if at < 0:
            return False
        self._buf = self._buf[len(CALL_END) :]
        arguments = "".join(self._args)
        self._state = "text"
        if _is_json_object(arguments):
            out.append(CallDone(self._name, arguments))
        else:
            why = "the call's arguments are not a JSON object"
            out.append(CallMalformed(why, self._raw_text() + CALL_END, True))
        return True

    def _malformed(self, why: str) -> bool:
        self._state, self._why = "skip", why
        return True

    def _skip(self, out: list[ParsedPiece]) -> bool:
        """A call that cannot be honoured: read to its end tag, its text kept (bounded)."""
        at = self._buf.find(CALL_END)
        if at < 0:
            ready = self._buf[: len(self._buf) - _held_back(self._buf, CALL_END)]
            self._keep_raw(ready)
            self._buf = self._buf[len(ready) :]
            return False
        self._keep_raw(self._buf[:at])
        self._buf = self._buf[at + len(CALL_END) :]
        out.append(CallMalformed(self._why, self._raw_text() + CALL_END, self._started))
        self._state = "text"
        return True

    def _keep_raw(self, text: str) -> None:
        room = MAX_HEAD_CHARS + MAX_ARGUMENT_CHARS - self._raw_len
        if room > 0 and text:
            self._raw.append(text[:room])
            self._raw_len += min(len(text), room)

    def _raw_text(self) -> str:
        return CALL_START + "".join(self._raw)


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False
