"""The inline cache's refusals advise what is safe: a private folder of one's own, never a chmod of a
folder others share (CUDALAB_CACHE=/tmp used to be answered with `chmod go-w /tmp`)."""

from __future__ import annotations

import pytest

from harness.compile import jit


def test_a_shared_cudalab_cache_is_answered_with_a_private_folder(monkeypatch):
    # /tmp: writable by everyone (and, for anyone but root, owned by root): refused either way.
    monkeypatch.setenv("CUDALAB_CACHE", "/tmp")
    with pytest.raises(jit.InlineCacheError) as ei:
        jit.cache_folder()
    line = str(ei.value)
    assert "\n" not in line and line.startswith("CUDALAB_CACHE=/tmp: ")
    assert "chmod" not in line, line
    assert "mkdir -m 700" in line and "export CUDALAB_CACHE=" in line, line


def test_the_default_cache_made_writable_by_others_may_be_made_private_again(monkeypatch, tmp_path):
    """The lab's own default folder is the user's: there, `chmod go-w` is the fix."""
    monkeypatch.delenv("CUDALAB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "cudalab" / "inline"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    with pytest.raises(jit.InlineCacheError, match="other users can write it") as ei:
        jit.cache_folder()
    assert f"`chmod go-w {folder}`" in str(ei.value)
