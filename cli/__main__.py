"""``python -m cli``: the same program as the ``ctxledger`` console script."""

from __future__ import annotations

from .main import main

if __name__ == "__main__":
    main()
