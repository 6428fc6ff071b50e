from __future__ import annotations

import os
import subprocess
import sys

import pytest

from loadtune.measure.machine import cpu_quota, fingerprint, shm_free_gb


def test_fingerprint_of_this_machine_is_plausible():
    fp = fingerprint("2.14.1", "")
    assert isinstance(fp["host"], str) and fp["host"]
    assert isinstance(fp["cpu_model"], str) and fp["cpu_model"]
    assert 1 <= fp["cpu_count"] <= (os.cpu_count() or 1)
    assert fp["cpu_quota"] is None or 0 < fp["cpu_quota"] <= (os.cpu_count() or 1)
    assert 0.1 < fp["ram_gb"] < 100_000
    assert fp["shm_free_gb"] is None or fp["shm_free_gb"] >= 0
    assert fp["gpu"] == "" and fp["torch_version"] == "2.14.1"
    assert fp["python_version"].count(".") == 2
    assert fp["start_method"] in ("fork", "spawn", "forkserver")


def usable_cores_pinned_to(cores: set[int]) -> int:
    """usable_cores() in a fresh Python whose affinity mask is set to `cores` first."""
    code = ("import os, sys\n"
            "os.sched_setaffinity(0, {int(c) for c in sys.argv[1:]})\n"
            "from loadtune.measure.machine import usable_cores\n"
            "print(usable_cores())\n")
    done = subprocess.run([sys.executable, "-c", code, *map(str, sorted(cores))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


@pytest.mark.slow  # a process of its own for each mask
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity masks on this platform")
def test_usable_cores_follow_the_affinity_mask():
    allowed = sorted(os.sched_getaffinity(0))
    assert usable_cores_pinned_to({allowed[-1]}) == 1
    if len(allowed) >= 2:
        assert usable_cores_pinned_to(set(allowed[:2])) == 2


def test_cgroup_quota_from_a_faked_cpu_max(tmp_path):
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")
    assert cpu_quota(cpu_max) == 1.5
    cpu_max.write_text("max 100000\n")
    assert cpu_quota(cpu_max) is None
    cpu_max.write_text("50000\n")
    assert cpu_quota(cpu_max) == 0.5
    cpu_max.write_text("garbage here\n")
    assert cpu_quota(cpu_max) is None
    assert cpu_quota(tmp_path / "missing") is None


def test_shm_free_of_a_folder(tmp_path):
    assert shm_free_gb(tmp_path) > 0
    assert shm_free_gb(tmp_path / "missing") is None
