"""The package's size limits, read statically: modules, functions, classes and repeated lines.

A module of at most MAX_MODULE_LINES lines, a function (or method) of at most
MAX_FUNCTION_LINES from its `def` to its last line, a class of at most MAX_CLASS_ATTRIBUTES
attributes (dataclass or pydantic fields, and the distinct `self.x` its methods assign), an
`__init__` written by hand of at most MAX_INIT_PARAMETERS parameters (self not counted), and no
run of REPEAT_LINES lines written twice. What still exceeds a limit is listed in KNOWN with its
size today: the list may only shrink, so a new excess or a grown one fails, and so does an entry
that no longer exceeds (remove it). No folder holds more than MAX_FOLDER_MODULES modules."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "loadtune"

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 50
MAX_CLASS_ATTRIBUTES = 12
MAX_INIT_PARAMETERS = 6
# Modules in one folder, its __init__ (the room's description) not counted.
MAX_FOLDER_MODULES = 12
REPEAT_LINES = 6

# What exceeds a limit today: "kind path[:name]" -> its size.
KNOWN: dict[str, int] = {}


def _files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _where(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def _class_attributes(node: ast.ClassDef) -> set[str]:
    names = {b.target.id for b in node.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)
             and "ClassVar" not in ast.unparse(b.annotation)}
    for sub in ast.walk(node):
        targets: list[ast.expr] = []
        if isinstance(sub, ast.Assign):
            targets = list(sub.targets)
        elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
            targets = [sub.target]
        for target in targets:
            for e in ast.walk(target):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    names.add(e.attr)
    return names


def _init_parameters(node: ast.FunctionDef) -> int:
    a = node.args
    return len(a.posonlyargs) + len(a.args) - 1 + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)


def sizes() -> dict[str, int]:
    """Every excess over a limit in the package: "kind path[:name]" -> its size."""
    found: dict[str, int] = {}
    for path in _files():
        text = path.read_text()
        where = _where(path)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found[f"module {where}"] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found[f"function {where}:{node.name}"] = length
                if node.name == "__init__" and _init_parameters(node) > MAX_INIT_PARAMETERS:
                    found[f"init {where}:{node.lineno}"] = _init_parameters(node)
            elif isinstance(node, ast.ClassDef):
                count = len(_class_attributes(node))
                if count > MAX_CLASS_ATTRIBUTES:
                    found[f"class {where}:{node.name}"] = count
    return found


def _meaningful(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith("#") and len(s) > 3


def repeats() -> list[str]:
    """Runs of REPEAT_LINES meaningful lines (stripped; blank lines, comments and bare brackets
    left out) that stand in two places of the package."""
    seen: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for path in _files():
        lines = [(i + 1, line.strip()) for i, line in enumerate(path.read_text().splitlines()) if _meaningful(line)]
        for k in range(len(lines) - REPEAT_LINES + 1):
            run = tuple(text for _, text in lines[k:k + REPEAT_LINES])
            seen[run].append(f"{_where(path)}:{lines[k][0]}")
    return sorted(", ".join(places) for places in seen.values() if len(places) > 1)


def test_nothing_new_exceeds_a_limit():
    found = sizes()
    new = {k: v for k, v in found.items() if k not in KNOWN}
    grown = {k: (KNOWN[k], v) for k, v in found.items() if k in KNOWN and v > KNOWN[k]}
    assert not new, f"over the limits (modules {MAX_MODULE_LINES} lines, functions {MAX_FUNCTION_LINES}, " \
                    f"classes {MAX_CLASS_ATTRIBUTES} attributes, __init__ {MAX_INIT_PARAMETERS} parameters): {new}"
    assert not grown, f"grown past their listed size (listed, now): {grown}"


def test_the_known_list_only_holds_what_still_exceeds():
    found = sizes()
    assert not [k for k in KNOWN if k not in found], "within the limits now: remove from KNOWN"


def test_no_run_of_lines_is_written_twice():
    assert repeats() == []


def test_the_checks_see_an_excess(tmp_path):
    """The readers themselves: a long function, a wide class and a repeated run are found."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES + 1))
    fields = "\n".join(f"    f{i}: int" for i in range(MAX_CLASS_ATTRIBUTES + 1))
    tree = ast.parse(f"def long():\n{body}\n\nclass Wide:\n{fields}\n")
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert (functions[0].end_lineno or 0) - functions[0].lineno + 1 > MAX_FUNCTION_LINES
    wide = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
    assert len(_class_attributes(wide)) == MAX_CLASS_ATTRIBUTES + 1


def test_no_folder_holds_more_than_a_room_of_modules():
    folders = {p.parent for p in _files()}
    crowded = {_where(f): n for f in folders
               if (n := len([p for p in f.glob("*.py") if p.name != "__init__.py"])) > MAX_FOLDER_MODULES}
    assert not crowded, f"folders over {MAX_FOLDER_MODULES} modules: {crowded}"

