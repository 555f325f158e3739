"""What the core stages tell the user, as a protocol: they need not import the UI.

`progress.Reporter` satisfies it (structurally); tests may pass anything with the two methods.
"""

from __future__ import annotations

from typing import Protocol


class Notes(Protocol):
    def note(self, text: str) -> None:
        """A line of the log."""

    def phase(self, text: str) -> None:
        """What the run does now (the live panel's heading, and a line of the log)."""
