"""`pr`'s lint (upstream/hygiene.py) on a real repository: the findings are sglang's CI's, whatever the user's
own settings for the same tools say."""

from __future__ import annotations

import pytest

from sglpatch.errors import FatalError
from sglpatch.git import init_repo
from sglpatch.upstream.hygiene import check_hygiene

BASE = "def f(a, b):\n    return a + b\n"
# black at 88 columns splits the call; codespell knows "teh"
TIP = (
    BASE
    + "\n\nvalue = f(1000000000000000000000000000000, 2000000000000000000000000000000000000000000000000)  # teh sum\n"
)


@pytest.fixture
def branch(tmp_path):
    git = init_repo(tmp_path / "repo").as_sglpatch()
    for text in (BASE, TIP):
        (tmp_path / "repo" / "mod.py").write_text(text)
        git.run("add", "mod.py")
        git.run("commit", "-q", "-m", "step")
    return git


def test_the_users_own_tool_settings_hide_no_finding(branch, tmp_path, monkeypatch):
    """A user's ~/.config/black (line-length 200) and a .codespellrc ignoring "teh" in the folder `pr` runs from,
    and an .isort.cfg there: before, black and codespell read them and the branch passed a lint sglang's CI fails."""
    home, here = tmp_path / "home", tmp_path / "here"
    (home / ".config").mkdir(parents=True)
    (home / ".config" / "black").write_text("[tool.black]\nline-length = 200\n")
    here.mkdir()
    (here / ".codespellrc").write_text("[codespell]\nignore-words-list = teh\n")
    (here / ".isort.cfg").write_text("[settings]\nskip_glob = *\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.chdir(here)
    with pytest.raises(FatalError) as refused:
        check_hygiene(branch, "HEAD~1", "HEAD", "test")
    assert "black would reformat in mod.py" in str(refused.value) and "codespell teh in mod.py" in str(refused.value)
