"""A log backend over a NATS JetStream stream (the optional ``jetstream`` extra).

Importing this package needs ``nats-py``; without it the import raises a
:class:`~eventstore.errors.LedgerError` saying which extra to install.
"""

from .log import DEFAULT_FAILOVER_TIMEOUT, JetStreamLog

__all__ = ["DEFAULT_FAILOVER_TIMEOUT", "JetStreamLog"]
