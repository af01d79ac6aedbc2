"""tests/durations.py: the per-file seconds read from pytest's --durations report, and the longest-first order."""

from tests.durations import file_seconds, longest_first

REPORT = """
============================= slowest durations =============================
12.50s call     tests/cli/test_a.py::test_one[x]
2.00s setup    tests/cli/test_a.py::test_one[x]
0.40s call     tests/b/test_b.py::TestK::test_two
30.00s setup    tests/c/test_c.py::test_three
(10 durations < 0.3s hidden.)
"""


def test_file_seconds_sum_every_phase_of_every_test_per_file():
    assert file_seconds(REPORT) == {"tests/c/test_c.py": 30.0, "tests/cli/test_a.py": 14.5, "tests/b/test_b.py": 0.4}
    assert file_seconds("no report here") == {}


def test_longest_files_first_each_files_tests_in_their_order_unmeasured_last():
    ids = ["a.py::1", "b.py::1", "a.py::2", "new.py::1", "c.py::1", "b.py::2"]
    order = longest_first(ids, {"a.py": 1.0, "b.py": 5.0, "c.py": 2.0})
    assert [ids[i] for i in order] == ["b.py::1", "b.py::2", "c.py::1", "a.py::1", "a.py::2", "new.py::1"]
