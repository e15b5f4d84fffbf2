"""Every command the docs show is checked, so the docs cannot rot.

Each `muster ...`, `kubectl muster ...` and `./run ...` in a fenced shell block (```sh, ```bash,
```shell, ```console or untagged) of README.md and docs/**/*.md must parse with muster's own
argparse parser: an unknown subcommand or flag fails with the file and line. The ones that need
no cluster (`muster sim`, `muster trace burst`, any `--help`, `./run demo`, and the benchmarks in
SCALED with their size flags made smaller) are run here, in document order in a temporary
directory, so a line may read what an earlier one wrote. Every command that needs a cluster must
be listed in CLUSTER with the cluster test that runs it; a documented command that is neither
run here nor listed fails, and so does a CLUSTER entry whose test does not exist or never names
the command.

The same goes for docs/metrics.md: every metric the controller exports is documented there, and
every documented metric exists.
"""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import re
import shlex
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from muster import cli

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console", "zsh"}

# Commands that need a cluster (or build one), and the cluster test that runs each of them.
_LIFECYCLE = "tests/cluster/test_lifecycle.py::test_up_is_idempotent_and_down_leaves_no_process"
_CERTS = "tests/cluster/test_manifests.py::test_muster_certs_writes_the_secret_and_ca_bundle_and_keeps_them"  # noqa: E501
_CLI = "tests/cluster/test_cli.py"
_HISTORY = "tests/cluster/test_history.py::test_history_after_jobs_finish_and_after_a_restart"
CLUSTER: dict[tuple[str, ...], str] = {
    ("cluster", "up"): _LIFECYCLE,
    ("cluster", "down"): _LIFECYCLE,
    ("cluster", "status"): _LIFECYCLE,
    ("cluster", "env"): f"{_CLI}::test_cluster_env_prints_the_kubeconfig",
    ("run",): "tests/conftest.py::start_muster",
    ("certs",): _CERTS,
    # Root, mmdebstrap and umoci, and a minute or more: the slow image test builds it again.
    ("image", "build"): "tests/cluster/test_image.py::"
    "test_a_second_build_from_the_same_inputs_has_the_same_digest",
    ("bench", "admit"): f"{_CLI}::test_documented_bench_admit_runs_small",
    ("bench", "pipeline"): f"{_CLI}::test_documented_bench_pipeline_runs_small",
    ("bench", "status"): f"{_CLI}::test_documented_bench_status_runs_small",
    ("bench", "kueue-perf"): "tests/cluster/test_bench_kueue_perf.py::"
    "test_documented_bench_kueue_perf_runs_a_small_generator",
    ("queues",): f"{_CLI}::test_queues_shows_usage_of_an_admitted_gang",
    ("status",): f"{_CLI}::test_status_shows_pending_and_position",
    ("explain",): f"{_CLI}::test_explain_prints_the_planners_reason",
    ("history",): _HISTORY,
    # `muster sim --engine kwok` replays on a real control plane (its helper adds "sim").
    ("sim", "--engine", "kwok"): "tests/kwok_replays.py::replay_both",
    # ... and hands the replay to an outside controller with `--admission external`.
    ("sim", "--admission", "external"): "tests/cluster/test_kwok_external.py::replay",
}

# Commands that need no cluster but minutes at their documented size: run here with these
# flags made smaller (the command is otherwise the one the docs show).
SCALED: dict[tuple[str, ...], dict[str, str]] = {
    ("bench", "sim"): {"--gangs": "200", "--nodes": "20"},
    ("bench", "plan"): {"--pending": "200", "--nodes": "40", "--queues": "10", "--runs": "2"},
    ("trace", "family"): {"--seed-range": "1-2", "--nodes": "8-10"},
}

# Run here, in a temporary directory.
RUN_HERE: set[tuple[str, ...]] = {("sim",), ("trace", "burst"), ("trace", "from-kueue-perf")}

# `./run` verbs other than `demo` (which is `muster sim` and runs here).
RUN_SCRIPT = {
    "setup": "the first step of ./run test and ./run demo: this suite runs after it",
    "test": "runs this suite",
}

# Placeholders the docs use in commands, and a value each parses as.
PLACEHOLDERS = {
    "N": "1000",
    "NS/NAME": "team-a/train-64",
    "NAME": "train-64",
    "NS": "team-a",
    "URL": "http://localhost:8081",
    "TRACE": "blog-burst",
    "K": "kubeconfig",
    "PID": "1",
}

# Files documented commands read without an earlier line writing them: what stands in for each.
INPUTS = {
    "my-trace.yaml": REPO / "simulator/traces/two-queues.yaml",
    "jobs.csv": REPO / "simulator/traces/jobs-example.csv",
    "history.csv": REPO / "simulator/traces/history-example.csv",
    # The blog burst with SmallestFirst, as docs/benchmarks.md (Ordering) makes it with sed.
    "blog-smallest.yaml": REPO / "tests/data/blog-burst-smallest.yaml",
    # Kueue's generator files beside the repository (docs/benchmarks.md): a small one of the
    # same format stands in, so the documented conversion and replay run in seconds.
    "../shared/bench/kueue-perf/baseline/generator.yaml": REPO
    / "tests/data/kueue-generator-tiny.yaml",
}

_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:/[A-Z][A-Z0-9_]*)*$")
_COMMAND_HINT = re.compile(
    r"(^|[\s;&|(\"'])(\$\s+)?(muster|kubectl-muster|\.venv/bin/muster|\./run)\b"
)
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"}
_REDIRECTS = {">", ">>", "<", "2>", "2>>", "&>", ">&", "<<<"}
_WRAPPERS = {"time", "exec", "eval", "nohup", "env", "sudo"}


@dataclass(frozen=True)
class DocCommand:
    """One documented command: where it is, what it says, and muster's argv for it."""

    path: Path
    line: int
    text: str
    argv: tuple[str, ...]
    script: str | None = None  # the `./run` verb, for ./run commands

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def words(self) -> tuple[str, ...]:
        """The subcommand words (before the first option or argument that is not one)."""
        parser_words: list[str] = []
        for arg in self.argv:
            if arg.startswith("-"):
                break
            candidate = (*parser_words, arg)
            if any(c.words[: len(candidate)] == candidate for c in cli.COMMANDS):
                parser_words.append(arg)
            else:
                break
        return tuple(parser_words)


def _blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number of the first line, lines) of each fenced shell block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*(```+|~~~+)\s*([\w-]*)", lines[i])
        if not fence:
            i += 1
            continue
        marker, lang = fence.group(1), fence.group(2).lower()
        start, body = i + 2, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marker):
            body.append(lines[i])
            i += 1
        i += 1
        if lang in SHELL_BLOCKS:
            yield start, body


def _logical_lines(start: int, body: list[str]) -> Iterator[tuple[int, str]]:
    """Lines with backslash continuations joined, each with its first line's number."""
    pending, first = "", start
    for offset, line in enumerate(body):
        if not pending:
            first = start + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield first, pending + line
        pending = ""
    if pending:
        yield first, pending


def _simple_commands(line: str) -> Iterator[list[str]]:
    """The simple commands of one shell line (and of its `$(...)` substitutions)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    current: list[str] = []
    skip_next = False
    for token in lexer:
        if skip_next:
            skip_next = False
            continue
        if token in _SEPARATORS:
            yield current
            current = []
        elif token in _REDIRECTS:
            skip_next = True
        else:
            for inner in _SUBSTITUTION.findall(token):
                yield from _simple_commands(inner)
            current.append(token)
    yield current


def _command(path: Path, line: int, tokens: list[str]) -> DocCommand | None:
    while tokens and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]) or tokens[0] in _WRAPPERS):
        tokens = tokens[1:]
    if tokens[:1] == ["$"]:
        tokens = tokens[1:]
    if not tokens:
        return None
    head = tokens[0]
    text = " ".join(tokens)
    if head in ("muster", "kubectl-muster") or head.endswith("/bin/muster"):
        return DocCommand(path, line, text, tuple(tokens[1:]))
    if head == "kubectl" and tokens[1:2] == ["muster"]:
        return DocCommand(path, line, text, tuple(tokens[2:]))
    if head == "./run":
        verb = tokens[1] if len(tokens) > 1 else ""
        argv = ("sim", *tokens[2:]) if verb == "demo" else ()
        return DocCommand(path, line, text, argv, script=verb)
    return None


def documented_commands(paths: Sequence[Path] = DOCS) -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in paths:
        for start, body in _blocks(path.read_text()):
            for number, line in _logical_lines(start, body):
                if not _COMMAND_HINT.search(line):
                    continue
                try:
                    commands = list(_simple_commands(line))
                except ValueError as exc:
                    raise AssertionError(
                        f"{path.relative_to(REPO)}:{number}: cannot read as shell: {exc}"
                    ) from None
                for tokens in commands:
                    command = _command(path, number, tokens)
                    if command is not None:
                        found.append(command)
    return found


COMMANDS = documented_commands()


def _substituted(command: DocCommand) -> list[str]:
    argv = []
    for arg in command.argv:
        if _PLACEHOLDER.match(arg):
            if arg not in PLACEHOLDERS:
                raise AssertionError(
                    f"{command.where}: placeholder {arg!r} in `{command.text}`: add it to "
                    "PLACEHOLDERS in tests/unit/test_doc_commands.py with a value it parses as"
                )
            arg = PLACEHOLDERS[arg]
        argv.append(arg)
    return argv


def parse_error(argv: Sequence[str]) -> str | None:
    """Why muster's parser refuses `argv` (its last error line), or None if it parses."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            args = cli.build_parser(argv).parse_args(argv)
        except SystemExit as exc:
            if exc.code == 0:  # --help, --version
                return None
            lines = err.getvalue().strip().splitlines()
            return lines[-1] if lines else f"exit {exc.code}"
    if getattr(args, "_command", None) is None:
        return "not a complete command: a group needs one of its subcommands"
    return None


def _is_help(command: DocCommand) -> bool:
    return "--help" in command.argv or "-h" in command.argv


def _key(command: DocCommand) -> tuple[str, ...]:
    """The command's words, plus the engine for `muster sim --engine kwok` (needs a cluster) and
    the outside controller for `--admission external` (needs one that admits)."""
    argv = command.argv
    if command.words == ("sim",) and (
        "--engine=kwok" in argv
        or any(a == "--engine" and b == "kwok" for a, b in itertools.pairwise(argv))
    ):
        if any(
            a == "--admission" and "external" in b.split(",") for a, b in itertools.pairwise(argv)
        ):
            return ("sim", "--admission", "external")
        return ("sim", "--engine", "kwok")
    return command.words


def _run_here(command: DocCommand) -> bool:
    if command.script is not None:
        return command.script == "demo"
    if _is_help(command):
        return True
    key = _key(command)
    return key in RUN_HERE or key in SCALED


def _scaled(command: DocCommand, argv: list[str]) -> list[str]:
    smaller = SCALED.get(command.words, {})
    return [smaller.get(argv[i - 1], a) if i else a for i, a in enumerate(argv)]


def test_the_docs_show_commands() -> None:
    # If extraction broke, every other test here would pass on nothing.
    assert len(COMMANDS) >= 10
    assert any(c.words == ("sim",) for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.where)
def test_documented_command_parses(command: DocCommand) -> None:
    if command.script is not None and command.script != "demo":
        known = set(re.findall(r"^\s{2}([a-z|]+)\)", (REPO / "run").read_text(), re.M))
        verbs = {v for arm in known for v in arm.split("|")}
        assert command.script in verbs, (
            f"{command.where}: `{command.text}`: ./run has no verb {command.script!r} "
            f"(it has: {', '.join(sorted(verbs))})"
        )
        assert command.script in RUN_SCRIPT, f"{command.where}: add {command.script} to RUN_SCRIPT"
        return
    error = parse_error(_substituted(command))
    assert error is None, f"{command.where}: `{command.text}`: {error}"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.where)
def test_documented_command_is_run_somewhere(command: DocCommand) -> None:
    if _run_here(command) or command.script in RUN_SCRIPT:
        return
    assert _key(command) in CLUSTER, (
        f"{command.where}: `{command.text}` is neither run here nor listed in CLUSTER in "
        "tests/unit/test_doc_commands.py: add the cluster test that runs it to that table"
    )


def _function_strings(test_id: str) -> set[str]:
    """The string constants inside the test (function) that `test_id` names."""
    file, _, name = test_id.partition("::")
    tree = ast.parse((REPO / file).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return {
                n.value
                for n in ast.walk(node)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            }
    raise AssertionError(f"{test_id}: no function {name} in {file}")


@pytest.mark.parametrize(("words", "test_id"), CLUSTER.items(), ids=lambda v: str(v))
def test_table_entries_name_tests_that_run_the_command(
    words: tuple[str, ...], test_id: str
) -> None:
    strings = _function_strings(test_id)
    if words[:1] == ("sim",) and len(words) > 1:
        words = words[1:]  # the kwok test's helper adds "sim" itself
    # The command's words appear as arguments (["queues", ...]) or in one command string.
    joined = " ".join(words)
    assert set(words) <= strings or any(joined in s for s in strings), (
        f"{test_id} never names `muster {joined}`"
    )


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_cheap_documented_commands_run(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = [c for c in COMMANDS if c.path == path and _run_here(c)]
    if not commands:
        return
    # In a directory below tmp_path, so an input named `../x` stays inside it too.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    (tmp_path / "tmp").mkdir()
    for name, source in INPUTS.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, work / name)
    for command in commands:
        # Absolute /tmp paths stay inside this test's directory.
        argv = [a.replace("/tmp/", f"{tmp_path}/tmp/") for a in _substituted(command)]
        argv = _scaled(command, argv)
        if _is_help(command):
            with pytest.raises(SystemExit) as info:
                cli.main(argv)
            code = info.value.code
        else:
            code = cli.main(argv)
        output = capsys.readouterr()
        assert code == 0, f"{command.where}: `{command.text}` exited {code}:\n{output.err[-2000:]}"


def test_scaled_commands_keep_every_other_flag() -> None:
    command = DocCommand(REPO, 1, "", ("bench", "sim", "--gangs", "10000", "--json"))
    assert _scaled(command, list(command.argv)) == ["bench", "sim", "--gangs", "200", "--json"]


def test_extraction_reads_shell_like_a_shell(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "```bash\n"
        '$ eval "$(muster cluster env --name a)"  # a comment: muster nope\n'
        "muster queues -o json | jq .queues && kubectl muster status ns/x \\\n"
        "   --status-url http://h:1 > out.txt\n"
        "./run demo --seed 3\n"
        "FOO=1 muster sim &\n"
        "```\n"
        "```python\nmuster sim\n```\n"
        "```\nmuster trace burst --jobs 3\n```\n"
    )
    found = [(c.line, c.argv, c.script) for c in documented_commands([doc])]
    assert found == [
        (2, ("cluster", "env", "--name", "a"), None),
        (3, ("queues", "-o", "json"), None),
        (3, ("status", "ns/x", "--status-url", "http://h:1"), None),
        (5, ("sim", "--seed", "3"), "demo"),
        (6, ("sim",), None),
        (12, ("trace", "burst", "--jobs", "3"), None),
    ]


@pytest.mark.parametrize(
    ("argv", "wrong"),
    [
        (["sim", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["no-such-command"], "invalid choice: 'no-such-command'"),
        (["cluster"], "not a complete command"),
    ],
)
def test_parse_error_catches_what_rots(argv: list[str], wrong: str) -> None:
    error = parse_error(argv)
    assert error is not None and wrong in error


def test_every_metric_is_documented() -> None:
    from admission.metrics import ControllerMetrics
    from webhook.metrics import registry_for
    from webhook.review import WebhookState

    metrics = ControllerMetrics()
    metrics.track_requests(lambda: 0)
    metrics.track_reviews(lambda: 0)
    exported = set()
    for registry in (metrics.registry, registry_for(WebhookState())):
        for family in registry.collect():
            suffix = "_total" if family.type == "counter" else ""
            exported.add(family.name + suffix)
    text = (REPO / "docs/metrics.md").read_text()
    documented = set(re.findall(r"^\| `(muster_[a-z_]+)` \|", text, re.M))
    assert exported - documented == set(), "exported but not in docs/metrics.md"
    assert documented - exported == set(), "in docs/metrics.md but not exported"
