import errno

import pytest

from blocklab.atomic import writable_dir, write_atomic
from blocklab.errors import UserError


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    p = write_atomic(tmp_path / "a" / "f.txt", "one")
    write_atomic(p, "two")
    assert p.read_text() == "two"
    assert [q.name for q in p.parent.iterdir()] == ["f.txt"]


def test_writable_dir_creates_the_folder_and_leaves_nothing_in_it(tmp_path):
    d = writable_dir(tmp_path / "x" / "y")
    assert d.is_dir() and list(d.iterdir()) == []


@pytest.mark.parametrize("sub", ["", "below"])
def test_a_file_in_the_path_is_one_line(tmp_path, sub):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(UserError, match=r"^output folder .*f.* (is a file|cannot be written)"):
        writable_dir(f / sub if sub else f)


@pytest.mark.parametrize("code, words", [(errno.EACCES, "permissions"), (errno.ENOSPC, "free some space")])
def test_an_unwritable_or_full_folder_says_what_to_do(tmp_path, monkeypatch, code, words):
    # Tests run as root, whom permission bits do not stop: the write itself is made to fail.
    def refuse(self, data):
        raise OSError(code, "refused", str(self))

    monkeypatch.setattr("pathlib.Path.write_bytes", refuse)
    with pytest.raises(UserError, match=words) as e:
        writable_dir(tmp_path / "out", "run folder")
    assert "\n" not in str(e.value) and str(e.value).startswith(f"run folder {tmp_path / 'out'}")
