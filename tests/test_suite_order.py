"""`make test` runs each file whole on one worker (`--dist loadfile`): the files of SLOW_FIRST
(tests/conftest.py) must be handed out first, or one of them started last keeps a worker busy
long after the others ran out of files."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_slowest_files_are_handed_out_first_whatever_their_number_of_tests(tmp_path):
    """A file of SLOW_FIRST (one of its quick tests selected) before a file of several tests:
    pytest-xdist's default hands out the files with the most tests first. The inner run's temporary
    folders stay in this test's: under pytest's own root it would delete the oldest of them, another
    whole run's (GBs; that took this test from 3 s to 48)."""
    slow = "tests/test_run_cli.py::test_first_day_is_the_setting_else_the_archive_s_else_today"
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "--dist", "loadfile",
                          f"--basetemp={tmp_path / 'inner'}", "-v", "tests/test_function_length.py", slow],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:]
    ran = re.findall(r"PASSED (tests/[\w.]+)::", out.stdout)
    assert len(ran) > 2 and ran[0] == "tests/test_run_cli.py", ran
