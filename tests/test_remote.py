"""Data over the network: the remote demo's HTTP server (latency, bandwidth, lifetime), its
dataset (pickles without the server), configs/remote.yaml, and a short sweep through the CLI
that leaves no process and no open port behind."""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from loadtune.asked.config import load_config
from loadtune.demo import RemoteJpegs, remote_images, stop_servers
from tests.conftest import ANY_LOAD, MARKER_VAR, run_cli, wait_until

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"min_px": 32, "max_px": 48, "crop_px": 32}  # tiny JPEGs: fast to make and to decode


def port_of(base_url: str) -> int:
    return int(base_url.rsplit(":", 1)[1])


def refuses(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def timed_get(url: str) -> tuple[bytes, float]:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    started = time.perf_counter()
    with opener.open(url, timeout=30) as response:
        data = response.read()
    return data, time.perf_counter() - started


def test_remote_config_loads_and_sweeps_workers_well_above_two_cores():
    cfg = load_config(ROOT / "configs" / "remote.yaml").config
    assert cfg.name == "remote-images" and cfg.dataset.factory == "loadtune.demo:remote_images"
    assert cfg.dataset.kwargs["latency_ms"] > 0 and cfg.dataset.kwargs["mb_per_s"] > 0
    assert max(cfg.sweep["num_workers"]) >= 8
    assert {"prefetch_factor", "persistent_workers"} <= set(cfg.sweep)


def test_the_factory_refuses_impossible_settings(tmp_path):
    with pytest.raises(ValueError, match="latency_ms"):
        remote_images(num_images=2, latency_ms=-1, cache_dir=str(tmp_path), **SMALL)
    with pytest.raises(ValueError, match="mb_per_s"):
        remote_images(num_images=2, mb_per_s=0, cache_dir=str(tmp_path), **SMALL)


@pytest.mark.slow
def test_the_dataset_pickles_without_its_server_and_serves_only_its_folder(tmp_path):
    try:
        dataset = remote_images(num_images=3, latency_ms=1, cache_dir=str(tmp_path), **SMALL)
        again = pickle.loads(pickle.dumps(dataset))  # what a spawned or forkserver worker receives
        assert isinstance(again, RemoteJpegs) and again.base_url == dataset.base_url
        assert set(vars(again)) == {"base_url", "names", "transform", "timeout_s"}
        image, label = again[2]
        assert tuple(image.shape) == (3, 32, 32) and label == 2
        # The same folder and settings share one server in a process.
        assert remote_images(num_images=3, latency_ms=1, cache_dir=str(tmp_path), **SMALL).base_url == dataset.base_url
        for name in ("../" + dataset.names[0], "nothing.jpg", ""):
            with pytest.raises(Exception, match="404"):
                timed_get(f"{dataset.base_url}/{name}")
    finally:
        stop_servers()
    assert refuses(port_of(dataset.base_url))


@pytest.mark.slow
def test_the_server_answers_after_the_latency_at_the_bandwidth_and_ends_with_its_process(tmp_path, marker):
    latency_s, bytes_per_s = 0.2, 20_000
    script = textwrap.dedent(f"""
        import time
        from loadtune.demo import remote_images
        dataset = remote_images(num_images=2, latency_ms={latency_s * 1000}, mb_per_s={bytes_per_s / 1e6},
                                cache_dir={str(tmp_path)!r}, min_px=32, max_px=48, crop_px=32)
        print(dataset.base_url, dataset.names[0], flush=True)
        time.sleep(120)
    """)
    env = {**os.environ, MARKER_VAR: marker, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        base_url, name = proc.stdout.readline().split()
        port = port_of(base_url)
        data, elapsed = timed_get(f"{base_url}/{name}")
        on_disk = next(tmp_path.glob(f"demo-images-*/{name}")).read_bytes()
        assert data == on_disk
        # Lower bounds only: the server waits the latency before the first byte and sends no
        # byte before the link would have carried it.
        assert elapsed >= 0.95 * (latency_s + len(data) / bytes_per_s), elapsed
        assert not refuses(port)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert wait_until(lambda: refuses(port), timeout_s=5)
    # The marker fixture then checks that no process of this test is left.


@pytest.mark.slow
def test_a_short_remote_sweep_runs_every_trial_and_leaves_no_process_or_port(tmp_path, write_config, marker):
    log = tmp_path / "servers.txt"
    (tmp_path / "logged.py").write_text(textwrap.dedent("""
        import os
        from loadtune.demo import remote_images

        def remote(log, **kwargs):
            dataset = remote_images(**kwargs)
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {dataset.base_url}\\n")
            return dataset
    """))
    config = {
        "name": "tiny-remote",
        "dataset": {"factory": "logged.py:remote",
                    "kwargs": {"log": str(log), "num_images": 24, "latency_ms": 5, "mb_per_s": 50,
                               "cache_dir": str(tmp_path / "cache"), **SMALL}},
        "loader": {"batch_size": 4, "num_workers": 1, "prefetch_factor": 2},
        "sweep": {"num_workers": [0]},
        "step": {"sleep_s": 0.005},
        "measure": {"warmup_batches": 1, "batches": 6, "repeats": 1, "timeout_s": 60, "max_outside_cpu": ANY_LOAD},
        "device": "cpu",
    }
    out = tmp_path / "out.csv"
    # Run from the factory file's folder, as a user would: the trial server then imports it (and
    # torchvision, through loadtune.demo) once. From elsewhere, on Python 3.11, the server does
    # not find it and every trial process imports it again, two seconds each.
    result = run_cli("sweep", str(write_config(config)), "--out", str(out), "--json", cwd=tmp_path, marker=marker)
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(out)
    assert {"baseline", "num_workers=0"} <= set(df.trial)
    assert (df.status == "ok").all(), df[["trial", "status", "reason"]].to_string()
    assert json.loads(result.stdout)["recommended"]["trial"] in set(df.trial)
    # Every process that called the factory started a server of its own, in itself (the
    # preflight and each trial process; DataLoader workers start none), and each port is closed.
    started = [line.split() for line in log.read_text().splitlines()]
    assert len(started) >= len(df)
    for _, base_url in started:
        assert refuses(port_of(base_url)), base_url
