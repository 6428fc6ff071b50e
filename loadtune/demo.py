"""The built-in demo: real JPEG files on disk, decoded and augmented like an image pipeline.

The images are generated once with Pillow into a cache folder (no download) and reused;
each sample is a real file read, a JPEG decode, a random resized crop, a flip, and
normalisation, the decode-resize-normalise work of a real vision training loop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

DEFAULT_CACHE = Path(os.environ.get("LOADTUNE_CACHE", Path.home() / ".cache" / "loadtune"))
CLASSES = 10
JPEG_QUALITY = 90
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _make_image(index: int, seed: int, min_px: int, max_px: int) -> Any:
    rng = np.random.default_rng((seed, index))
    width, height = (int(v) for v in rng.integers(min_px, max_px + 1, size=2))
    coarse = rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), dtype=np.int16)
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
    if num_images < 1:
        raise ValueError(f"num_images must be at least 1, got {num_images}")
    if not 16 <= min_px <= max_px:
        raise ValueError(f"need 16 <= min_px <= max_px, got {min_px}, {max_px}")
    root = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    folder = root / f"demo-images-seed{seed}-{min_px}-{max_px}"
    return JpegFiles(ensure_images(num_images, folder, seed, min_px, max_px), image_transform(crop_px))


def image_folder(root: str, crop_px: int = 224) -> Any:
    """A user's own ImageFolder tree (root/<class>/<image>), with the same augmentation."""
    path = Path(root).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"image folder {root!r} does not exist")
    return ImageFolder(str(path), transform=image_transform(crop_px))
