"""tests/lint_tests.py: no test under tests/ is one that cannot fail, and the linter finds each kind."""

import textwrap

from tests.lint_tests import TESTS, findings

BAD = """
import pytest


def checks_inside(x):
    assert x


def calls_a_checker(x):
    checks_inside(x)


def test_runs_but_checks_nothing():
    sum([1, 2])


def test_compares_a_value_with_itself():
    x = 3
    assert x == x


def test_only_looks_at_the_file(tmp_path):
    (tmp_path / "a").write_text("x")
    assert (tmp_path / "a").exists() and (tmp_path / "a").stat().st_size > 0


def test_a_helper_two_levels_down_checks():
    calls_a_checker(1)


def test_raises_is_a_check():
    with pytest.raises(ValueError):
        int("x")


def test_assert_close_is_a_check():
    import torch

    torch.testing.assert_close(torch.ones(1), torch.ones(1))
"""


def test_the_suite_has_no_findings():
    found = findings(sorted(TESTS.rglob("*.py")))
    assert not found, "\n".join(found)


def test_each_rule_finds_its_case_and_only_those(tmp_path):
    path = tmp_path / "test_bad.py"
    path.write_text(textwrap.dedent(BAD))
    found = sorted(line.split(": ", 1)[1] for line in findings([path]))
    assert found == [
        "exists-only: test_only_looks_at_the_file only checks that files exist",
        "no-check: test_runs_but_checks_nothing checks nothing",
        "self-compare: x against itself",
    ]
