from __future__ import annotations

import os

from loadtune.machine import cpu_quota, fingerprint, shm_free_gb, usable_cores


def test_fingerprint_of_this_machine_is_plausible():
    fp = fingerprint()
    assert isinstance(fp["host"], str) and fp["host"]
    assert isinstance(fp["cpu_model"], str) and fp["cpu_model"]
    assert 1 <= fp["cpu_count"] <= (os.cpu_count() or 1)
    assert fp["cpu_quota"] is None or 0 < fp["cpu_quota"] <= (os.cpu_count() or 1)
    assert 0.1 < fp["ram_gb"] < 100_000
    assert fp["shm_free_gb"] is None or fp["shm_free_gb"] >= 0
    assert isinstance(fp["gpu"], str)
    assert fp["torch_version"][0].isdigit() and fp["python_version"].count(".") == 2
    assert fp["start_method"] in ("fork", "spawn", "forkserver")


def test_usable_cores_follow_the_affinity_mask():
    assert usable_cores() == len(os.sched_getaffinity(0))


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
