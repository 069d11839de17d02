"""The error every loader raises for a missing, incomplete or mismatched checkpoint."""


class CheckpointError(ValueError):
    """The message names the file or tensor at fault and what to do about it."""
