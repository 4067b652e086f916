"""Stop strings over a stream of text pieces.

Text that could still turn out to be the start of a stop string is held back, so a stop string (or a
prefix of one) is never emitted, even when the model produces it across several tokens.
"""
from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    """Feed decoded pieces; get back the text that is safe to emit."""

    def __init__(self, stops: Sequence[str]):
        self.stops = tuple(stops)
        self._pending = ""     # decoded, not yet emitted
        self.stopped = False

    def feed(self, piece: str) -> str:
        """Add `piece`; return what can be emitted now. Sets `stopped` when a stop string completed."""
        if self.stopped:
            return ""
        text = self._pending + piece
        if not self.stops:
            self._pending = ""
            return text
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._pending = ""
            return text[:cut]
        hold = self._partial_suffix(text)
        self._pending = text[len(text) - hold:] if hold else ""
        return text[:len(text) - hold]

    def flush(self) -> str:
        """At the end of generation nothing more can complete a match: release what was held."""
        text, self._pending = self._pending, ""
        return "" if self.stopped else text

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
        best = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:n]):
                    best = n
                    break
        return best
