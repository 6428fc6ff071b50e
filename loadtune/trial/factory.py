"""Turn "pkg.module:callable" and "path/to/file.py:callable" specs into objects."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from loadtune.errors import FactoryError
from loadtune.text import first_line, short_repr


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
    return obj


def invoke(func: Callable[..., Any], kwargs: dict, spec: str, what: str) -> Any:
    """Call a loaded factory; anything it raises becomes a FactoryError naming the spec."""
    try:
        return func(**kwargs)
    except SystemExit as exc:  # must not end the sweep silently with the user's exit code
        raise FactoryError(f"{what} {spec!r} called sys.exit({exc.code!r})") from exc
    except Exception as exc:  # noqa: BLE001
        raise FactoryError(f"{what} {spec!r} raised {type(exc).__name__}: {first_line(exc)}") from exc


def call_factory(spec: str, kwargs: dict, base_dir: Path | str, what: str) -> Any:
    return invoke(load_callable(spec, base_dir, what), kwargs, spec, what)


def build_dataset(spec: str, kwargs: dict, base_dir: Path | str) -> Any:
    """Call the dataset factory and check that it returned something a DataLoader can load."""
    from torch.utils.data import Dataset, IterableDataset

    dataset = call_factory(spec, kwargs, base_dir, "dataset factory")
    is_map = (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
              and not isinstance(dataset, (str, bytes, Mapping)))
    if not isinstance(dataset, (Dataset, IterableDataset)) and not is_map:
        raise FactoryError(
            f"dataset factory {spec!r} returned {type(dataset).__name__}, not a torch Dataset "
            "(map-style with __getitem__/__len__, or an IterableDataset)"
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
