"""README.md's "## Install" section installs something that exists: every `pip install` it gives
(in its code block or its inline code) is from a checkout, or names the distribution pyproject.toml
builds, and then only beside a way from a checkout (the distribution is not on the package index
yet); every extra it names is one pyproject.toml declares; the command and the package it names
are the ones the checkout has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
# Whether the distribution is on the package index: until it is, the Install section's code block
# installs from a checkout (inline code may name the distribution beside a way from a checkout).
PUBLISHED = False
HEADING = "## Install"
PIP_INSTALL = re.compile(r"pip install\s+([^#;]+)")
EXTRAS = re.compile(r"^(?P<base>[^\[]*)(?:\[(?P<extras>[^\]]*)\])?$")
DISTRIBUTION = re.compile(r"`(loadtune[-_.][\w.-]+)`")


def install_section(text: str) -> str:
    start = text.index(HEADING + "\n") + len(HEADING) + 1
    end = re.search(r"^#{1,2} ", text[start:], re.M)
    return text[start:start + end.start()] if end else text[start:]


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_path(target: str) -> bool:
    return target.startswith((".", "/", "~")) or "/" in target


def code_of(section: str, inline: bool = True) -> list[str]:
    """The section's code, in order: each line of its fenced blocks and (`inline`) each span of
    inline code."""
    code = []
    for i, part in enumerate(re.split(r"^```[^\n]*\n", section, flags=re.M)):
        if i % 2:
            code += part.splitlines()
        elif not i % 2 and inline:
            code += re.findall(r"`([^`\n]+)`", part)
    return code


def install_targets(section: str, inline: bool = True) -> list[str]:
    """What each `pip install` in the section's code (`inline`: its inline code too) installs, its
    options left out."""
    targets = []
    for line in code_of(section, inline=inline):
        for m in PIP_INSTALL.finditer(line):
            targets += [t for t in shlex.split(m.group(1)) if not t.startswith("-")]
    return targets


def install_problems(section: str, project: dict[str, Any], root: Path = ROOT, published: bool = PUBLISHED,
                     ) -> list[str]:
    """What in an Install section would not install this project as it says."""
    name, extras = project["name"], set(project.get("optional-dependencies", {}))
    targets = install_targets(section)
    problems = [] if targets else ["gives no pip install command"]
    if not published:  # the command to copy, in the code block, installs from a checkout
        problems += [f"pip install {t}: the command to copy names a distribution that is not on the package "
                     "index yet" for t in install_targets(section, inline=False) if not is_path(t)]
    from_checkout = [t for t in targets if is_path(t)]
    for target in targets:
        parts = EXTRAS.match(target)
        assert parts is not None
        base, wanted = parts.group("base"), [e.strip() for e in (parts.group("extras") or "").split(",") if e.strip()]
        problems += [f"{target}: {name} has no extra {e!r}" for e in wanted if e not in extras]
        if not is_path(base) and normalised(base) != normalised(name):
            problems.append(f"pip install {target}: not this project's distribution ({name})")
        elif not is_path(base) and not from_checkout and not published:
            problems.append(f"pip install {target}: the distribution is not published; say how to install "
                            "from a checkout too")
    problems += [f"`{d}`: not this project's distribution ({name})" for d in DISTRIBUTION.findall(section)
                 if normalised(d) != normalised(name)]
    commands = re.findall(r"the command is `([^`]+)`", section)
    packages = re.findall(r"the Python package is `([^`]+)`", section)
    problems += [f"no command {c!r} in [project.scripts]" for c in commands if c not in project.get("scripts", {})]
    problems += [f"no package {p!r} in the checkout" for p in packages
                 if not (root / p.replace(".", "/") / "__init__.py").is_file()]
    if not commands or not packages:
        problems.append("does not say the command and the Python package it installs")
    return problems


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"])


def test_the_readme_install_section_installs_this_checkout(project):
    section = install_section((ROOT / "README.md").read_text(encoding="utf-8"))
    assert install_problems(section, project) == []
    assert any(is_path(t) for t in install_targets(section)), "it says how to install from a checkout"


NOTE = "the command is `loadtune`; the Python package is `loadtune`"


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (f"```bash\npip install loadtune-torch   # {NOTE}\n```\n", "the distribution is not published"),
        (f"```bash\npip install loadtune   # {NOTE}\n```\n", "not this project's distribution"),
        (f"```bash\npip install -e .   # {NOTE}\n```\nOr `pip install loadtune`.\n", "not this project's"),
        (f"```bash\npip install -e '.[gpu]'   # {NOTE}\n```\n", "has no extra 'gpu'"),
        (f"Install `loadtune-tools` from a checkout: `pip install -e .`; {NOTE}.\n", "`loadtune-tools`"),
        (f"```bash\npip install loadtune-torch   # {NOTE}\n```\nFrom a checkout, `pip install -e .`.\n",
         "names a distribution that is not on the package index yet"),
        ("```bash\npip install -e .\n```\n", "does not say the command"),
        ("```bash\npip install -e .   # the command is `tune`; the Python package is `loadtune`\n```\n",
         "no command 'tune'"),
        ("```bash\npip install -e .   # the command is `loadtune`; the Python package is `tune`\n```\n",
         "no package 'tune'"),
        (f"Build it yourself; {NOTE}.\n", "gives no pip install command"),
    ],
)
def test_the_check_finds_an_install_line_that_would_not_work(project, section, expected):
    problems = install_problems(section, project)
    assert any(expected in p for p in problems), problems


def test_the_check_takes_a_checkout_and_the_published_name_beside_it(project):
    section = (f"```bash\npip install -e .   # {NOTE}\n```\nOnce published: `pip install {project['name']}`; "
               f"from elsewhere `pip install /path/to/checkout`; extras `pip install -e '.[lightning]'`.\n")
    assert install_problems(section, project) == []
    assert install_targets(section) == [".", project["name"], "/path/to/checkout", ".[lightning]"]
