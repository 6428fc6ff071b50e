"""The benchmark pipelines: each of benchmarks/recommend.py's PIPELINES (benchmarks/pipelines.py's
included) builds as `loadtune sweep` builds it, at a tiny scale, and trains on one batch; the parts
of saturated-text (documents on disk read by byte offset, a Python tokenizer, a padding collate_fn,
a CPU step); and repeatability.py's goal on picks that change the baseline. Only the test marked
slow starts DataLoader workers."""

from __future__ import annotations

import inspect
import json
import pickle
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

SIZE_KWARGS = ("num_samples", "num_images", "num_docs")


@pytest.fixture
def torch_threads():
    """A step factory may set torch's intra-op threads: put them back for the other tests."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def tiny(pipeline: dict[str, Any], batches: int, cache_dir: Path) -> dict[str, Any]:
    """The pipeline with a dataset of `batches` batches, its files (where it writes any) in `cache_dir`."""
    from loadtune.parts.factory import load_callable

    kwargs = dict(pipeline["dataset"].get("kwargs") or {})
    size = next(k for k in SIZE_KWARGS if k in kwargs)
    kwargs[size] = batches * pipeline["loader"]["batch_size"]
    if "cache_dir" in inspect.signature(load_callable(pipeline["dataset"]["factory"])).parameters:
        kwargs["cache_dir"] = str(cache_dir)
    return {**pipeline, "dataset": {**pipeline["dataset"], "kwargs": kwargs}}


def first_batch(config: Path) -> tuple[Any, Any, int]:
    """The config loaded and checked as `loadtune sweep` loads it, its parts built as a trial builds
    them (dataset factory, loader.collate_fn spec, step): the first batch, the step, the batch size."""
    from loadtune.asked.config import load_config
    from loadtune.parts.factory import build_source, load_callable
    from loadtune.parts.steps import build_step

    spec = load_config(config)
    cfg = spec.config
    dataset = build_source(cfg.dataset.factory, cfg.dataset.kwargs, spec.base_dir).dataset
    collate = cfg.loader.callables.collate_fn
    loader = DataLoader(dataset, batch_size=cfg.loader.batch_size, shuffle=cfg.loader.shuffle,
                        collate_fn=load_callable(collate, spec.base_dir) if collate else None)
    return next(iter(loader)), build_step(cfg.step, spec.base_dir, "cpu"), int(cfg.loader.batch_size or 1)


def test_every_pipeline_builds_and_trains_on_one_batch(bench, tmp_path: Path, torch_threads) -> None:
    from loadtune.measure.loop import batch_len

    recommend = bench("recommend")
    assert {"cnn-threads", "saturated-text"} <= set(recommend.PIPELINES)
    for name, pipeline in recommend.PIPELINES.items():
        config = recommend.write_config(tmp_path, name, tiny(pipeline, 2, tmp_path / "cache"), True)
        batch, step, size = first_batch(config)
        assert batch_len(batch) == size, name
        step(batch)


# --- saturated-text's parts ------------------------------------------------------------------------


def small_corpus(pipelines: ModuleType, folder: Path, **changes: Any) -> Any:
    kwargs = {"num_docs": 40, "mean_words": 20, "words": 300, "cache_dir": str(folder), **changes}
    return pipelines.text_documents(**kwargs)


def test_the_corpus_is_written_once_the_same_from_its_seed(bench, tmp_path: Path) -> None:
    pipelines = bench("pipelines")
    a = small_corpus(pipelines, tmp_path / "a")
    written = Path(a.path).stat().st_mtime_ns
    again = small_corpus(pipelines, tmp_path / "a")
    assert Path(again.path).stat().st_mtime_ns == written  # read, not written again
    b = small_corpus(pipelines, tmp_path / "b")
    assert Path(a.path).read_bytes() == Path(b.path).read_bytes()
    assert Path(a.path + ".vocab.json").read_bytes() == Path(b.path + ".vocab.json").read_bytes()
    assert Path(a.path).read_bytes() != Path(small_corpus(pipelines, tmp_path / "c", seed=1).path).read_bytes()
    assert not list((tmp_path / "a").glob("*.tmp"))
    lines = Path(a.path).read_bytes().splitlines(keepends=True)
    assert len(a) == len(lines) == 40
    assert [length for _, length in a.offsets] == [len(line) for line in lines]
    lengths = {len(json.loads(line)["text"].split()) for line in lines}
    assert len(lengths) > 10 and min(lengths) >= 8  # variable lengths


def test_a_document_is_read_by_its_offset_and_tokenized(bench, tmp_path: Path) -> None:
    pipelines = bench("pipelines")
    docs = small_corpus(pipelines, tmp_path)
    lines = Path(docs.path).read_text().splitlines()
    for index in (0, 17, 39):
        ids, label = docs[index]
        doc = json.loads(lines[index])
        assert ids.dtype == torch.long and ids.tolist() == pipelines.tokenize(doc["text"], docs.vocab, 512)
        assert label == doc["label"]
    assert all(i > pipelines.UNK for i in docs[3][0].tolist())  # every token of the corpus is in its vocabulary
    with pytest.raises(IndexError):
        docs[40]
    assert len(small_corpus(pipelines, tmp_path, max_tokens=5)[0][0]) <= 5
    vocab = {"abc": 2, "def": 3, ",": 4}
    assert pipelines.tokenize("Abc, def. abc", vocab, 10) == [2, 4, 3, pipelines.UNK, 2]


def test_a_pickled_dataset_opens_the_file_itself(bench, tmp_path: Path) -> None:
    pipelines = bench("pipelines")
    docs = small_corpus(pipelines, tmp_path)
    first = docs[5][0]
    copy = pickle.loads(pickle.dumps(docs))
    assert copy._fd == -1
    assert torch.equal(copy[5][0], first)


def test_pad_collate_pads_to_the_longest_of_the_batch(bench) -> None:
    pipelines = bench("pipelines")
    ids, labels, lengths = pipelines.pad_collate([(torch.tensor([5, 6, 7]), 1), (torch.tensor([8]), 0)])
    assert ids.tolist() == [[5, 6, 7], [8, pipelines.PAD, pipelines.PAD]]
    assert labels.tolist() == [1, 0] and lengths.tolist() == [3, 1]
    assert ids.dtype == labels.dtype == lengths.dtype == torch.long


def test_the_text_model_pools_over_the_document_not_its_padding(bench) -> None:
    pipelines = bench("pipelines")
    torch.manual_seed(0)
    model = pipelines.TextClassifier(vocab_size=50, dim=8, hidden=16, classes=3)
    short, _, length = pipelines.pad_collate([(torch.tensor([4, 9, 2]), 0)])
    padded = torch.nn.functional.pad(short, (0, 5), value=pipelines.PAD)
    assert torch.allclose(model(short, length), model(padded, length), atol=1e-6)


def test_the_text_step_trains(bench, tmp_path: Path, torch_threads) -> None:
    pipelines = bench("pipelines")
    docs = small_corpus(pipelines, tmp_path)
    batch = pipelines.pad_collate([docs[i] for i in range(8)])
    torch.manual_seed(0)
    before = pipelines.TextClassifier(pipelines.TEXT_VOCAB, 16, 32, 8)
    step = pipelines.make_text_step(dim=16, hidden=32, lr=0.5)
    for _ in range(5):
        step(batch)
    (cell,) = [c.cell_contents for c in step.__closure__ or () if isinstance(c.cell_contents, torch.nn.Module)]
    ids, labels, lengths = batch
    loss = torch.nn.functional.cross_entropy
    assert loss(cell(ids, lengths), labels) < loss(before(ids, lengths), labels)


@pytest.mark.slow
def test_text_batches_through_workers_are_the_batches_without(bench, tmp_path: Path) -> None:
    pipelines = bench("pipelines")
    docs = small_corpus(pipelines, tmp_path)
    docs[0]  # the file opened in this process before the workers start
    alone = list(DataLoader(docs, batch_size=8, collate_fn=pipelines.pad_collate))
    workers = list(DataLoader(docs, batch_size=8, collate_fn=pipelines.pad_collate, num_workers=2))
    assert len(alone) == len(workers) == 5
    for a, b in zip(alone, workers):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_the_referee_builds_saturated_text(bench, tmp_path: Path, torch_threads) -> None:
    recommend, plain_loop = bench("recommend"), bench("plain_loop")
    pipeline = tiny(recommend.PIPELINES["saturated-text"], 2, tmp_path / "cache")
    config = recommend.write_config(tmp_path, "saturated-text", pipeline, True)
    built = plain_loop.build(config, {"num_workers": 0})
    built.step(next(iter(built.loader)))


# --- repeatability.py: picks that change the baseline ------------------------------------------------


def test_repeatability_judges_a_pick_against_the_baseline(bench) -> None:
    rep, recommend = bench("repeatability"), bench("recommend")
    baseline = {"num_workers": 0}
    kept = recommend.Contender(["baseline"], rep.loop_settings(baseline), [100.0, 101.0, 99.0, 100.0])
    faster = recommend.Contender(["pick run1"], rep.loop_settings({"num_workers": 2}), [110.0, 112.0, 109.0, 111.0])
    same = recommend.Contender(["pick run2"], rep.loop_settings({"num_workers": 1}), [101.0, 99.0, 100.0, 102.0])
    runs = [rep.SweepRun(label, 60.0, pick=pick) for label, pick in
            (("run1", {"num_workers": 2}), ("run2", {"num_workers": 1}), ("run3", baseline))]
    judged = rep.judge_picks(runs, [kept, faster, same], faster, baseline)
    assert [j.change for j in judged] == [True, True, False]
    assert judged[0].over_baseline == pytest.approx([1.1, 112 / 101, 109 / 99, 1.11])
    assert [j.shown_faster for j in judged] == [True, False, True]


def test_repeatability_goal_no_pick_unshown_against_the_baseline(bench) -> None:
    rep = bench("repeatability")
    common = bench("_common")

    def pipeline(change: bool, interval: tuple[float, float] | None) -> Any:
        runs = [rep.SweepRun(f"run{i}", 60.0) for i in (1, 2)]
        judged = [rep.PickJudged(r.label, None, [1.0, 1.0], [1.0], None, change, [1.05, 1.06], interval)
                  for r in runs]
        return rep.PipelineResult("saturated-text", runs, [], 2, rep.Coverage(inside=19, pairs=20), judged)

    for result, code in ((pipeline(False, None), 0), (pipeline(True, (1.02, 1.08)), 0),
                         (pipeline(True, (0.99, 1.08)), 1), (pipeline(True, None), 1)):
        lines: list[str] = []
        goals = rep.print_goals([result], None, common.Goals(out=lines.append))
        assert goals.exit_status() == code, lines
        assert any(line.startswith("picks that change the baseline") for line in lines)
