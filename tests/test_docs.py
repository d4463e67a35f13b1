"""The README's and the documentation site's code runs, or at least type-checks, as written.

Each ```python block of README.md and docs/ is a program: the page's prelude (an HTML
comment ``<!-- prelude`` ... ``-->``, hidden from readers: the fake bank and the like),
then the block. A comment ``<!-- check: ... -->`` on the line before a block changes that:
``continue`` runs it after the page's blocks before it (since the last block without
``continue``), ``types`` only type-checks it (it needs a model, a server or a network).
Every program is type-checked with mypy --strict, and every other one is run by a new
interpreter in a folder of its own, as a new user would run it: relative paths are relative
to that folder, which holds only tests/docs_bank.py as ``bank.py`` (the fake bank and mail
that preludes import).

A python block whose first line is ``# file: NAME`` is a file the reader writes, not a
program: it is written as NAME into the page's session, a folder holding a copy of
examples/, where the page's ```console blocks then run in order. Each ``$ `` line there is
a command, run by bash with this interpreter's ``python`` and ``safeact`` first on PATH,
and the lines up to the next command are what it prints (stdout and stderr), where
``...`` stands for any text, over lines too; ``$?`` is the exit status of the command
before, as in one shell. ```json blocks must parse.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from tests.conftest import postgres_or_skip

ROOT = Path(__file__).resolve().parent.parent
BANK = Path(__file__).with_name("docs_bank.py")
"""The fake bank the examples import as ``bank``, copied beside each."""
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(?P<language>\w*)\s*$")
FILE = re.compile(r"^# file: (?P<name>[\w./-]+)\n")
CHECK = re.compile(r"^<!-- check: (?P<words>[\w ]+) -->$")
WORDS = frozenset({"continue", "types"})


@attrs.frozen
class Block:
    """A fenced block of a page, with what its check comment asked for."""

    page: Path
    line: int
    language: str
    code: str
    words: frozenset[str]

    @property
    def name(self) -> str:
        """Where the block is, as a test id: ``docs/tutorial.md:12``."""
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@attrs.frozen
class Program:
    """What one python block runs: its page's prelude, the blocks it continues, itself."""

    block: Block
    source: str

    @property
    def runs(self) -> bool:
        """Whether the program is run, not only type-checked."""
        return "types" not in self.block.words


def read_blocks(page: Path) -> tuple[str, list[Block]]:
    """Return the page's prelude and its fenced blocks, in order.

    Raises:
        ValueError: a check comment names an unknown word, or a fence is left open.

    """
    lines = page.read_text().splitlines()
    prelude: list[str] = []
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line == "<!-- prelude":
            end = lines.index("-->", index)
            prelude += lines[index + 1 : end]
            index = end + 1
            continue
        fence = FENCE.match(line)
        if fence is None:
            index += 1
            continue
        closing = [after for after in range(index + 1, len(lines)) if lines[after] == "```"]
        if not closing:
            raise ValueError(f"{page}:{index + 1}: a fence that is never closed")
        end = closing[0]
        check = CHECK.match(lines[index - 1]) if index else None
        words = frozenset(check["words"].split()) if check else frozenset()
        if not words <= WORDS:
            raise ValueError(f"{page}:{index}: unknown check words {sorted(words - WORDS)}")
        code = "\n".join(lines[index + 1 : end]) + "\n"
        blocks.append(Block(page, index + 1, fence["language"], code, words))
        index = end + 1
    return "\n".join(prelude) + "\n", blocks


def programs() -> list[Program]:
    """Return the program of every python block of every page."""
    made: list[Program] = []
    for page in PAGES:
        prelude, blocks = read_blocks(page)
        chain: list[str] = []
        for block in blocks:
            if block.language != "python" or FILE.match(block.code):
                continue
            chain = [*chain, block.code] if "continue" in block.words else [block.code]
            made.append(Program(block, prelude + "\n".join(chain)))
    return made


def file_blocks() -> list[Block]:
    """Return every ``# file: NAME`` block of every page: type-checked, run by its page."""
    return [
        block
        for page in PAGES
        for block in read_blocks(page)[1]
        if block.language == "python" and FILE.match(block.code)
    ]


def json_blocks() -> list[Block]:
    """Return every json block of every page."""
    return [block for page in PAGES for block in read_blocks(page)[1] if block.language == "json"]


def sessions() -> list[tuple[Path, list[Block]]]:
    """Return each page that has console blocks, with its file and console blocks."""
    found: list[tuple[Path, list[Block]]] = []
    for page in PAGES:
        blocks = [
            block
            for block in read_blocks(page)[1]
            if block.language == "console"
            or (block.language == "python" and FILE.match(block.code))
        ]
        if any(block.language == "console" for block in blocks):
            found.append((page, blocks))
    return found


def commands(block: Block) -> list[tuple[str, str]]:
    """Return a console block's commands, each with the text it is shown to print."""
    said: list[tuple[str, str]] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            said.append((line[2:], ""))
        elif said:
            command, output = said[-1]
            said[-1] = (command, f"{output}{line}\n")
        else:
            raise ValueError(f"{block.name}: output before the first command")
    return said


def shown(expected: str, printed: str) -> bool:
    """Whether ``printed`` is ``expected``, each ``...`` in it standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in expected.strip().split("..."))
    return re.fullmatch(pattern, printed.strip(), re.DOTALL) is not None


PROGRAMS = programs()


@pytest.mark.parametrize(
    "program",
    [program for program in PROGRAMS if program.runs],
    ids=lambda program: program.block.name,
)
def test_the_example_runs_as_written(program: Program, tmp_path: Path) -> None:
    """The block runs to its end in an empty folder, its asserts holding."""
    shutil.copy(BANK, tmp_path / "bank.py")
    script = tmp_path / "example.py"
    script.write_text(program.source)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SAFEACT_")}
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert completed.returncode == 0, f"{program.block.name}:\n{completed.stderr}"


def test_every_example_type_checks(tmp_path: Path) -> None:
    """The strict type check, with the project's configuration, accepts every program."""
    shutil.copy(BANK, tmp_path / "bank.py")
    names: dict[str, str] = {}
    for number, program in enumerate(PROGRAMS):
        module = f"example_{number}"
        (tmp_path / f"{module}.py").write_text(program.source)
        names[module] = program.block.name
    # A reader's files keep their names, so they import one another as on the reader's disk.
    for block in file_blocks():
        match = FILE.match(block.code)
        assert match is not None
        module = match["name"].removesuffix(".py")
        assert module not in names, f"{block.name} and {names[module]} both write {module}.py"
        (tmp_path / f"{module}.py").write_text(block.code)
        names[module] = block.name
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            *sorted(str(tmp_path / f"{module}.py") for module in names),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = re.sub(
        rf"{re.escape(str(tmp_path))}/(\w+)\.py",
        lambda found: names.get(found[1], found[0]),
        completed.stdout,
    )
    assert completed.returncode == 0, report


@pytest.mark.parametrize(
    ("page", "blocks"),
    sessions(),
    ids=lambda value: str(value.relative_to(ROOT)) if isinstance(value, Path) else "",
)
def test_the_transcript_is_what_the_commands_print(
    page: Path, blocks: list[Block], tmp_path: Path
) -> None:
    """Each command of the page's console blocks prints what the page shows it print."""
    said = [c for b in blocks if b.language == "console" for c, _ in commands(b)]
    if any("postgresql://" in command for command in said):
        postgres_or_skip()  # its transcript shows what the machine's server answers
    if any("jq " in command for command in said) and shutil.which("jq") is None:
        if os.environ.get("CI"):
            pytest.fail("jq is needed in CI: the operator's transcript pipes JSON into it")
        pytest.skip("no jq on PATH: the transcript pipes JSON into it")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copy(BANK, tmp_path / "bank.py")
    bin_dir = Path(sys.executable).parent
    env = {key: value for key, value in os.environ.items() if not key.startswith("SAFEACT_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    for block in blocks:
        found = FILE.match(block.code)
        if found is not None:
            (tmp_path / found["name"]).write_text(block.code)
            continue
        status = 0
        for command, expected in commands(block):
            # Each command runs in a bash of its own, told the last one's exit status, so
            # that a transcript's `echo $?` prints what it would in one shell; and in a
            # session of its own, as a terminal's shell puts each command in a process group
            # of its own (a process of a dead owner's group may be its child, still acting).
            completed = subprocess.run(
                ["bash", "-c", f"(exit {status}); {command}"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=180,
                check=False,
                start_new_session=True,
            )
            # A command killed by a signal: a shell's $? says 128 + its number.
            code = completed.returncode
            status = code if code >= 0 else 128 - code
            assert shown(expected, completed.stdout), (
                f"{block.name}: $ {command}\nshown:\n{expected}\nprinted:\n{completed.stdout}"
            )


def test_an_ellipsis_stands_for_any_text_and_nothing_else_differs() -> None:
    """``...`` matches across lines; any other difference fails the transcript."""
    assert shown("a ... c\n...\nz", "a b c\nx\ny\nz")
    assert not shown("a ... c", "a b d")
    assert not shown("paid once", "paid once\npaid twice")


@pytest.mark.parametrize("block", json_blocks(), ids=lambda block: block.name)
def test_the_json_parses(block: Block) -> None:
    """A json block is JSON."""
    json.loads(block.code)


def test_a_check_comment_with_an_unknown_word_is_refused(tmp_path: Path) -> None:
    """A misspelt check word is an error, not a block silently run or skipped."""
    page = tmp_path / "page.md"
    page.write_text("<!-- check: type -->\n```python\npass\n```\n")
    with pytest.raises(ValueError, match="unknown check words"):
        read_blocks(page)


def test_the_readme_saga_is_among_the_examples_run() -> None:
    """The README's saga example is run, not only type-checked (it once failed as written)."""
    assert any(
        "Saga(" in program.block.code
        for program in PROGRAMS
        if program.block.page.name == "README.md" and program.runs
    )
