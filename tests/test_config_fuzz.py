"""Fuzzing the config reader: whatever the file and the --set overrides hold, load_config
returns a RunSpec or raises ConfigError with a one-line message; it never raises anything else."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings, strategies as st

from loadtune.asked.config import RunSpec, load_config
from loadtune.core.errors import ConfigError
from tests.conftest import tiny_config

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The real key names, by section, so that random documents reach the validators and not only
# the "unknown key" check.
SECTIONS = {
    "dataset": ["factory", "kwargs", "scale_kwarg"],
    "loader": ["batch_size", "shuffle", "num_workers", "prefetch_factor", "persistent_workers", "pin_memory",
               "drop_last", "timeout", "collate_fn", "worker_init_fn", "multiprocessing_context", "in_order"],
    "sweep": ["num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "batch_size", "collate_fn",
              "shuffle", "bogus"],
    "step": ["sleep_s", "busy_s", "factory", "kwargs"],
    "measure": ["warmup_batches", "batches", "epoch_batches", "repeats", "timeout_s"],
}
TOP = ["name", "device", "output", *SECTIONS]
KEYS = sorted({*TOP, *(k for keys in SECTIONS.values() for k in keys)})
DOTTED = [*TOP, *(f"{section}.{key}" for section, keys in SECTIONS.items() for key in keys),
          "dataset.kwargs.num_samples", "step.kwargs.x", "loader", "a.b.c", "name.x", ".", "loader..batch_size"]

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.integers(min_value=-3, max_value=10),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["m:f", "loadtune.synthetic:sleep_cost", "x.py:make", "auto", "cuda:0", "cpu", "fork",
                     "1e400", "-.inf", ".nan", "~", "yes", "2020-01-01", "0x1F", "1_000", "\n", "a\nb"]),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=8), st.integers(-2, 2), st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def config_like(draw) -> dict:
    """A document shaped like a config: real sections and keys, random values; sometimes a valid
    config with one part replaced."""
    if draw(st.booleans()):
        doc = tiny_config()
        section = draw(st.sampled_from(TOP))
        if section in SECTIONS and isinstance(doc.get(section), dict) and draw(st.booleans()):
            doc[section] = {**doc[section], draw(st.sampled_from(SECTIONS[section])): draw(values)}
        else:
            doc[section] = draw(values)
        return doc
    doc = {}
    for top in draw(st.lists(st.sampled_from(TOP), max_size=len(TOP), unique=True)):
        if top in SECTIONS and draw(st.integers(0, 3)):
            names = draw(st.lists(st.sampled_from(SECTIONS[top]), max_size=5, unique=True))
            doc[top] = {name: draw(values) for name in names}
        else:
            doc[top] = draw(values)
    return doc


def _dump(doc) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


documents = st.one_of(
    config_like().map(_dump),
    values.map(_dump),
    st.text(max_size=200),  # mostly not YAML at all
    st.lists(st.sampled_from(["name: x", "dataset:", "  factory: m:f", "  kwargs: {n: 1}", "step: {sleep_s: 0.1}",
                              "loader: {batch_size: 8", "sweep:", "  - 1", "\tmeasure: 1", "  num_workers: [0, 2]",
                              "measure: {timeout_s: .inf}", "key: [1, 2", "? [a]: 1", "x: &a [*a]", "'", "---",
                              "%YAML 1.1", "!!python/object:os.system x", "kwargs: !!binary aGk="]),
             max_size=8).map("\n".join),
)
overrides = st.lists(
    st.one_of(
        st.text(max_size=30),
        st.builds(lambda k, v: f"{k}={v}", st.sampled_from(DOTTED),
                  st.one_of(st.text(max_size=12), values.map(lambda v: yaml.safe_dump(v).strip()))),
    ),
    max_size=3,
)
scales = st.one_of(st.just(1.0), st.floats(allow_nan=True, allow_infinity=True))


def _check(text: str | bytes, sets: list[str], scale: float = 1.0) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            spec = load_config(path, sets, scale)
        except ConfigError as exc:
            message = str(exc)
            assert message and "\n" not in message and "\r" not in message, repr(message)
            return
        assert isinstance(spec, RunSpec)
        assert len(spec.sha) == 12 and math.isfinite(spec.scale)


@FUZZ
@given(documents, overrides)
@example("dataset: {factory: 'm:f', kwargs: &k {a: *k}}\nstep: {sleep_s: 0.1}\n", [])
@example("dataset: {factory: 'm:f'}\nstep: &s {sleep_s: 0.1, kwargs: {x: *s}}\n", [])
@example("dataset: {factory: 'm:f'}\nstep: {sleep_s: .inf}\nmeasure: {timeout_s: .nan}\n", [])
@example("dataset: {factory: 'm:f'}\nstep: {sleep_s: 1}\nmeasure: {timeout_s: 1.0e+300}\n", [])
@example("dataset: {factory: 'm:f'}\nstep: {sleep_s: 1}\n", ["dataset.kwargs=[1]", "dataset.kwargs.n=1"])
@example("dataset: {factory: 'm:f'}\nstep: {sleep_s: 1}\n", ["loader.batch_size=[" * 2000])
@example("dataset: {factory: 'm:f'}\nstep: {sleep_s: 1}\n", ["a\nb=1"])
@example("{a\nb: 1}\n", [])
@example("dataset: {factory: 'm:f'}\nstep: {sleep_s: 1}\nsweep: {'x\ny': [1]}\n", [])
@example("[" * 5000, [])
def test_any_document_and_overrides_give_a_runspec_or_a_config_error(text, sets):
    _check(text, sets)


@FUZZ
@given(config_like().map(_dump), overrides, scales)
@example(_dump({**tiny_config(), "dataset": {"factory": "m:f", "kwargs": {"n": 1e308}, "scale_kwarg": "n"}}), [],
         4.0)
@example(_dump(tiny_config()), [], math.inf)
@example(_dump(tiny_config()), [], math.nan)
def test_scaled_configs_too(text, sets, scale):
    _check(text, sets, scale)


@FUZZ
@given(st.binary(max_size=120))
@example(b"name: \xff\xfe\n")
@example(b"\x00\x01")
def test_bytes_that_are_not_text(data):
    _check(data, [])


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
@pytest.mark.parametrize("key", ["step.sleep_s", "step.busy_s", "measure.timeout_s", "loader.timeout"])
def test_infinite_and_nan_numbers_are_refused_with_their_key(write_config, key, value):
    config = tiny_config()
    if key.startswith("step."):
        config["step"] = {}
    with pytest.raises(ConfigError) as info:
        load_config(write_config(config), [f"{key}={value}"])
    assert key in str(info.value)


def test_self_referencing_yaml_is_refused(write_config):
    path = write_config("name: x\ndataset: {factory: 'm:f', kwargs: &k {a: *k}}\nstep: {sleep_s: 0.1}\n")
    with pytest.raises(ConfigError, match="dataset.kwargs"):
        load_config(path)
