"""User-facing errors: the CLI prints them without a traceback and exits non-zero."""


class CompileIQError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""

    exit_code = 2


class Interrupted(CompileIQError):
    """The user stopped `tune`; what was measured is stored and the next run resumes."""

    exit_code = 130
