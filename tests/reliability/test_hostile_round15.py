"""The hostile trial of round 15: what round 14 left untried (`pr` under the user's git settings, kills inside git
of `rebase --continue` and `--drop`, the user's `GIT_TEMPLATE_DIR` / `init.templateDir`, special files at a
series path, two `clean` runs at once) (docs/reliability.md, round 15).
"""

from __future__ import annotations

import pytest

from testing.sglang_trees import upstream_branches
from testing.tree_bytes import tree_state


def _template_with_a_refusing_hook(tmp_path):
    """A git template whose reference-transaction hook refuses every ref update (as one guarding the user's
    branches from a stray update does, once its own check says no)."""
    hooks = tmp_path / "template" / "hooks"
    hooks.mkdir(parents=True)
    hook = hooks / "reference-transaction"
    hook.write_text("#!/bin/sh\necho 'refused by my hook' >&2\nexit 1\n")
    hook.chmod(0o755)
    return hooks.parent


@pytest.mark.parametrize("how", ["GIT_TEMPLATE_DIR", "init.templateDir"])
def test_apply_status_rebase_and_revert_go_through_whatever_hooks_the_users_git_template_holds(
    sglpatch, checkout, patches, tmp_path, monkeypatch, how
):
    """A git template of the user's (`GIT_TEMPLATE_DIR`, or `init.templateDir` in ~/.gitconfig: how tools such as
    pre-commit's `init-templatedir` put hooks in every new repository) holding a reference-transaction hook that
    refuses: the toolkit's own scratch repositories were made from it, and apply and rebase failed in one line,
    "`git -C /tmp/sglpatch-ws-... update-ref refs/heads/copied ...` failed (128)", which named no cause (nothing
    changed). Now the toolkit's repositories are made from no template: apply, status, rebase and revert go
    through (apply, status and revert leave the checkout as it was)."""
    template = _template_with_a_refusing_hook(tmp_path)
    if how == "GIT_TEMPLATE_DIR":
        monkeypatch.setenv("GIT_TEMPLATE_DIR", str(template))
    else:
        config = tmp_path / "user-gitconfig"
        config.write_text(f"[user]\n\tuseConfigOnly = true\n[init]\n\ttemplateDir = {template}\n")
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    upstream_branches(checkout, quiet=True)
    before = tree_state(checkout)
    code, out, err = sglpatch("apply", "--sglang", checkout, "--patches", patches)
    assert code == 0, (out, err)
    code, out, err = sglpatch("status", "--sglang", checkout, "--patches", patches)
    assert code == 0 and "the series is in" in out, (out, err)
    assert sglpatch("revert", "--sglang", checkout)[0] == 0
    assert tree_state(checkout) == before
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    args = ("--report-dir", tmp_path / "report", "--onto", "quiet", "--release", "0.5.14")
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--patches", patches, *args)
    assert code == 0 and "rebased onto quiet" in out, (out, err)
