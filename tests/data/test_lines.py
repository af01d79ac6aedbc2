"""blocklab.data.lines: the one UTF-8 line reader (.tsv / .jsonl data, `blocklab translate --input`)."""

import io
import sys

import pytest

from blocklab.data.lines import decode_utf8, read_bytes, read_lines, split_lines
from blocklab.errors import UserError


def test_lines_end_at_newlines_and_a_final_newline_adds_no_empty_line():
    assert split_lines("a\nb\n") == ["a", "b"]
    assert split_lines("a\nb") == ["a", "b"]
    assert split_lines("a\n\nb\n\n") == ["a", "", "b", ""]
    assert split_lines("") == [] and split_lines("\n") == [""]
    # "\r" stays (the callers strip it); other Unicode line breaks are text inside a line
    assert split_lines("a\r\nb\u2028c\x0cd\n") == ["a\r", "b\u2028c\x0cd"]


def test_read_lines_of_a_file(tmp_path):
    f = tmp_path / "in.txt"
    f.write_bytes("Grüße\tgreetings\n\nzwei\n".encode())
    assert read_lines(f) == ["Grüße\tgreetings", "", "zwei"]
    assert read_lines(str(f), "--input") == ["Grüße\tgreetings", "", "zwei"]


def test_read_lines_of_standard_input(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"eins\nzwei\n")))
    assert read_lines(None) == ["eins", "zwei"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ok\n\xff\n")))
    with pytest.raises(UserError, match=r"^standard input line 2: not valid UTF-8$"):
        read_lines(None)


def test_bad_utf8_names_the_file_and_the_line(tmp_path):
    f = tmp_path / "bad.tsv"
    f.write_bytes("gut\tgood\nschön\tnice\n".encode("latin-1"))
    with pytest.raises(UserError) as e:
        read_lines(f)
    assert str(e.value) == f"{f} line 2: not valid UTF-8"
    with pytest.raises(UserError, match=r"^x line 1: not valid UTF-8$"):
        decode_utf8(b"\xc3", "x")


def test_an_unreadable_file_is_named_as_the_caller_says(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(UserError, match=r"^cannot read data file .*missing\.txt: No such file"):
        read_lines(missing)
    with pytest.raises(UserError, match=r"^cannot read --input .*missing\.txt: No such file"):
        read_lines(missing, "--input")
    with pytest.raises(UserError, match="cannot read data file"):
        read_bytes(tmp_path)  # a folder
