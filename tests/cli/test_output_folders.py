"""`blocklab compare` and `blocklab report` with an output folder that cannot take their files: one line
naming the folder and what to do, before any run is trained or any figure drawn."""

import errno

import pytest

from blocklab.cli import main


def _refuse_writes(monkeypatch, code):
    def refuse(self, data):  # tests run as root: permission bits would not stop the write
        raise OSError(code, "refused", str(self))

    monkeypatch.setattr("pathlib.Path.write_bytes", refuse)


@pytest.mark.parametrize("code, words", [(errno.EROFS, "choose another path"), (errno.ENOSPC, "free some space")])
def test_compare_checks_its_folder_first(tmp_path, capsys, monkeypatch, code, words):
    monkeypatch.setattr("blocklab.experiments.jobs.run_many", lambda *a, **k: pytest.fail("trained"))
    _refuse_writes(monkeypatch, code)
    assert main(["compare", "--preset", "quick", "--out", str(tmp_path / "sweep")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert words in err[-1] and str(tmp_path / "sweep") in err[-1] and "Traceback" not in "".join(err)


def test_report_into_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["report", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a file, not a folder" in err and "\n" not in err


@pytest.mark.parametrize("code, words", [(errno.EROFS, "choose another path"), (errno.ENOSPC, "free some space")])
def test_report_checks_its_folder_before_drawing(tmp_path, capsys, monkeypatch, code, words):
    monkeypatch.setattr("blocklab.reporting.generate_report", lambda *a, **k: pytest.fail("drawn"))
    _refuse_writes(monkeypatch, code)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and str(tmp_path) in err and "\n" not in err
