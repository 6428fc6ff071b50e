"""Datasets and a training step for benchmarks/recommend.py, named in its configs as
"pipelines.py:NAME" (relative to the config file) or by absolute path.

augmented_images: small colour images, each first waited for (`read_s`, a file read's
                  latency) then augmented with numpy (random crop, flip, brightness and
                  contrast, noise, blur, cutout, normalisation), the CPU-side work of a
                  vision pipeline: 0.2 ms of CPU per sample plus about 0.15 ms per pass of
                  noise and blur (on the 2-core development machine).
make_cnn_step:    a small CNN (two conv layers, ten classes) trained on each batch: forward,
                  backward and an SGD step, on the CPU, in the main process, with as many
                  intra-op threads as asked.
make_cpu_train_step: the same CNN trained with torch's default intra-op threads (one per
                  core), as a user training a small model on the CPU leaves them: its threads
                  compete with the DataLoader's workers for the cores.

text_documents:   variable-length documents in a JSONL file the factory writes once (a cache,
                  deterministic from the seed), each read by its byte offset and tokenized in
                  pure Python (words and punctuation by a regular expression, mapped to ids
                  through a vocabulary counted from the corpus): a LongTensor of ids and a label.
pad_collate:      the text batch: ids padded to the longest document of the batch, the
                  labels and the lengths.
make_text_step:   a small text classifier (embedding, a per-token linear layer, a mean over
                  the document's tokens, a linear head) trained on the CPU with torch's
                  default intra-op threads: forward, backward and an SGD step.

PIPELINES holds whole pipelines in benchmarks/recommend.py's form (dataset, loader, step; an
epoch of EPOCH_BATCHES batches), for the scripts that sweep pipelines by name:
  cnn-threads:    augmented_images (0.3 ms read wait and about 0.5 ms of numpy augmentation a
                  sample) in batches of 64, each trained by make_cpu_train_step; baseline: the
                  DataLoader defaults (num_workers=0).
  saturated-text: text_documents in batches of 64 through pad_collate, each trained by
                  make_text_step; baseline: the DataLoader defaults (num_workers=0), where the
                  step's two intra-op threads keep both cores of the 2-core machine busy for
                  about 80% of each batch (the tokenizing one core the rest), so a worker
                  competes with the step for them.

Only numpy and torch (and the standard library) are imported at the top, so a fresh process
that uses them starts fast.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import Dataset

MEAN = np.array([0.49, 0.48, 0.45], dtype=np.float32)
STD = np.array([0.25, 0.24, 0.26], dtype=np.float32)


class AugmentedImages(Dataset):
    """`num_samples` images of `size` px cut from a bank of (size + 2 * pad) px images, each
    after a wait of `read_s`, with `passes` rounds of noise and blur: the CPU cost per sample
    grows with `passes`."""

    def __init__(self, num_samples: int, size: int, pad: int, passes: int, read_s: float, classes: int,
                 bank: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        side = size + 2 * pad
        self.bank = rng.integers(0, 256, size=(bank, side, side, 3), dtype=np.uint8)
        self.num_samples, self.size, self.pad, self.passes, self.read_s = num_samples, size, pad, passes, read_s
        self.classes, self.seed = classes, seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index >= self.num_samples:
            raise IndexError(index)
        if self.read_s > 0:
            time.sleep(self.read_s)
        rng = np.random.default_rng((self.seed, index))
        image = self.bank[index % len(self.bank)]
        top, left = (int(v) for v in rng.integers(0, 2 * self.pad + 1, size=2))
        x = image[top:top + self.size, left:left + self.size].astype(np.float32) / 255.0
        if rng.random() < 0.5:
            x = x[:, ::-1]
        x = x * rng.uniform(0.8, 1.2, size=3).astype(np.float32)  # brightness per channel
        x = (x - x.mean()) * np.float32(rng.uniform(0.8, 1.2)) + x.mean()  # contrast
        for _ in range(self.passes):
            x = x + rng.normal(0.0, 0.02, size=x.shape).astype(np.float32)
            padded = np.pad(x, ((1, 1), (1, 1), (0, 0)), mode="edge")
            x = sum(padded[i:i + self.size, j:j + self.size] for i in range(3) for j in range(3)) / np.float32(9)
        cy, cx = (int(v) for v in rng.integers(0, self.size, size=2))
        x[max(cy - 4, 0):cy + 4, max(cx - 4, 0):cx + 4] = 0.0  # cutout
        x = (np.clip(x, 0.0, 1.0) - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))), index % self.classes


def augmented_images(num_samples: int = 4096, size: int = 32, pad: int = 4, passes: int = 3, read_s: float = 0.0,
                     classes: int = 10, bank: int = 512, seed: int = 0) -> AugmentedImages:
    return AugmentedImages(num_samples, size, pad, passes, read_s, classes, bank, seed)


class SmallCnn(torch.nn.Module):
    def __init__(self, classes: int, width: int, size: int) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(width, 2 * width, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        )
        self.head = torch.nn.Linear(2 * width * (size // 4) ** 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def make_cnn_step(device: str = "cpu", classes: int = 10, width: int = 16, size: int = 32, lr: float = 0.01,
                  momentum: float = 0.9, threads: int | None = None, seed: int = 0) -> Callable[[Any], None]:
    """A callable(batch) that trains the CNN one SGD step (with momentum) on (images, labels).
    `threads` sets torch's intra-op threads of the process that runs the step (None leaves
    torch's default, one per core), so every harness that builds the step runs it alike.
    The update is written out rather than taken from torch.optim, whose first use imports
    for seconds in a fresh process."""
    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = SmallCnn(classes, width, size).to(device)
    model.train()
    params = list(model.parameters())
    velocity = [torch.zeros_like(p) for p in params]

    def step(batch: Any) -> None:
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
        sgd_step(loss, params, velocity, lr, momentum)

    return step


def sgd_step(loss: torch.Tensor, params: list[torch.Tensor], velocity: list[torch.Tensor], lr: float,
             momentum: float) -> None:
    """Backward from `loss`, then one SGD step with momentum over `params`."""
    for p in params:
        p.grad = None
    loss.backward()
    with torch.no_grad():
        for p, v in zip(params, velocity):
            v.mul_(momentum).add_(p.grad)
            p.add_(v, alpha=-lr)


def make_cpu_train_step(device: str = "cpu", classes: int = 10, width: int = 8, size: int = 32, lr: float = 0.01,
                        momentum: float = 0.9, seed: int = 0) -> Callable[[Any], None]:
    """make_cnn_step with torch's intra-op threads left as the process has them (by default one
    per core): a small model trained on the CPU beside the DataLoader's workers."""
    return make_cnn_step(device, classes, width, size, lr, momentum, None, seed)


# --- text: documents on disk, tokenized in Python, padded per batch --------------------------------

PAD, UNK = 0, 1
TEXT_VOCAB = 20000  # ids below this: the most frequent words of the corpus, then UNK
TOKEN = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")
PUNCTUATION = ("", ",", ".", ";", ":", "!", "?")
PUNCTUATION_P = (0.86, 0.06, 0.05, 0.01, 0.01, 0.005, 0.005)
TEXT_CACHE = Path(os.environ.get("LOADTUNE_CACHE", Path.home() / ".cache" / "loadtune"))


def tokenize(text: str, vocab: dict[str, int], max_tokens: int) -> list[int]:
    """Lower-cased words and punctuation marks as ids (UNK where the vocabulary lacks one),
    at most `max_tokens`."""
    return [vocab.get(token, UNK) for token in TOKEN.findall(text.lower())][:max_tokens]


def _document(rng: np.random.Generator, words: list[str], weights: np.ndarray, n: int) -> str:
    """`n` words drawn by their frequency, with punctuation after some and a capital after a full stop."""
    picks = rng.choice(len(words), size=n, p=weights)
    marks = rng.choice(len(PUNCTUATION), size=n, p=PUNCTUATION_P)
    out, capital = [], True
    for w, m in zip(picks.tolist(), marks.tolist()):
        word = words[w]
        out.append((word.capitalize() if capital else word) + PUNCTUATION[m])
        capital = PUNCTUATION[m] in (".", "!", "?")
    return " ".join(out)


def write_corpus(path: Path, num_docs: int, mean_words: int, words: int, classes: int, seed: int) -> None:
    """`num_docs` documents as JSONL ({"text", "label"} a line) of lognormal lengths around
    `mean_words` words from a Zipf-distributed vocabulary of `words` made-up words, and beside
    it (path + ".vocab.json") the TEXT_VOCAB - 2 most frequent tokens of the corpus in order.
    Deterministic from `seed`; each file appears whole (written aside, then renamed)."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(letters[i] for i in rng.integers(0, 26, size=int(n)))
                  for n in rng.integers(2, 11, size=words)]
    weights = 1.0 / np.arange(1, words + 1) ** 1.05
    weights /= weights.sum()
    lengths = np.clip(rng.lognormal(np.log(mean_words), 0.6, size=num_docs), 8, 8 * mean_words).astype(int)
    counts: Counter[str] = Counter()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        for n in lengths.tolist():
            text = _document(rng, vocabulary, weights, n)
            counts.update(TOKEN.findall(text.lower()))
            f.write(json.dumps({"text": text, "label": int(rng.integers(classes))}) + "\n")
    vocab_path = path.with_name(path.name + ".vocab.json")
    vocab_tmp = vocab_path.with_name(f"{vocab_path.name}.{os.getpid()}.tmp")
    vocab_tmp.write_text(json.dumps([t for t, _ in counts.most_common(TEXT_VOCAB - 2)]))
    os.replace(vocab_tmp, vocab_path)  # the vocabulary first: the corpus's presence means both are whole
    os.replace(tmp, path)


class TextDocuments(Dataset):
    """The documents of a JSONL file, each read by its byte offset (an index of offsets built
    once, from the file) and tokenized in `__getitem__`: (ids as a LongTensor, label)."""

    def __init__(self, path: Path, max_tokens: int) -> None:
        self.path, self.max_tokens = str(path), max_tokens
        tokens = json.loads(Path(self.path + ".vocab.json").read_text())
        self.vocab = {token: i + 2 for i, token in enumerate(tokens)}
        offsets, at = [], 0
        with open(self.path, "rb") as f:
            for line in f:
                offsets.append((at, len(line)))
                at += len(line)
        self.offsets = offsets
        self._fd = self._pid = -1

    def __len__(self) -> int:
        return len(self.offsets)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fd": -1, "_pid": -1}  # each process opens the file itself

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index >= len(self.offsets):
            raise IndexError(index)
        if self._pid != os.getpid():
            self._fd, self._pid = os.open(self.path, os.O_RDONLY), os.getpid()
        offset, length = self.offsets[index]
        doc = json.loads(os.pread(self._fd, length, offset))
        ids = tokenize(doc["text"], self.vocab, self.max_tokens)
        return torch.tensor(ids, dtype=torch.long), int(doc["label"])


def text_documents(num_docs: int = 3200, mean_words: int = 120, words: int = 40000, max_tokens: int = 512,
                   classes: int = 8, seed: int = 0, cache_dir: str | None = None) -> TextDocuments:
    """The text dataset factory: `num_docs` documents written once into `cache_dir` (default
    $LOADTUNE_CACHE or ~/.cache/loadtune) and read from there."""
    folder = Path(cache_dir) if cache_dir else TEXT_CACHE
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"bench-text-{num_docs}-{mean_words}-{words}-{classes}-seed{seed}.jsonl"
    if not path.exists():
        write_corpus(path, num_docs, mean_words, words, classes, seed)
    return TextDocuments(path, max_tokens)


def pad_collate(batch: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids padded with PAD to the batch's longest document, labels, lengths), all LongTensors."""
    lengths = torch.tensor([len(ids) for ids, _ in batch], dtype=torch.long)
    padded = torch.full((len(batch), int(lengths.max())), PAD, dtype=torch.long)
    for row, (ids, _) in enumerate(batch):
        padded[row, :len(ids)] = ids
    return padded, torch.tensor([label for _, label in batch], dtype=torch.long), lengths


class TextClassifier(torch.nn.Module):
    def __init__(self, vocab_size: int, dim: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.token = torch.nn.Linear(dim, hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.token(self.embed(ids)))
        mask = (ids != PAD).unsqueeze(-1).to(h.dtype)
        return self.head((h * mask).sum(1) / lengths.clamp(min=1).unsqueeze(1).to(h.dtype))


def make_text_step(device: str = "cpu", vocab_size: int = TEXT_VOCAB, dim: int = 64, hidden: int = 128,
                   classes: int = 8, lr: float = 0.05, momentum: float = 0.9, threads: int | None = None,
                   seed: int = 0) -> Callable[[Any], None]:
    """A callable(batch) that trains the text classifier one SGD step (with momentum) on
    (ids, labels, lengths), written out as make_cnn_step's; `threads` as there (None: torch's
    default, one per core)."""
    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = TextClassifier(vocab_size, dim, hidden, classes).to(device)
    model.train()
    params = list(model.parameters())
    velocity = [torch.zeros_like(p) for p in params]

    def step(batch: Any) -> None:
        ids, labels, lengths = (t.to(device) for t in batch)
        loss = torch.nn.functional.cross_entropy(model(ids, lengths), labels)
        sgd_step(loss, params, velocity, lr, momentum)

    return step


HERE = Path(__file__).resolve().parent
EPOCH_BATCHES = 50  # as benchmarks/recommend.py: one epoch start in every window of 50 batches

PIPELINES: dict[str, dict[str, Any]] = {
    "cnn-threads": {
        "about": "small CNN trained on the CPU with torch's default intra-op threads per batch of 64; per sample "
                 "a 0.3 ms read wait and about 0.5 ms of numpy augmentation; baseline: DataLoader defaults",
        "dataset": {"factory": f"{HERE / 'pipelines.py'}:augmented_images",
                    "kwargs": {"num_samples": 64 * EPOCH_BATCHES, "passes": 2, "read_s": 0.0003}},
        "loader": {"batch_size": 64},
        "step": {"factory": f"{HERE / 'pipelines.py'}:make_cpu_train_step", "kwargs": {"width": 8}},
    },
    "saturated-text": {
        "about": "text classifier (embedding, per-token layer, mean pool) trained on the CPU with torch's default "
                 "intra-op threads per batch of 64 documents padded to the longest; per document a read by byte "
                 "offset from a JSONL file and about 0.1 ms of Python tokenizing; the cores busy at the baseline "
                 "(DataLoader defaults)",
        "dataset": {"factory": f"{HERE / 'pipelines.py'}:text_documents",
                    "kwargs": {"num_docs": 64 * EPOCH_BATCHES, "mean_words": 120}},
        "loader": {"batch_size": 64, "shuffle": True, "collate_fn": f"{HERE / 'pipelines.py'}:pad_collate"},
        "step": {"factory": f"{HERE / 'pipelines.py'}:make_text_step", "kwargs": {"dim": 64, "hidden": 128}},
    },
}
