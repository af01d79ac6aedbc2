"""Headless Chromium for the browser test: found at /usr/bin/chromium or installed from Debian's packages."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"


def install_chromium() -> tuple[str | None, str | None]:
    """apt-get install chromium (Debian): (path, None), or (None, why not). A lock file keeps concurrent
    test sessions from running apt-get at the same time; the session fixture runs this at most once."""
    if shutil.which("apt-get") is None:
        return None, (
            "headless Chromium is needed to check report.html, /usr/bin/chromium is missing and there is "
            "no apt-get to install it: install Chromium from your distribution's packages"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "-y", "-q"]
    install = [*apt, "install", "--no-install-recommends", "chromium"]
    t0 = time.perf_counter()
    with open(Path(tempfile.gettempdir()) / "blocklab-chromium-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if Path(CHROMIUM).exists():  # installed meanwhile by another session
            return CHROMIUM, None
        try:
            res = subprocess.run(install, env=env, capture_output=True, text=True, timeout=1200)
            if res.returncode != 0:  # package lists missing or stale: update once, then retry
                subprocess.run([*apt, "update"], env=env, capture_output=True, text=True, timeout=600)
                res = subprocess.run(install, env=env, capture_output=True, text=True, timeout=1200)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"could not install Chromium with `apt-get install chromium`: {e}"
    if res.returncode != 0 or not Path(CHROMIUM).exists():
        tail = " | ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
        return None, (
            "could not install Chromium with `apt-get install chromium` (needed to check report.html "
            f"in a browser; run the tests as root or install it yourself): {tail}"
        )
    print(f"\n[reporting tests] installed chromium in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return CHROMIUM, None


def find_or_install() -> tuple[str | None, str | None]:
    """(path, None), or (None, why it cannot be had)."""
    return (CHROMIUM, None) if Path(CHROMIUM).exists() else install_chromium()


def require(chromium: tuple[str | None, str | None]) -> str:
    """The browser's path. Where none can be had (a machine with no package registry, such as a
    lent GPU box), skip with the reason, except under BLOCKLAB_REQUIRE_BROWSER=1 (set by .ci/run),
    where the missing browser is a failure: CI must never pass this check by skipping it."""
    path, why = chromium
    if path is None:
        if os.environ.get("BLOCKLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return path
