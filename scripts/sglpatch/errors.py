"""The one error type the toolkit raises on purpose.

Every refusal is a FatalError: `cli.main` prints its message on one line and exits
with its code. Anything else escaping a command is a bug in the toolkit.
"""

import errno

EXIT_REFUSED = 2


class FatalError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_REFUSED):
        super().__init__(message)
        self.exit_code = exit_code

    def __str__(self) -> str:
        return " ".join(super().__str__().split())


class CorruptState(FatalError):
    """A state file sglpatch wrote (checkout record, journal, rebase state) that cannot be read as one."""


def os_reason(exc: OSError) -> str:
    """Why a file operation failed, in the system's words; a write past `ulimit -f` says so."""
    reason = exc.strerror or str(exc)
    return f"{reason}: past the file-size limit, `ulimit -f`" if exc.errno == errno.EFBIG else reason
