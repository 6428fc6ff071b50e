"""The built-in demo: real JPEG files on disk, decoded and augmented like an image pipeline.

The images are generated once with Pillow into a cache folder (no download) and reused;
each sample is a real file read, a JPEG decode, a random resized crop, a flip, and
normalisation, the decode-resize-normalise work of a real vision training loop.

`remote_images` serves the same files over HTTP from a local server with a set latency per
request and bandwidth per connection, for data on network storage: each sample is a GET.
"""

from __future__ import annotations

import atexit
import io
import os
import socketserver
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torchvision import transforms as T  # type: ignore[import-untyped]
from torchvision.datasets import ImageFolder  # type: ignore[import-untyped]

DEFAULT_CACHE = Path(os.environ.get("LOADTUNE_CACHE", Path.home() / ".cache" / "loadtune"))
CLASSES = 10
JPEG_QUALITY = 90
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _make_image(index: int, seed: int, min_px: int, max_px: int) -> Any:
    rng = np.random.default_rng((seed, index))
    width, height = (int(v) for v in rng.integers(min_px, max_px + 1, size=2))
    coarse = rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
    texture = rng.normal(0, 12, size=smooth.shape).astype(np.int16)
    return Image.fromarray(np.clip(smooth + texture, 0, 255).astype(np.uint8))


def ensure_images(num_images: int, folder: Path, seed: int = 0, min_px: int = 300, max_px: int = 900) -> np.ndarray:
    """Paths of `num_images` JPEGs in `folder`, generating the missing ones (deterministically)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = np.array([str(folder / f"img_{i:06d}.jpg") for i in range(num_images)])
    for i, path in enumerate(paths):
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            _make_image(i, seed, min_px, max_px).save(tmp, format="JPEG", quality=JPEG_QUALITY)
            os.replace(tmp, path)  # atomic: concurrent generators never see half a file
    return paths


def image_transform(crop_px: int = 224, train: bool = True) -> Any:
    augment = [T.RandomResizedCrop(crop_px), T.RandomHorizontalFlip()] if train else \
        [T.Resize(crop_px), T.CenterCrop(crop_px)]
    return T.Compose([*augment, T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


class JpegFiles:
    """A map-style dataset of JPEG files: (normalised image tensor, class label).

    Paths are held in a numpy array, not a Python list, so reading them in many workers does
    not copy pages (the copy-on-read growth of pytorch issue 13246).
    """

    def __init__(self, paths: np.ndarray, transform: Any) -> None:
        self.paths = paths
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        with Image.open(self.paths[index]) as image:
            sample = self.transform(image.convert("RGB"))
        return sample, index % CLASSES


def synthetic_images(num_images: int = 1000, crop_px: int = 224, min_px: int = 300, max_px: int = 900,
                     seed: int = 0, cache_dir: str | None = None) -> JpegFiles:
    """The demo dataset factory: `num_images` JPEGs of min_px..max_px sides, cached on disk."""
    return JpegFiles(_demo_images(num_images, min_px, max_px, seed, cache_dir), image_transform(crop_px))


def _demo_images(num_images: int, min_px: int, max_px: int, seed: int, cache_dir: str | None) -> np.ndarray:
    if num_images < 1:
        raise ValueError(f"num_images must be at least 1, got {num_images}")
    if not 16 <= min_px <= max_px:
        raise ValueError(f"need 16 <= min_px <= max_px, got {min_px}, {max_px}")
    root = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    folder = root / f"demo-images-seed{seed}-{min_px}-{max_px}"
    return ensure_images(num_images, folder, seed, min_px, max_px)


def image_folder(root: str, crop_px: int = 224) -> Any:
    """A user's own ImageFolder tree (root/<class>/<image>), with the same augmentation."""
    path = Path(root).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"image folder {root!r} does not exist")
    return ImageFolder(str(path), transform=image_transform(crop_px))


# Data on network storage: the demo's files served over HTTP with a set latency and bandwidth.

CHUNK_BYTES = 16 * 1024  # the body goes out in chunks this large, each when the bandwidth allows


class _SlowFileHandler(BaseHTTPRequestHandler):
    """GET /NAME: the file NAME of the server's folder, after the latency, at the bandwidth."""

    server: _SlowFileServer

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        started = time.monotonic()
        name = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        path = self.server.folder / name
        if not name or "/" in name or "\\" in name or not path.is_file():  # the folder's own files only
            self.send_error(404)
            return
        data = path.read_bytes()
        time.sleep(max(0.0, started + self.server.latency_s - time.monotonic()))  # time to the first byte
        self.send_response(200)
        self.send_header("Content-Type", "image/jpeg")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        begun = time.monotonic()
        for at in range(0, len(data), CHUNK_BYTES):
            chunk = data[at:at + CHUNK_BYTES]
            # Each chunk goes out when it would have arrived over a link of that bandwidth.
            time.sleep(max(0.0, begun + (at + len(chunk)) / self.server.bytes_per_s - time.monotonic()))
            self.wfile.write(chunk)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass  # one line per request on stderr would drown the sweep's output


class _SlowFileServer(ThreadingHTTPServer):
    """Serves one folder on 127.0.0.1 at a free port, a thread per connection."""

    daemon_threads = True  # a connection's thread never keeps the process alive
    request_queue_size = 1024  # many workers connect at once; a short backlog drops connects (1 s retries)

    def __init__(self, folder: Path, latency_s: float, bytes_per_s: float) -> None:
        self.folder, self.latency_s, self.bytes_per_s = folder, latency_s, bytes_per_s
        super().__init__(("127.0.0.1", 0), _SlowFileHandler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # HTTPServer's own would look the host's name up
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client gone mid-response (a worker stopped at a trial's end) is no error of the server


_servers: dict[tuple[str, float, float], _SlowFileServer] = {}
_servers_lock = threading.Lock()
_hooks_installed = False


def serve_folder(folder: Path, latency_s: float, bytes_per_s: float) -> str:
    """The base URL of a server of `folder` run by a daemon thread of this process (one per
    folder and settings, started on first use). It ends with this process; processes forked
    from this one (DataLoader workers) close their copy of its socket and serve nothing."""
    global _hooks_installed
    key = (str(folder), float(latency_s), float(bytes_per_s))
    with _servers_lock:
        if not _hooks_installed:
            os.register_at_fork(after_in_child=_forget_servers_in_child)
            atexit.register(stop_servers)
            _hooks_installed = True
        server = _servers.get(key)
        if server is None:
            server = _SlowFileServer(folder, latency_s, bytes_per_s)
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True,
                             name=f"loadtune-http-{server.server_port}").start()
            _servers[key] = server
    return f"http://127.0.0.1:{server.server_port}"


def stop_servers() -> None:
    """Stop this process's servers and close their ports (also run at this process's exit)."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.shutdown()
        server.server_close()


def _forget_servers_in_child() -> None:
    """After fork, in the child: no thread serves the inherited sockets here, so close them."""
    global _servers_lock
    _servers_lock = threading.Lock()
    for server in _servers.values():
        server.socket.close()
    _servers.clear()


_opener_cache: dict[int, Any] = {}


def _opener() -> Any:
    """This process's URL opener; it ignores proxy settings (the server is on loopback)."""
    opener = _opener_cache.get(os.getpid())
    if opener is None:
        opener = _opener_cache[os.getpid()] = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return opener


class RemoteJpegs:
    """A map-style dataset of JPEGs fetched over HTTP: each sample is one GET on a new
    connection, then the demo's decode and augmentation.

    It holds only the base URL, the file names (a numpy array) and the transform, never the
    server, so it pickles for spawned workers, and workers start no server of their own.
    """

    def __init__(self, base_url: str, names: np.ndarray, transform: Any, timeout_s: float = 30.0) -> None:
        self.base_url, self.names, self.transform, self.timeout_s = base_url, names, transform, timeout_s

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        url = f"{self.base_url}/{self.names[index]}"
        with _opener().open(url, timeout=self.timeout_s) as response:
            data = response.read()
        with Image.open(io.BytesIO(data)) as image:
            sample = self.transform(image.convert("RGB"))
        return sample, index % CLASSES


def remote_images(num_images: int = 1000, latency_ms: float = 20.0, mb_per_s: float = 50.0, crop_px: int = 224,
                  min_px: int = 160, max_px: int = 320, seed: int = 0, cache_dir: str | None = None,
                  timeout_s: float = 30.0) -> RemoteJpegs:
    """The demo's JPEGs read over HTTP, as from network storage: a server on 127.0.0.1 (a free
    port) answers each request after `latency_ms` and sends the file at `mb_per_s` (10^6 bytes
    per second, per connection). The server is a daemon thread of the process that calls this
    factory (each trial process): it lives and ends with that process."""
    if latency_ms < 0:
        raise ValueError(f"latency_ms must be at least 0, got {latency_ms}")
    if not mb_per_s > 0:
        raise ValueError(f"mb_per_s must be above 0, got {mb_per_s}")
    paths = _demo_images(num_images, min_px, max_px, seed, cache_dir)
    base_url = serve_folder(Path(paths[0]).parent, latency_ms / 1000.0, mb_per_s * 1e6)
    names = np.array([os.path.basename(p) for p in paths])
    return RemoteJpegs(base_url, names, image_transform(crop_px), timeout_s)
