"""ctxledger's command line: a thin click shell (parse, call the library, print).

The group and the error boundary live in :mod:`cli.main`; shared options, the
per-command :class:`cli.options.Ctx` and input types in :mod:`cli.options`;
JSON/text rendering in :mod:`cli.output`. ``docs/cli.md`` is the reference.
"""
