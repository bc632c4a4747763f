"""The child of the crash loop: runs operations on a store until it is killed.

``python crash_child.py ROOT SYNC TAG SEED OP[,OP...]``. Prints ``ready``, then
one JSON line per acknowledged event (an :class:`harness.Ack`), written only
after the call that acknowledged it returned.
"""

from __future__ import annotations

import json
import random
import sys

from harness import OPS, config

from projections import ContextStore


def main() -> None:
    root, sync, tag, seed, ops = sys.argv[1:6]
    rng = random.Random(int(seed))
    names = ops.split(",")
    store = ContextStore.open(root, config=config(sync))
    print("ready", flush=True)
    n = 0
    while True:
        for ack in OPS[rng.choice(names)](store, rng, f"{tag}-{n}"):
            sys.stdout.write(json.dumps(ack) + "\n")
        sys.stdout.flush()
        n += 1


if __name__ == "__main__":
    main()
