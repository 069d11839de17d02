"""The error every loader raises for a missing, incomplete or mismatched checkpoint."""


class CheckpointError(ValueError):
    """The message names the file or tensor at fault and what to do about it."""


def one_line(text: str) -> str:
    """`text` with its line breaks as spaces. `voxgate serve` shows the first line of a
    configuration error only, so a message quoting another library's error (huggingface_hub's
    span several lines) puts it on one line, ahead of the advice that follows it."""
    return " ".join(text.split())


def check_state_dict(expected: dict, state: dict, what: str) -> None:
    """Compare checkpoint tensors with a model's state dict before loading. load_state_dict
    (strict=True) would also refuse, but in one long RuntimeError; this names the first few
    missing, unexpected and mis-shaped tensors. `what` says whose tensors these are."""
    missing = [n for n in expected if n not in state]
    unexpected = [n for n in state if n not in expected]
    wrong = [
        f"{n} {tuple(state[n].shape)} (config wants {tuple(t.shape)})"
        for n, t in expected.items()
        if n in state and state[n].shape != t.shape
    ]
    problems = [
        f"{kind}: {', '.join(names[:5])}{' …' if len(names) > 5 else ''} ({len(names)} in all)"
        for kind, names in (("missing", missing), ("unexpected", unexpected), ("shape", wrong))
        if names
    ]
    if problems:
        raise CheckpointError(
            f"{what} do not match the model built from its config: {'; '.join(problems)}. "
            "Check that config.json belongs to these weights, or re-download the checkpoint."
        )
