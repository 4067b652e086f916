"""Stop strings over a stream of text pieces, in time linear in the text.

Text that could still turn out to be the start of a stop string is held back, so a stop string (or a
prefix of one) is never emitted, even when the model produces it across several tokens. Generation stops
at the first stop string to be completed (the earliest end; of several ending there, the longest), and
the text before it is emitted.

The matcher is an Aho-Corasick automaton over the stop strings, fed one character at a time: each character
costs O(1) amortized whatever the number and length of the stops, and the automaton's state depth is
exactly the held-back text (the longest suffix that is a prefix of some stop string). Stops are limited
in number and length (`oxigpu.limits.MAX_STOP_STRINGS`, `MAX_STOP_CHARS`), which bounds the automaton.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from ..errors import InvalidParameterError
from ..limits import MAX_STOP_CHARS, MAX_STOP_STRINGS


def check_stops(stops: Sequence[object]) -> None:
    """Raise InvalidParameterError unless `stops` are at most MAX_STOP_STRINGS non-empty strings of at most
    MAX_STOP_CHARS characters each."""
    if len(stops) > MAX_STOP_STRINGS:
        raise InvalidParameterError(f"at most {MAX_STOP_STRINGS} stop strings are allowed, got {len(stops)}")
    for s in stops:
        if not isinstance(s, str) or not s:
            raise InvalidParameterError(f"stop strings must be non-empty strings, got {s!r}")
        if len(s) > MAX_STOP_CHARS:
            raise InvalidParameterError(f"a stop string may hold at most {MAX_STOP_CHARS} characters, got one "
                                        f"of {len(s)}")


class StopMatcher:
    """Feed decoded pieces; get back the text that is safe to emit."""

    def __init__(self, stops: Sequence[str]):
        check_stops(stops)
        self.stops = tuple(stops)
        self._held: deque[str] = deque()   # decoded, not yet emitted: always the text of the automaton's state
        self.stopped = False
        # the trie: node 0 is the root; _goto[node][char] -> node, _depth = length of the node's string,
        # _fail = the longest proper suffix that is also a trie node, _match = the length of the longest
        # stop string that is a suffix of the node's string (0: none)
        self._goto: list[dict[str, int]] = [{}]
        self._depth, self._fail, self._match = [0], [0], [0]
        for s in self.stops:
            node = 0
            for ch in s:
                nxt = self._goto[node].get(ch)
                if nxt is None:
                    nxt = len(self._goto)
                    self._goto[node][ch] = nxt
                    self._goto.append({})
                    self._depth.append(self._depth[node] + 1)
                    self._fail.append(0)
                    self._match.append(0)
                node = nxt
            self._match[node] = len(s)
        queue = deque(self._goto[0].values())
        while queue:   # breadth first: a node's failure link is set before its children need it
            node = queue.popleft()
            for ch, child in self._goto[node].items():
                f = self._fail[node]
                while f and ch not in self._goto[f]:
                    f = self._fail[f]
                self._fail[child] = self._goto[f].get(ch, 0)
                self._match[child] = self._match[child] or self._match[self._fail[child]]
                queue.append(child)
        self._state = 0

    def feed(self, piece: str) -> str:
        """Add `piece`; return what can be emitted now. Sets `stopped` when a stop string completed."""
        if self.stopped:
            return ""
        if not self.stops:
            return piece
        goto, fail, match, held = self._goto, self._fail, self._match, self._held
        state = self._state
        for ch in piece:
            while state and ch not in goto[state]:
                state = fail[state]
            state = goto[state].get(ch, 0)
            held.append(ch)
            if match[state]:
                self.stopped, self._state = True, 0
                out = self._release(len(held) - match[state])
                held.clear()
                return out
        self._state = state
        return self._release(len(held) - self._depth[state])

    def _release(self, n: int) -> str:
        """The first n held characters, removed from the hold."""
        held = self._held
        return "".join([held.popleft() for _ in range(n)])

    def flush(self) -> str:
        """At the end of generation nothing more can complete a match: release what was held."""
        text = "" if self.stopped else "".join(self._held)
        self._held.clear()
        self._state = 0
        return text
