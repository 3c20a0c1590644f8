"""What every patch's message must hold (docs/series-format.md, "A patch's message"): the one rule.

`export` refuses a commit that lacks any of it, before writing anything; the test of the project's own
lines (tests/toolkit/test_series_format.py) holds every line's series to the same rule.
"""

from __future__ import annotations

import re

from sglpatch.series import Patch

PARAGRAPHS = ("Why:", "What:", "Drop when:")
TRAILERS = ("Patch-Group", "Drop-When")
PR_TRAILERS = ("Upstream-PR", "Extends-PR")
# A patch that carries or extends no upstream PR says so, with the PRs that tried the same, or "none found".
PRIOR_ART = "Prior-Art"


def missing_parts(patch: Patch) -> list[str]:
    """What `patch`'s message lacks, in words ("a 'What:' paragraph", "a Drop-When trailer"); [] when none."""
    missing = [f"a {name!r} paragraph" for name in PARAGRAPHS if not re.search(rf"(?m)^{re.escape(name)}", patch.body)]
    missing += [f"a {name} trailer" for name in TRAILERS if not patch.trailer(name)]
    cited = [patch.trailer(name) for name in PR_TRAILERS]
    if not any(cited) and not patch.trailer(PRIOR_ART):
        missing.append(f"an {' or '.join(PR_TRAILERS)} trailer, or a {PRIOR_ART} one")
    missing += [
        f"a PR number in its {name} trailer"
        for name, n in zip(PR_TRAILERS, cited, strict=True)
        if n and not n.isdigit()
    ]
    return missing
