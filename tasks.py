"""Project commands that need only Python 3.11: each makes the virtual environment it needs.

python3 tasks.py demo      run examples/agent_loop.py (its ledger stays in .demo/)
python3 tasks.py refund-demo  run examples/refund_agent.py, the saga demo
python3 tasks.py docs [--build]
                           build the documentation site strictly and serve it on
                           http://127.0.0.1:8000 (--build: build it into site/ and stop)
python3 tasks.py test      run the whole test suite (tests/ and the typings/ contract)
python3 tasks.py check     mypy --strict, ruff check and ruff format --check
python3 tasks.py artifact  build the wheel, install it, run the SQLite half of the suite on it
python3 tasks.py stress    a long run of the Hypothesis state machine
python3 tasks.py bench [--peers] [--quick]
                           the benchmark; --peers measures the peers too, in .venv-bench
python3 tasks.py mutants   the named mutants: each guarantee broken on purpose turns a test red
python3 tasks.py mutate [--fresh | --score] [NAMES]
                           mutmut over the core modules ([tool.mutmut] in pyproject.toml), scored;
                           verdicts kept in mutation/ and taken up by the next run
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
# The versions the benchmark's peer rows were written against; boto3 only because
# Powertools' idempotency package imports its DynamoDB layer whichever layer is used.
BENCH_PEERS = (
    "effect-ledger==0.1.2",
    "dbos==3.4.0",
    "aws-lambda-powertools[redis]==3.37.0",
    "redis==8.1.0",
    "boto3==1.44.8",
)
MUTMUT = ("mutmut==3.8.1", "pytest-timeout==2.4.0")
"""mutmut, and the per-test time-out that ends a mutant which deadlocks its event loop."""
MCP1 = "mcp==1.30.0"
"""The other major of the MCP SDK that safeact.mcp supports (the dev pin is 2.x)."""
DETECTED = {1, 3, 24, -24, 36, 152, 255}
"""mutmut's exit codes for a mutant the tests caught: a red test, or a time-out."""
UNCAUGHT = {0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", None: "not run"}
ALREADY_RAN = (
    "test_sigkill_in_the_step_then_recovery_is_in_doubt",  # tests/test_dbos.py
    "test_resolved_as_happened_recovery_replays",  # tests/test_dbos.py
    "test_sigkill_after_the_refund_then_resume_pauses",  # tests/test_langgraph.py
    "test_sigkill_then_resume_with_a_verdict_finishes",  # tests/test_langgraph.py
    "test_sigkill_inside_the_tool_then_a_retry_gets_the_receipt",  # tests/test_mcp.py
    "test_a_retry_on_a_restarted_server_replays",  # tests/test_mcp.py
    "test_retry_after_a_killed_worker_is_in_doubt",  # tests/test_temporal.py
    "test_sigkill_in_a_durable_tool_then_recovery_is_in_doubt",  # tests/test_pydantic_ai.py
    "test_killed_as_a_script_then_resumed_with_m_pauses",  # tests/test_langgraph.py
    "test_killed_then_resumed_after_a_deploy_that_adds_a_defaulted_parameter",  # the same
    "test_proof_across",  # owners on a second machine, in process trees and namespaces
    "test_interrupted_lock",  # a real SIGINT into SQLite's busy wait
    "test_crash_harness_adapters",  # the crash harness through LangGraph and MCP: 40 runs
)
"""The crash tests of the integrations and of proof: ``artifact`` leaves them to ``test``,
which ran them on the tree. Each starts interpreters that import a framework, or run in
namespaces of their own, and are killed or interrupted (seconds apiece), to check safeact's
logic, not its packaging, which the other tests of their module use too."""
NEED_TEMPORAL_SERVER = (
    "test_temporal_server",
    "test_pydantic_ai_temporal",
    "test_temporal_example_fails_in_doubt_then_a_rerun_pays_once",  # tests/test_demo.py
)
"""Tests (modules, or a test) that run a Temporal dev server and workers: like ALREADY_RAN
they check safeact's logic, not its packaging, at the cost of a server's start (seconds),
and ``test`` ran them on the tree."""
ARTIFACT_TESTS = (
    "typings or test_import_safeact_does_not_need_the_postgres_extra"
    f" or not (postgres or {' or '.join(ALREADY_RAN + NEED_TEMPORAL_SERVER)})"
)
"""``artifact``'s ``-k``: typings/ whole, the SQLite half of tests/ (``tests.mutants`` picks
it the same way), the check that the installed package imports psycopg only when asked,
and not ALREADY_RAN."""


def main() -> None:
    """Run the command named on the command line."""
    if sys.version_info < (3, 11):  # noqa: UP036 - tells users of an older python3 why
        sys.exit("safeact needs Python 3.11 or newer")
    commands = {
        "demo": demo,
        "refund-demo": refund_demo,
        "docs": docs,
        "test": test,
        "check": check,
        "artifact": artifact,
        "stress": stress,
        "mutants": mutants,
        "mutate": mutate,
        "bench": bench,
    }
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](sys.argv[2:])


def run(*command: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> None:
    """Run a command; stop with its exit code if it fails."""
    print("$", " ".join(str(part) for part in command), flush=True)
    completed = subprocess.run([str(part) for part in command], cwd=cwd, env=env, check=False)
    if completed.returncode != 0:
        sys.exit(completed.returncode)


def venv(path: Path, *requirements: str) -> Path:
    """Create ``path`` with ``requirements`` installed, unless it is already up to date."""
    python = path / "bin" / "python"
    stamp = path / "installed"
    wanted = hashlib.sha256(
        "\n".join([(ROOT / "pyproject.toml").read_text(), *requirements]).encode()
    ).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted and python.exists():
        return python
    if not python.exists():
        run(sys.executable, "-m", "venv", path)
    run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(python, "-m", "pip", "install", "--quiet", *requirements)
    stamp.write_text(wanted)
    return python


BROWSER = (Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver"))
"""Debian's Chromium and its WebDriver, which tests/test_inbox_browser.py drives."""


def browser() -> None:
    """Install Debian's Chromium and its driver for the browser tests, where this can.

    Where it cannot (no apt-get, or not root), the browser tests skip, saying so, except
    under CI, where they fail.
    """
    if all(path.exists() for path in BROWSER):
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        print(
            "tasks.py: no /usr/bin/chromium and /usr/bin/chromedriver here, and no way to "
            "install them (apt-get as root): the browser tests will skip",
            flush=True,
        )
        return
    install = ("apt-get", "install", "-y", "-q", "chromium", "chromium-driver")
    if subprocess.run(install, check=False).returncode != 0:  # stale package lists, maybe
        run("apt-get", "update", "-q")
        run(*install)


def dev_python() -> Path:
    """Return the interpreter of .venv, with safeact (editable) and the dev tools."""
    return venv(VENV, "--editable", f"{ROOT}[dev]")


MCP1_NEEDS = ("pytest", "pytest-cov", "pytest-xdist", "coverage", "hypothesis")
"""What tests/test_mcp.py needs beside safeact[mcp], at the dev pins: its run on mcp 1.x
installs these and no other development tool (pytest-xdist, so that `tasks.py test -n N`,
passed to both runs, works on both)."""


def mcp1_python() -> Path:
    """Return the interpreter of .venv-mcp1: safeact[mcp] on mcp 1.x, and MCP1_NEEDS.

    The versions are the dev pins of pyproject.toml, read from it, so both runs test with
    the same tools.
    """
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [
        pin
        for pin in extras["optional-dependencies"]["dev"]
        if pin.split("[")[0].split("==")[0] in MCP1_NEEDS
    ]
    return venv(ROOT / ".venv-mcp1", "--editable", f"{ROOT}[mcp]", *pins, MCP1)


def addopts_without_typings() -> str:
    """Return pytest's addopts from pyproject.toml without pytest-mypy-plugins' options.

    The mcp 1.x run does not collect typings/, and its environment leaves out
    pytest-mypy-plugins (and mypy with it), whose option pytest would refuse as unknown.
    """
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    return " ".join(
        option for option in options["ini_options"]["addopts"] if not option.startswith("--mypy-")
    )


def demo_python() -> Path:
    """Return the interpreter of .venv-demo: safeact (editable) and what it needs, no more.

    The demos import safeact alone, so a new user waits for three small packages, not for
    the development tools the test suite needs.
    """
    return venv(ROOT / ".venv-demo", "--editable", str(ROOT))


def demo(_: list[str]) -> None:
    """Run the scripted agent loop, which crashes itself, restarts and resolves."""
    run(demo_python(), ROOT / "examples" / "agent_loop.py", ROOT / ".demo")


def refund_demo(_: list[str]) -> None:
    """Run the refund saga, which fails, rolls back, dies mid-rollback and finishes later."""
    run(demo_python(), ROOT / "examples" / "refund_agent.py")


def docs(arguments: list[str]) -> None:
    """Build the documentation site with warnings as errors; serve it unless --build.

    MkDocs reads the docstrings from the source, so .venv-docs holds the site's tools only
    (the dependency group ``docs``). Its code blocks are run by tests/test_docs.py.
    """
    python = venv(ROOT / ".venv-docs", "--group", f"{ROOT / 'pyproject.toml'}:docs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice, not a warning
    run(python, "-m", "mkdocs", "build", "--strict", "--site-dir", ROOT / "site", env=env)
    if "--build" not in arguments:
        run(python, "-m", "mkdocs", "serve", "--strict", "--dev-addr", "127.0.0.1:8000", env=env)


WORKERS = ("-n", "2", "--dist", "worksteal")
"""pytest-xdist's workers for the two long runs: most of a run waits on child processes and
servers, so two workers fill the two cores CI has (tests/conftest.py gives each worker a
process group of its own: an owner's end includes its group's later processes)."""


def test(arguments: list[str]) -> None:
    """Run tests/ and typings/, then the MCP tests on mcp 1.x; branch coverage of both."""
    python = dev_python()
    browser()
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run(
        python,
        "-m",
        "pytest",
        *WORKERS,
        "--cov=safeact",
        "--cov-branch",
        "--cov-report=",
        *arguments,
        env=env,
    )
    # safeact.mcp serves both majors of the MCP SDK: its tests run again on 1.x, and the
    # coverage threshold applies to the union of the two runs.
    mcp1 = mcp1_python()
    env = {**os.environ, "PATH": f"{mcp1.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run(
        mcp1,
        "-m",
        "pytest",
        "tests/test_mcp.py",
        "tests/test_mcp_approval.py",
        "-o",
        f"addopts={addopts_without_typings()}",
        "--cov=safeact",
        "--cov-branch",
        "--cov-append",
        "--cov-report=term",
        "--cov-fail-under=95",
        *arguments,
        env=env,
    )


def check(_: list[str]) -> None:
    """Type-check and lint everything."""
    python = dev_python()
    run(python, "-m", "mypy")
    run(python, "-m", "ruff", "check", ".")
    run(python, "-m", "ruff", "format", "--check", ".")


def artifact(arguments: list[str]) -> None:
    """Build the wheel, install it with every extra in a fresh environment, test it there.

    Packaging is what this checks (what the wheel holds, py.typed, each extra's requirements
    resolved and imported), so it runs ARTIFACT_TESTS: `test` already ran the PostgreSQL half
    and the crash tests against the tree, and the wheel holds the same code.
    """
    python = dev_python()
    browser()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    every_extra = ",".join(sorted(project["optional-dependencies"]))
    with tempfile.TemporaryDirectory() as scratch:
        where = Path(scratch)
        run(
            python,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            where / "dist",
            ROOT,
        )
        (wheel,) = (where / "dist").glob("safeact-*.whl")
        # Every extra by name, so each one's declared requirements are resolved and used; read
        # from pyproject.toml, so a new extra cannot be left out.
        installed = venv(where / "venv", f"{wheel}[{every_extra}]")
        # DESIGN.md: tests/test_layers.py checks the imports against its map of the package;
        # README.md and docs/: tests/test_docs.py runs their examples on the installed wheel.
        for name in (
            "tests",
            "typings",
            "examples",
            "pyproject.toml",
            "DESIGN.md",
            "README.md",
            "docs",
        ):
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, where / name)
            else:
                shutil.copy(source, where / name)
        env = {**os.environ, "PATH": f"{installed.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        run(
            installed,
            "-c",
            "import safeact, sys; assert 'site-packages' in safeact.__file__, safeact.__file__",
            cwd=where,
            env=env,
        )
        run(
            installed,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *WORKERS,
            "-k",
            ARTIFACT_TESTS,
            *arguments,
            cwd=where,
            env=env,
        )


def stress(arguments: list[str]) -> None:
    """Run the ledger state machine, through both drivers, for many more examples than CI."""
    python = dev_python()
    env = {**os.environ, "SAFEACT_HYPOTHESIS_PROFILE": "stress"}
    run(python, "-m", "pytest", "tests/test_state_machine.py", *arguments, env=env)


def mutants(arguments: list[str]) -> None:
    """Run the named mutants (python -m tests.mutants)."""
    run(dev_python(), "-m", "tests.mutants", *arguments)


def mutate(arguments: list[str]) -> None:
    """Run mutmut over the modules and tests [tool.mutmut] names; print the score.

    Verdicts are kept in mutation/, one file per module, and taken up by the next run on any
    machine: mutmut runs only the mutants without one (new, or of a function that changed
    since). Mutant names or globs as arguments run those again; --fresh forgets every verdict.
    At the end (of an interrupted run too) the score block of DESIGN.md is written again from
    the verdicts in mutation/; --score only does that, from the verdicts kept, running nothing.
    """
    copy, kept = ROOT / "mutants", ROOT / "mutation"
    if "--score" in arguments:
        print_score(kept)
        write_score(kept, ROOT / "DESIGN.md")
        return
    python = venv(ROOT / ".venv-mutate", "--editable", f"{ROOT}[dev]", *MUTMUT)
    shutil.rmtree(copy, ignore_errors=True)
    (copy / "safeact").mkdir(parents=True)  # on PYTHONPATH from the start, for child processes
    if "--fresh" in arguments:
        for held in kept.glob("*.json"):  # the verdicts only: mutation/ holds HISTORY.md too
            held.unlink()
    for held in kept.glob("*.json"):  # as mutmut's own records, which it merges by hash
        durations: dict[str, dict[str, float]] = {
            "durations_by_key": {},
            "estimated_durations_by_key": {},
        }
        record = {**json.loads(held.read_text()), **durations}
        (copy / "safeact" / f"{held.stem}.py.meta").write_text(json.dumps(record))
    env = {**os.environ, "PYTHONPATH": str(copy), "SAFEACT_HYPOTHESIS_PROFILE": "ci"}
    names = [argument for argument in arguments if argument != "--fresh"]
    try:
        run(python.parent / "mutmut", "run", *names, env=env)
    finally:  # an interrupted run keeps the verdicts it reached
        kept.mkdir(exist_ok=True)
        for meta in sorted((copy / "safeact").glob("*.py.meta")):
            record = json.loads(meta.read_text())
            module = meta.name.removesuffix(".py.meta")
            verdicts = {
                "hash_by_function_name": record["hash_by_function_name"],
                "exit_code_by_key": record["exit_code_by_key"],
            }
            (kept / f"{module}.json").write_text(json.dumps(verdicts, indent=0, sort_keys=True))
        print_score(kept, survivors=True)
        write_score(kept, ROOT / "DESIGN.md")


def mutation_score(kept: Path) -> dict[str, dict[str, int]]:
    """Count the verdicts kept in ``kept`` (its ``*.json``), per module and in all (``"all"``).

    Each count holds ``mutants``, ``run``, ``caught`` (an exit code in DETECTED) and, for each
    kind of verdict that is not caught, its UNCAUGHT name (``survived``, ``no tests``, or
    ``exit N`` for a code it does not name) with how many. The files alone decide: the same
    verdicts give the same figures on any machine, and nothing is run.
    """
    score: dict[str, dict[str, int]] = {}
    total = {"mutants": 0, "run": 0, "caught": 0}
    for held in sorted(kept.glob("*.json")):
        codes: dict[str, int | None] = json.loads(held.read_text())["exit_code_by_key"]
        row = {"mutants": len(codes), "run": 0, "caught": 0}
        for code in codes.values():
            if code is None:  # not run yet
                continue
            row["run"] += 1
            kind = "caught" if code in DETECTED else UNCAUGHT.get(code, f"exit {code}")
            row[kind] = row.get(kind, 0) + 1
        score[held.stem] = row
        for kind, count in row.items():
            total[kind] = total.get(kind, 0) + count
    score["all"] = total
    return score


def print_score(kept: Path, *, survivors: bool = False) -> None:
    """Print each module's caught, run and mutants; with ``survivors``, each mutant not caught."""
    print(f"{'module':<24}{'caught':>8}{'run':>6}{'mutants':>9}")
    for module, row in mutation_score(kept).items():
        print(f"{module:<24}{row['caught']:>8}{row['run']:>6}{row['mutants']:>9}")
    if survivors:
        alive = [
            f"{name}: {UNCAUGHT.get(code, f'exit {code}')}"
            for held in sorted(kept.glob("*.json"))
            for name, code in json.loads(held.read_text())["exit_code_by_key"].items()
            if code is not None and code not in DETECTED
        ]
        print("not caught (see: mutmut show NAME):", *alive, sep="\n  ")


def score_text(score: dict[str, dict[str, int]]) -> str:
    """The score's totals as the Markdown of DESIGN.md's block."""
    total = score["all"]
    mutants, run, caught = total["mutants"], total["run"], total["caught"]
    share = f" ({100 * caught / mutants:.1f} %)" if mutants else ""
    ran = "every one run" if run == mutants else f"{run:,} run, {mutants - run:,} not run yet"
    alive = [
        f"{count:,} {kind}"
        for kind, count in total.items()
        if kind not in {"mutants", "run", "caught"}
    ]
    uncaught = f" Not caught: {', '.join(alive)}." if alive else ""
    modules = len(score) - 1
    return (
        f"**{caught:,} of {mutants:,} mutants caught{share}**, in {modules} modules, {ran}."
        f"{uncaught}"
    )


def write_score(kept: Path, design: Path) -> None:
    """Rewrite the block between ``design``'s mutmut markers with the score of ``kept``; only it."""
    start, end = "<!-- mutmut:start -->", "<!-- mutmut:end -->"
    text = design.read_text()
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        sys.exit(f"{design.name} needs one {start} ... {end} block for the mutmut score")
    before, _, rest = text.partition(start)
    after = rest.partition(end)[2]
    block = score_text(mutation_score(kept))
    design.write_text(f"{before}{start}\n{block}\n{end}{after}")
    print(f"{design.name}'s score block: {block}")


def bench(arguments: list[str]) -> None:
    """Run the benchmark (python -m bench); with --peers, in .venv-bench with the peers."""
    if "--peers" not in arguments:
        run(dev_python(), "-m", "bench", *arguments)
        return
    python = venv(ROOT / ".venv-bench", "--editable", f"{ROOT}[postgres]", *BENCH_PEERS)
    run(python, "-m", "bench", *[argument for argument in arguments if argument != "--peers"])


if __name__ == "__main__":
    main()
