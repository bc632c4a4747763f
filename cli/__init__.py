"""ctxledger's command line: a thin click shell (parse, call the library, print).

The group and the error boundary live in :mod:`cli.main`; shared options, the
per-command :class:`cli.options.Ctx` and help examples in :mod:`cli.options`;
the input rules (one click type per kind of value) in :mod:`cli.inputs`;
JSON/text rendering and the escaping of text for people in :mod:`cli.output`.
``docs/cli.md`` is the reference.
"""
