"""Special tokens by name: a missing one is a checkpoint error naming the model, and a numbered
run of tokens ends where the ids stop being consecutive."""

import pytest

from models.checkpoint_errors import CheckpointError
from models.special_tokens import numbered_run, special_id


class Vocab:
    def __init__(self, ids: dict[str, int]) -> None:
        self.ids = ids

    def token_to_id(self, name: str) -> int | None:
        return self.ids.get(name)


def test_a_missing_special_token_names_the_model_and_the_token():
    with pytest.raises(CheckpointError, match="lacks Step-Audio 2's special token <tts_end>"):
        special_id(Vocab({"<tts_start>": 5}), "<tts_end>", "Step-Audio 2")
    assert special_id(Vocab({"<tts_start>": 5}), "<tts_start>", "Step-Audio 2") == 5


def test_a_numbered_run_stops_at_the_first_id_out_of_sequence():
    ids = {"<a0>": 100, "<a1>": 101, "<a2>": 102, "<a3>": 7, "<a4>": 104}
    assert numbered_run(Vocab(ids), lambda i: f"<a{i}>", "m") == (100, 3)
    with pytest.raises(CheckpointError, match="<a0>"):
        numbered_run(Vocab({}), lambda i: f"<a{i}>", "m")
