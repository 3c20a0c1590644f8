"""The one error type the toolkit raises on purpose.

Every refusal is a FatalError: `cli.main` prints its message on one line and exits
with its code. Anything else escaping a command is a bug in the toolkit.
"""

EXIT_REFUSED = 2


class FatalError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_REFUSED):
        super().__init__(message)
        self.exit_code = exit_code

    def __str__(self) -> str:
        return " ".join(super().__str__().split())


class CorruptState(FatalError):
    """A state file sglpatch wrote (checkout record, journal, rebase state) that cannot be read as one."""
