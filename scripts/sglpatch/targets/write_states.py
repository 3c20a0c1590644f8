"""Where a write to a target stands: one set of names for the checkout record and the package journal.

Written before the first write ("applying", "reverting") and after the last ("applied"), so a run cut
short in between is found, and finished or undone, by `sglpatch recover`.
"""

from enum import StrEnum


class WriteState(StrEnum):
    APPLYING = "applying"
    APPLIED = "applied"
    REVERTING = "reverting"


INTERRUPTED = (WriteState.APPLYING, WriteState.REVERTING)
