"""Helpers for the headless-Chromium tests of the web demo: Debian's /usr/bin/chromium driven
through python playwright (never `playwright install`), a fresh profile per context, and a
recorder of everything that went wrong on a page."""

from __future__ import annotations

import os

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    return None


def launch(playwright, profile: str, extra_args: tuple[str, ...] = ()):
    """A persistent Chromium context on `profile` (an empty folder)."""
    return playwright.chromium.launch_persistent_context(
        profile,
        executable_path=CHROMIUM,
        headless=True,
        args=[*CHROMIUM_ARGS, *extra_args],
        viewport={"width": 1000, "height": 1100},
    )


class PageProblems:
    """Console errors, uncaught exceptions and failed requests of one page."""

    def __init__(self, page) -> None:
        self.items: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.items.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: self.items.append(f"pageerror: {e}"))
        page.on("requestfailed", lambda r: self.items.append(f"request failed: {r.url}"))
