"""What the README asks a reader to type works from a fresh checkout, or says what to make."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_readme_says_what_its_voices_folder_holds():
    """The `--voices-dir voices/` examples name a folder the repository does not ship: the
    README says what goes in it (clips and their transcripts) and links to the option's
    documentation (tests/test_doc_links.py checks that the link resolves)."""
    text = README.read_text(encoding="utf-8")
    assert "--voices-dir voices/" in text
    assert "voices/NAME.wav" in text and "voices/NAME.txt" in text
    assert "(docs/gateway.md#options)" in text
