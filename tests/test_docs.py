"""The documentation matches the code: README.md and docs/*.md.

- every ```yaml block is a loadtune config (or a part of one, merged into configs/demo.yaml)
  that the config validator accepts;
- every ```python block parses, and runs unless the line before it says
  `<!-- docs-test: parse-only: why -->` (blocks that run a sweep, or need data or packages
  that are not here);
- every relative link and #anchor resolves (README.md, docs/*.md, benchmarks/README.md);
- every `loadtune COMMAND --option` in a shell or text block, or in inline code, exists;
- docs/reference.md lists every command option, config key, CSV column and --json key, and
  the names the project's contract fixes;
- the README stays short and its quick start and demo output stay true to the Makefile.

No sweeps, no DataLoader workers, no network: a few seconds.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from pydantic import BaseModel

from loadtune.asked.config import LOADER_KEYS, Config, LoaderSpec, load_config
from loadtune.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]  # the pages whose examples are checked
LINKED = [*PAGES, ROOT / "benchmarks" / "README.md"]  # the pages whose links are checked
REFERENCE = ROOT / "docs" / "reference.md"
DEMO_CONFIG = ROOT / "configs" / "demo.yaml"
README_MAX_LINES = 220

SHELL_LANGS = {"", "bash", "sh", "shell", "console", "text"}
MARKER = re.compile(r"<!--\s*docs-test:\s*([\w-]+)(?::[^>]*)?-->")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None  # from a `<!-- docs-test: ... -->` comment on the line before

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.search(previous)
        body, j = [], i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                      and lines[j].strip().strip(fence[0]) == ""):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        blocks.append(Block(path, i + 1, lang, "\n".join(body) + "\n", marker.group(1) if marker else None))
        i = j + 1
    return blocks


def prose(path: Path) -> str:
    """The page without its fenced blocks (their lines left empty, so line numbers hold)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, fence = [], None
    for line in lines:
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(2)
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def section(text: str, heading: str) -> str:
    """The text under `heading` (a whole heading line) up to the next heading of its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n") + len(heading) + 1
    end = re.search(rf"^#{{1,{level}}} ", text[start:], re.M)
    return text[start:start + end.start()] if end else text[start:]


ALL_BLOCKS = [b for page in PAGES for b in fenced_blocks(page)]
YAML_BLOCKS = [b for b in ALL_BLOCKS if b.lang in ("yaml", "yml")]
PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.lang in ("python", "py")]
SHELL_BLOCKS = [b for b in ALL_BLOCKS if b.lang in SHELL_LANGS]


def test_the_pages_have_examples_to_check():
    assert len(YAML_BLOCKS) >= 5 and len(PYTHON_BLOCKS) >= 3 and len(SHELL_BLOCKS) >= 5


# --- YAML: loadtune configs ------------------------------------------------------------------


def _config_of(block: Block) -> dict:
    data = yaml.safe_load(block.text)
    assert isinstance(data, dict), f"{block.id}: a ```yaml block must be a loadtune config (or part of one)"
    unknown = set(data) - set(Config.model_fields)
    assert not unknown, (f"{block.id}: {sorted(unknown)} are not config keys; a block that is not a "
                         "loadtune config takes another language than yaml")
    if "dataset" in data and "step" in data:
        return data
    # A part of a config: its sections stand in for the demo's.
    return {**yaml.safe_load(DEMO_CONFIG.read_text()), **data}


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=lambda b: b.id)
def test_yaml_examples_load_through_the_config_validator(block, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_config_of(block), sort_keys=False))
    spec = load_config(path)  # raises ConfigError with the dotted key when an example drifts
    assert spec.config.dataset.factory


def _factories(config: dict) -> list[tuple[str, dict]]:
    out = [(config["dataset"]["factory"], config["dataset"].get("kwargs") or {})]
    step = config.get("step") or {}
    if step.get("factory"):
        out.append((step["factory"], step.get("kwargs") or {}))
    return out


def _top_level_callables(blocks: list[Block]) -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}
    for block in blocks:
        for node in ast.parse(block.text).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                found[node.name] = node
    return found


def _accepts(node: ast.AST, kwargs: dict) -> list[str]:
    """The keyword arguments in `kwargs` that the function (or class's __init__) `node` cannot take."""
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            return []
        node = init
    args = node.args
    if args.kwarg is not None:
        return []
    names = {a.arg for a in (*args.args, *args.kwonlyargs)}  # positional-only ones take no keyword
    return [k for k in kwargs if k not in names]


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=lambda b: b.id)
def test_yaml_factories_exist_and_take_the_kwargs_given(block):
    """Factories of loadtune itself must import; a factory defined by a ```python block of the
    same page (or a file in configs/) must be defined there and take the kwargs the config gives."""
    config = _config_of(block)
    defined = _top_level_callables([b for b in PYTHON_BLOCKS if b.path == block.path])
    for spec, kwargs in _factories(config):
        module, _, name = spec.rpartition(":")
        if module.startswith("loadtune"):
            import importlib

            assert callable(getattr(importlib.import_module(module), name, None)), f"{block.id}: {spec}"
        elif module.endswith(".py") and (ROOT / "configs" / module).is_file():
            tree = ast.parse((ROOT / "configs" / module).read_text())
            node = next((n for n in tree.body if getattr(n, "name", None) == name), None)
            assert node is not None, f"{block.id}: configs/{module} defines no {name}"
            assert not _accepts(node, kwargs), f"{block.id}: {spec} takes no {_accepts(node, kwargs)}"
        elif name in defined:
            assert not _accepts(defined[name], kwargs), f"{block.id}: {spec} takes no {_accepts(defined[name], kwargs)}"


# --- Python ------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.id)
def test_python_examples_parse_and_run(block, tmp_path, monkeypatch):
    code = compile(block.text, block.id, "exec")  # a SyntaxError names the page and line
    if block.marker == "parse-only":
        return
    assert block.marker is None, f"{block.id}: unknown docs-test marker {block.marker!r}"
    monkeypatch.chdir(tmp_path)
    exec(code, {"__name__": "docs_example"})


def test_the_readme_factory_builds_its_dataset(tmp_path):
    """The README's own example, as loadtune uses it: data.py next to my.yaml, the factory found
    from the config, called with the config's kwargs names, on a folder of real JPEGs."""
    from PIL import Image

    from loadtune.parts.factory import load_callable

    config = next(b for b in fenced_blocks(README) if b.lang == "yaml" and "data.py:make_dataset" in b.text)
    factory = next(b for b in fenced_blocks(README) if b.lang == "python" and b.text.startswith("# data.py"))
    (tmp_path / "my.yaml").write_text(config.text)
    (tmp_path / "data.py").write_text(factory.text)
    images = tmp_path / "train"
    images.mkdir()
    for i in range(3):
        Image.new("RGB", (320 + 16 * i, 240), (40 * i, 90, 160)).save(images / f"{i}.jpg")
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    try:
        spec = load_config(tmp_path / "my.yaml")
        make = load_callable(spec.config.dataset.factory, spec.base_dir)
        kwargs = dict(spec.config.dataset.kwargs, root=str(images), num_items=2)
        assert set(kwargs) == set(spec.config.dataset.kwargs)
        dataset = make(**kwargs)
        assert len(dataset) == 2
        assert tuple(dataset[0].shape) == (3, 224, 224)
    finally:
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            if name == "data" or name.startswith("loadtune_user_"):
                del sys.modules[name]


# --- links -------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation but - and _ removed,
    spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(prose(path)):
        slug = github_slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    out.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text(encoding="utf-8")))
    return out


def test_github_slug_rules():
    assert github_slug("What is measured, and how") == "what-is-measured-and-how"
    assert github_slug("`--json`") == "--json"
    assert github_slug("model_error.py: the pipeline model") == "model_errorpy-the-pipeline-model"
    assert github_slug("From Python (notebooks, scripts)") == "from-python-notebooks-scripts"


def _links(path: Path) -> list[tuple[int, str]]:
    # Links inside inline code are not links (blanked, keeping the line breaks for the line numbers).
    text = re.sub(r"`[^`]*`", lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose(path))
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(text)]


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for line, target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{page.name}:{line}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{page.name}:{line}: {target}: no heading with that anchor in {dest.name}")
    assert not broken, "\n".join(broken)


# --- commands and options ----------------------------------------------------------------------


def _cli_options() -> dict[str, set[str]]:
    group = typer.main.get_command(app)
    return {name: {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("--")}
            for name, cmd in group.commands.items()}


OPTIONS = _cli_options()
COMMAND = re.compile(r"(?:^|[\s/`(])loadtune\s+([a-z][\w-]*)")


def _command_lines(block: Block) -> list[str]:
    text = re.sub(r"\\\n\s*", " ", block.text)  # a command continued over lines
    return text.split("\n")


def _check_commands(line: str, where: str) -> list[str]:
    problems = []
    line = re.split(r"\s#\s", line, maxsplit=1)[0]
    for m in COMMAND.finditer(line):
        name = m.group(1)
        if name not in OPTIONS:
            problems.append(f"{where}: `loadtune {name}` is not a command ({', '.join(sorted(OPTIONS))})")
            continue
        rest = re.split(r"[;|`)]|&&", line[m.end():], maxsplit=1)[0]
        tokens = rest.split()
        if name == "watch":  # what follows SCRIPT is the script's own
            tokens = _before_script(tokens)
        for token in tokens:
            option = re.match(r"^\[?(--[a-z][\w-]*)", token)
            if option and option.group(1) not in OPTIONS[name]:
                problems.append(f"{where}: `loadtune {name}` has no option {option.group(1)}")
    return problems


def _before_script(tokens: list[str]) -> list[str]:
    """`loadtune watch`'s own tokens: its options (and their values) before SCRIPT."""
    kept: list[str] = []
    value_next = False
    for token in tokens:
        if value_next:
            value_next = False
        elif token.startswith("-"):
            value_next = token.lstrip("[") in ("--out", "--every")
        else:
            break
        kept.append(token)
    return kept


def test_the_check_finds_a_wrong_command_and_option():
    assert _check_commands("loadtune sweep my.yaml --nope 3", "x") == ["x: `loadtune sweep` has no option --nope"]
    assert _check_commands("$ loadtune swept my.yaml", "x")[0].startswith("x: `loadtune swept` is not a command")
    assert _check_commands("torchrun --nnodes 2 -m loadtune sweep my.yaml --out a.csv  # --x", "x") == []
    assert _check_commands("loadtune watch --every 5 train.py --epochs 3", "x") == []
    assert _check_commands("loadtune watch --nope train.py", "x") == ["x: `loadtune watch` has no option --nope"]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.id)
def test_commands_in_shell_and_text_blocks_exist(block):
    problems = [p for i, line in enumerate(_command_lines(block))
                for p in _check_commands(line, f"{block.id}+{i + 1}")]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_in_inline_code_exist(page):
    problems = []
    for span in re.findall(r"`([^`]+)`", prose(page)):  # a span may go on over a line break
        span = " ".join(span.split())
        problems += _check_commands(span, f"{page.name}: `{span}`")
    # A list item that starts with `loadtune CMD …` lists that command's options as inline code.
    for item in re.split(r"\n(?=- )|\n\s*\n", prose(page)):
        first = re.match(r"- `loadtune ([a-z][\w-]*)[^`]*`", item)
        if first and first.group(1) in OPTIONS:
            for option in re.findall(r"`(--[a-z][\w-]*)", item):
                if option not in OPTIONS[first.group(1)]:
                    problems.append(f"{page.name}: `loadtune {first.group(1)}` has no option {option}")
    assert not problems, "\n".join(problems)


# --- the reference: complete against the code --------------------------------------------------

REFERENCE_TEXT = REFERENCE.read_text(encoding="utf-8")


def _synopsis() -> dict[str, set[str]]:
    """Per command, the options the synopsis block of the reference's Commands section lists."""
    block = next(b for b in fenced_blocks(REFERENCE) if b.lang == "text" and b.text.startswith("loadtune sweep"))
    listed: dict[str, set[str]] = {}
    current = None
    for line in block.text.split("\n"):
        m = re.match(r"^loadtune ([a-z][\w-]*)", line)
        if m:
            current = m.group(1)
            listed[current] = set(re.findall(r"\[(--[a-z][\w-]*)", line))
        elif current and (option := re.match(r"^\s+(--[a-z][\w-]*)", line)):
            listed[current].add(option.group(1))
    return listed


def test_the_reference_lists_every_command_and_option():
    real = {name: options - {"--help"} for name, options in OPTIONS.items()}
    assert _synopsis() == real
    for name in real:
        assert f"### `loadtune {name}`" in REFERENCE_TEXT


def _config_keys(model: type[BaseModel] = Config, prefix: str = "") -> list[str]:
    if model is LoaderSpec:  # the block's keys: its thread settings are written beside the keywords
        return [prefix + key for key in LOADER_KEYS]
    keys = []
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            keys += _config_keys(sub, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def test_the_reference_lists_every_config_key():
    table = section(REFERENCE_TEXT, "## Config reference")
    keys = _config_keys()
    assert "loader.worker_threads" in keys and "measure.budget_s" in keys
    missing = [k for k in keys if f"`{k}`" not in table and f"`{k}." not in table]
    assert not missing


def test_the_reference_config_example_has_every_key():
    example = next(b for b in fenced_blocks(REFERENCE) if b.lang == "yaml" and b.text.startswith("name:"))
    text = example.text
    data = yaml.safe_load(text)
    given = set()
    for key in _config_keys():
        node: Any = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None or re.search(rf"^\s*#?\s*{re.escape(key.split('.')[-1])}:", text, re.M):
            given.add(key)
    assert given == set(_config_keys())


def _table_first_cells(text: str) -> list[str]:
    return [row.split("|")[1] for row in text.split("\n") if row.startswith("| ") and not row.startswith("| column")]


def test_the_reference_lists_the_csv_columns_in_order():
    from loadtune.record.record import RankRecord, Record

    csv = section(REFERENCE_TEXT, "## The CSV")
    table = csv[:csv.index("\n\n", csv.index("| column"))]
    listed = [name for cell in _table_first_cells(table) for name in re.findall(r"`(\w+)`", cell)]
    assert listed == list(Record.names())
    ranks = csv[csv.index("NAME.ranks.csv"):]
    assert all(f"`{name}`" in ranks for name in RankRecord.names())


def _summary_json() -> dict:
    from loadtune.present.summary import summarize_sweep
    from tests.test_model import TRUTH, first_round

    records = first_round(TRUTH)
    return summarize_sweep(records, records[0], {"num_workers": 1}, {"num_workers": 0}, output="o.csv", config="c",
                           scale=1.0, scaled=None, device="cpu", ranks=2, rank_by="throughput", strategy="model",
                           warnings=(), plot="o.png").to_json()


def test_the_reference_lists_every_sweep_json_key():
    from loadtune.model.predict_values import Travel
    from loadtune.present.summary_parts import DataFindings, Flagged, OneRank
    from loadtune.present.sweep import ModelTie
    from tests.test_model import TRUTH

    part = section(REFERENCE_TEXT, "### `loadtune sweep --json`")
    data = _summary_json()
    keys = [*data, *data["recommended"], *TRUTH.to_json(),
            "error", "error_trials", "fell_back_to_ofat",
            *(f.name for cls in (DataFindings, Flagged, OneRank, Travel, ModelTie) for f in dataclasses.fields(cls))]
    missing = sorted({k for k in keys if f"`{k}`" not in part})
    assert not missing


def test_the_reference_lists_every_predict_json_key():
    from loadtune.model.predict import forecast
    from loadtune.model.predict_values import Target
    from tests.test_model import TRUTH, first_round

    part = section(REFERENCE_TEXT, "### `loadtune predict --json`")
    result = forecast(first_round(TRUTH), Target(ranks=2))
    data = result.to_json()
    keys = [*data, *data["recommended"], *data["source"], *data["target"], *result.table_rows()[0]]
    missing = sorted({k for k in keys if f"`{k}`" not in part})
    assert not missing


# Names the project's contract fixes (commands, options, values, files, targets): each must be
# in the reference with its meaning.
CONTRACT_NAMES = [
    "loadtune sweep CONFIG", "loadtune compare CSV CSV [CSV ...]", "loadtune report CSV [CSV ...]",
    "loadtune profile CONFIG", "loadtune init [PATH]", "python -m loadtune",
    "loadtune predict CSV [--cores N] [--ranks R] [--step-ms S] [--json] [--out FILE]",
    "--strategy model|ofat|greedy|grid", "--rank-by throughput|wait_ratio", "--device auto|cpu|cuda|cuda:I",
    "--tolerance F", "--budget SECONDS", "--set KEY=VALUE", "--fail-on-flip", "--trace PATH",
    "`ok`", "`skipped`", "`failed`", "`timeout`", "`predicted`", "`same`", "`duplicates`", "`different`",
    "`baseline`", "`combined`", "`stopped_early`", "`round`", "`outside_cpu`", "`disturbed_repeats`",
    "`data_check`", "`recommended`", "`decided`", "`model`", "`error`", "`rows`",
    "`predicted_throughput`", "`predicted_wait_ratio`", "`main_threads`", "`worker_threads`",
    "`measure.min_repeats`", "`measure.max_outside_cpu`", "`measure.budget_s`", "`measure.tolerance`",
    "`dataset.factory`", "train_dataloader()",
    "loadtune.sweep(config, *, out=None, overrides=None, **options)", "`.rows`", "`.frame`", "`.recommended`",
    "`.loader_kwargs`", "`strategy`", "`configs/remote.yaml`", "`make lint`",
    "| 130 |", "| 3 |", "`format_version`", "The format version is **6**",
    "`measure.run_epoch_batches`", "`window_throughput`", "`run_epoch_batches`", "`equal`",
    "loadtune.watch(loader, *, out=None, every_s=60.0, name=None)",
    "loadtune watch [--out FILE] [--every S] SCRIPT [ARGS]...", "`watched`", "`dist_rank`",
    "loadtune predict FILE", "loadtune init --from FILE", "`NAME.loader.json`",
    "loadtune.tune(loader, *, out=None, budget_s=60.0, name=None, tune=None)", "`tuned`",
    "loadtune watch --tune [--out FILE] SCRIPT [ARGS]...",
]


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_the_reference_has_the_contract_names(name):
    assert name in REFERENCE_TEXT


def test_the_readme_contract_section_points_to_the_reference():
    contract = section(README.read_text(encoding="utf-8"), "## Contract")
    for anchor in ("commands", "config-reference", "the-csv", "--json"):
        assert f"docs/reference.md#{anchor})" in contract


# --- the README --------------------------------------------------------------------------------


def test_make_demo_run_again_writes_beside_its_earlier_result(tmp_path):
    """`make demo` never replaces the result of an earlier run: it writes demo-images-2.csv, then -3."""
    import os
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    # As a user runs it: not as a sub-make of `make test` (which would print its directories).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}

    def demo_command() -> str:
        done = subprocess.run(["make", "--no-print-directory", "-n", "-f", str(ROOT / "Makefile"), "demo", "STAMP=",
                               "BIN=bin"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
        return next(line for line in done.stdout.splitlines() if "loadtune sweep" in line)

    assert demo_command().endswith("--out results/demo-images.csv --plot results/demo-images.png")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "demo-images.csv").write_text("earlier\n")
    assert demo_command().endswith("--out results/demo-images-2.csv --plot results/demo-images-2.png")
    (tmp_path / "results" / "demo-images-2.csv").write_text("earlier\n")
    assert demo_command().endswith("--out results/demo-images-3.csv --plot results/demo-images-3.png")


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_readme_quick_start_and_demo_output_match_the_makefile():
    text = README.read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test"):
        assert re.search(rf"^{target}:", makefile, re.M)
        assert f"make {target} " in text
    recipe = re.search(r"^demo:.*\n\t(.+)$", makefile, re.M).group(1)
    # The first run's file; a later one writes beside it (demo-images-2.csv, ...).
    command = recipe.replace("$(BIN)", ".venv/bin").replace("$(DEMO_OUT:.csv=.png)", "results/demo-images.png") \
        .replace("$(DEMO_OUT)", "results/demo-images.csv")
    demo = text[text.index("<!-- demo-output -->"):text.index("<!-- /demo-output -->")]
    assert command in demo
    assert "Recommended:" in demo and "Files: results/demo-images.csv, " in demo
    output = demo[demo.index("```text"):].split("```")[1].splitlines()
    answer = output[next(i for i, line in enumerate(output) if line.startswith("Recommended:")):]
    # Each item wrapped at the width, its continuation lines indented.
    assert len([line for line in answer if not line.startswith(" ")]) <= 8, \
        "at most eight lines from the recommendation to the end"
    table = output[next(i for i, line in enumerate(output) if line.startswith("rank")):]
    assert not any("…" in line for line in table), "no figure or header cut"
