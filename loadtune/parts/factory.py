"""Turn "pkg.module:callable" and "path/to/file.py:callable" specs into objects."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from loadtune.core.errors import FactoryError
from loadtune.core.text import first_line, short_repr


def _is_path(module_part: str) -> bool:
    return module_part.endswith(".py") or "/" in module_part or "\\" in module_part


def _import_file(file: Path, spec: str) -> Any:
    if not file.is_file():
        raise FactoryError(f"{spec!r}: file {file} not found")
    # Import by its own name from its own folder, so that classes defined there can be
    # pickled into DataLoader workers started with spawn or forkserver.
    folder, name = str(file.parent), file.stem
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == file:
        return loaded
    if folder not in sys.path:
        sys.path.insert(0, folder)
    if loaded is None:
        return importlib.import_module(name)
    # Another module already has that name: load this file under a name of its own.
    unique = f"loadtune_user_{abs(hash(str(file)))}_{name}"
    module_spec = importlib.util.spec_from_file_location(unique, file)
    if module_spec is None or module_spec.loader is None:
        raise FactoryError(f"{spec!r}: file {file} cannot be imported")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[unique] = module
    module_spec.loader.exec_module(module)
    return module


def load_callable(spec: str, base_dir: Path | str = ".", what: str = "factory") -> Callable[..., Any]:
    """Import the callable named by `spec`; paths are relative to `base_dir`."""
    module_part, sep, attr_path = spec.rpartition(":")
    if not sep or not module_part or not attr_path:
        raise FactoryError(f"{what} {spec!r}: expected 'pkg.module:callable' or 'path/file.py:callable'")
    try:
        if _is_path(module_part):
            file = Path(module_part)
            if not file.is_absolute():
                file = Path(base_dir) / file
            module = _import_file(file.resolve(), spec)
        else:
            module = importlib.import_module(module_part)
    except FactoryError:
        raise
    except SystemExit as exc:  # a script that parses its command line (argparse) when imported
        raise FactoryError(f"{what} {spec!r}: importing it called sys.exit({exc.code!r}); "
                           "move what runs at import under `if __name__ == \"__main__\":`") from exc
    except Exception as exc:  # noqa: BLE001 - any import failure of user code is the user's to fix
        raise FactoryError(f"{what} {spec!r}: cannot import: {type(exc).__name__}: {first_line(exc)}") from exc
    obj: Any = module
    for attr in attr_path.split("."):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            raise FactoryError(f"{what} {spec!r}: {module_part} has no attribute {attr_path!r}") from None
    if not callable(obj):
        raise FactoryError(f"{what} {spec!r}: {attr_path} is a {type(obj).__name__}, not a callable")
    func: Callable[..., Any] = obj
    return func


def invoke(func: Callable[..., Any], kwargs: dict[str, Any], spec: str, what: str) -> Any:
    """Call a loaded factory; anything it raises becomes a FactoryError naming the spec."""
    try:
        return func(**kwargs)
    except SystemExit as exc:  # must not end the sweep silently with the user's exit code
        raise FactoryError(f"{what} {spec!r} called sys.exit({exc.code!r})") from exc
    except Exception as exc:  # noqa: BLE001
        raise FactoryError(f"{what} {spec!r} raised {type(exc).__name__}: {first_line(exc)}") from exc


def call_factory(spec: str, kwargs: dict[str, Any], base_dir: Path | str, what: str) -> Any:
    return invoke(load_callable(spec, base_dir, what), kwargs, spec, what)


SOURCE_DATASET, SOURCE_LOADER, SOURCE_MODULE = "dataset", "dataloader", "data module"


@dataclass(frozen=True)
class Source:
    """What the dataset factory gave. A Dataset; or a DataLoader (built by the factory itself,
    or by a data module's train_dataloader()), taken apart: its dataset, the objects every
    trial's DataLoader keeps (`parts`: sampler or batch_sampler, collate_fn, worker_init_fn,
    generator) and its plain settings (`settings`: the baseline, keys of the config's loader)."""

    dataset: Any
    kind: str = SOURCE_DATASET
    parts: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)


def build_source(spec: str, kwargs: dict[str, Any], base_dir: Path | str) -> Source:
    """Call the dataset factory: a Dataset, a DataLoader, or an object with train_dataloader()
    (prepare_data() and setup("fit") called first where it has them, as a trainer would)."""
    from torch.utils.data import DataLoader

    made = call_factory(spec, kwargs, base_dir, "dataset factory")
    kind = SOURCE_LOADER
    if not isinstance(made, DataLoader) and callable(getattr(made, "train_dataloader", None)):
        made, kind = _train_loader(made, spec), SOURCE_MODULE
    if isinstance(made, DataLoader):
        parts, settings = taken_apart(made)
        return Source(check_dataset(made.dataset, spec, kwargs), kind, parts, settings)
    return Source(check_dataset(made, spec, kwargs))


def _train_loader(module: Any, spec: str) -> Any:
    """A data module's training DataLoader, after prepare_data() and setup("fit") where it has them."""
    from torch.utils.data import DataLoader

    where = f"dataset factory {spec!r} returned a data module ({type(module).__name__})"
    steps = (("prepare_data()", getattr(module, "prepare_data", None), ()),
             ('setup("fit")', getattr(module, "setup", None), ("fit",)),
             ("train_dataloader()", module.train_dataloader, ()))
    result = None
    for name, call, args in steps:
        if callable(call):
            try:
                result = call(*args)
            except Exception as exc:  # noqa: BLE001 - the user's code: one line naming it
                raise FactoryError(f"{where}: its {name} raised {type(exc).__name__}: {first_line(exc)}") from exc
    if not isinstance(result, DataLoader):
        raise FactoryError(f"{where}: its train_dataloader() returned {type(result).__name__}, not a DataLoader")
    return result


def taken_apart(loader: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A DataLoader's objects to keep and its plain settings (what the config's loader block holds)."""
    from torch.utils.data import RandomSampler, SequentialSampler
    from torch.utils.data._utils.collate import default_collate, default_convert

    workers = loader.num_workers
    context = loader.multiprocessing_context
    settings: dict[str, Any] = {
        "batch_size": loader.batch_size, "shuffle": False, "num_workers": workers,
        "prefetch_factor": loader.prefetch_factor if workers > 0 else None,
        "persistent_workers": bool(loader.persistent_workers) if workers > 0 else False,
        "pin_memory": bool(loader.pin_memory), "drop_last": bool(loader.drop_last), "timeout": float(loader.timeout),
        "in_order": bool(getattr(loader, "in_order", True)),
        "multiprocessing_context": context.get_start_method() if context is not None and workers > 0 else None,
    }
    parts: dict[str, Any] = {}
    custom_batches = loader.batch_size is None and loader.batch_sampler is not None
    if custom_batches:
        parts["batch_sampler"] = loader.batch_sampler
    elif type(loader.sampler) is RandomSampler and not loader.sampler.replacement \
            and loader.sampler._num_samples is None:
        settings["shuffle"] = True
    elif type(loader.sampler) is not SequentialSampler and hasattr(loader.sampler, "__iter__") \
            and type(loader.sampler).__name__ != "_InfiniteConstantSampler":
        parts["sampler"] = loader.sampler
    if loader.collate_fn not in (default_collate, default_convert):
        parts["collate_fn"] = loader.collate_fn
    for name in ("worker_init_fn", "generator"):
        if getattr(loader, name) is not None:
            parts[name] = getattr(loader, name)
    return parts, settings


def check_dataset(dataset: Any, spec: str, kwargs: dict[str, Any]) -> Any:
    """Check that the factory's dataset is something a DataLoader can load."""
    from torch.utils.data import Dataset, IterableDataset

    is_map = (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
              and not isinstance(dataset, (str, bytes, Mapping)))
    if not isinstance(dataset, (Dataset, IterableDataset)) and not is_map:
        raise FactoryError(
            f"dataset factory {spec!r} returned {type(dataset).__name__}, not a torch Dataset "
            "(map-style with __getitem__/__len__, or an IterableDataset), a DataLoader, or an object with "
            "train_dataloader()"
        )
    if not isinstance(dataset, IterableDataset):
        # A map-style dataset is sampled by index over range(len(dataset)): without a length,
        # or with none to sample, every trial would fail the same way; say so once, up front.
        try:
            length = len(dataset)
        except Exception as exc:  # noqa: BLE001 - the user's __len__
            raise FactoryError(f"dataset factory {spec!r} returned a {type(dataset).__name__} whose len() "
                               f"fails: {type(exc).__name__}: {first_line(exc)}") from exc
        if length == 0:
            raise FactoryError(f"dataset factory {spec!r} returned an empty dataset (len 0) with kwargs "
                               f"{short_repr(kwargs, 80)}: nothing to load")
    return dataset


def dataset_length(dataset: Any) -> int | None:
    """len() of a map-style dataset; None for an iterable one without a length."""
    try:
        return len(dataset)
    except Exception:  # noqa: BLE001 - no length (TypeError), or an iterable's __len__ that fails
        return None


def accepts_keyword(func: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
