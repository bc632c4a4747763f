"""ctxledger over the Model Context Protocol: ``ctxledger mcp`` serves a store over stdio.

Needs the ``mcp`` extra (``pip install 'ctxledger[mcp]'``): importing this
package without it raises ImportError, which ``ctxledger mcp`` turns into one
line saying how to install it. docs/mcp.md lists the tools and resources.
"""

from .server import build_server, serve

__all__ = ["build_server", "serve"]
