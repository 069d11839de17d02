"""Every relative link in the README and the docs leads somewhere: the file exists, and a
`#fragment` names a heading of that page (GitHub's anchor rule), so a reader following one
never lands on a page or section that was renamed or removed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped but for - and _, spaces
    to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if not line.startswith("#"):
            continue
        base = anchor(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: outside the repository
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and dest.suffix == ".md" and fragment not in anchors_of(dest):
            broken.append(f"{target} (no such heading in {dest.name})")
    return broken


def test_the_anchor_rule_matches_githubs() -> None:
    assert anchor(" Capacity mode: how many real-time listeners one server holds") == (
        "capacity-mode-how-many-real-time-listeners-one-server-holds"
    )
    assert anchor("`voxgate bench` — the H200 run (≈ 7–8 minutes)") == (
        "voxgate-bench--the-h200-run--78-minutes"
    )


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = {page.name: links for page in PAGES if (links := broken_links(page))}
    assert not broken, f"links that lead nowhere: {broken}"
