"""User-facing errors: the CLI prints them without a traceback and exits non-zero."""


class CompileIQError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""

    exit_code = 2
