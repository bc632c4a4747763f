"""Generated ids: sortable by time, collision-free across processes without coordination.

A ULID-style id: 48 bits of unix milliseconds then 80 random bits, in
lowercase Crockford base32 (26 characters), after a short prefix (``t-`` for
tasks, ``h-`` for handoffs). Ids sort in creation order across processes to
the millisecond; within one process they are strictly increasing (the random
part counts up inside a millisecond). Two processes collide only if they draw
the same 80 random bits in the same millisecond, and a writer that did would
be refused (``duplicate create``) and draw again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford: no i, l, o, u
_RAND_BITS = 80
_lock = threading.Lock()
_last = [0, 0]  # (ms, random) of this process's last id


def _forget() -> None:
    """A forked child must not count on from its parent's last id (both would)."""
    _last[0] = _last[1] = 0


os.register_at_fork(after_in_child=_forget)


def _encode(n: int, width: int) -> str:
    out = []
    for _ in range(width):
        out.append(_ALPHABET[n & 31])
        n >>= 5
    return "".join(reversed(out))


def new_id(prefix: str, clock: Callable[[], float]) -> str:
    """A fresh id ``prefix + 26 characters``; ``clock`` gives unix seconds."""
    ms = max(0, int(clock() * 1000)) & ((1 << 48) - 1)
    with _lock:
        if ms <= _last[0]:  # same (or an earlier: the clock stepped back) millisecond
            ms, rand = _last[0], _last[1] + 1
            if rand >> _RAND_BITS:
                ms, rand = ms + 1, int.from_bytes(os.urandom(10), "big")
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last[0], _last[1] = ms, rand
    return prefix + _encode((ms << _RAND_BITS) | rand, 26)
