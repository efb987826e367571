"""Coverage that cannot rot: every command of the `portal` tree has a test that runs it to success and one that
checks a clear error of it, and every method of the SDK's resources is called by a test (directly, or by a command
that is tested). Read from the sources of tests/client, so a new command or method without a test fails here.

What counts, in a test function of tests/client/test_*.py:
- a run of a command: `cli("runs", "submit", …)` (or `run(…)`, the installed command in a process of its own), its
  path being the leading string arguments that name groups and commands (options before them skipped);
- its happy path: the result's `.stdout` is read, or its `.exit_code`/`.returncode` is compared with 0;
- a clear error: the result is passed to `fails(result, code, …)` (tests/client/expect.py), or its exit code is
  compared with a non-zero number.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import click
from portal_client import Client
from portal_client.cli import main

HERE = Path(__file__).parent
RUNNERS = {"cli", "run"}
EXIT = {"exit_code", "returncode"}


def leaf_commands(group: click.Group = main, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    found: dict[tuple[str, ...], click.Command] = {}
    for name, command in group.commands.items():
        path = (*prefix, name)
        if isinstance(command, click.Group):
            found.update(leaf_commands(command, path))
        else:
            found[path] = command
    return found


def command_path(args: list[str]) -> tuple[str, ...] | None:
    """The command `portal ARGS…` runs, or None when the literal arguments do not name one."""
    command: click.Command = main
    path: list[str] = []
    i = 0
    while isinstance(command, click.Group) and i < len(args):
        token = args[i]
        if token.startswith("-"):
            option = next((p for p in command.params if token in getattr(p, "opts", ())), None)
            takes_value = isinstance(option, click.Option) and not option.is_flag and "=" not in token
            i += 2 if takes_value else 1
            continue
        if token not in command.commands:
            return None
        command = command.commands[token]
        path.append(token)
        i += 1
    return tuple(path) if not isinstance(command, click.Group) else None


@dataclass
class Seen:
    happy: set[str] = field(default_factory=set)  # test ids
    error: set[str] = field(default_factory=set)


def _literal_args(call: ast.Call) -> list[str]:
    args = []
    for arg in call.args:
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            break
        args.append(arg.value)
    return args


def _runner_call(node: ast.AST) -> ast.Call | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in RUNNERS:
        return node
    return None


def _nonzero(node: ast.AST) -> bool | None:
    """True for a non-zero int literal, False for 0, None for anything else (the first element of a tuple)."""
    if isinstance(node, ast.Tuple) and node.elts:
        node = node.elts[0]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value != 0
    return None


def _exit_of(node: ast.AST) -> ast.AST | None:
    """`X.exit_code` (or the first element of a tuple that starts with it) → X."""
    if isinstance(node, ast.Tuple) and node.elts:
        node = node.elts[0]
    if isinstance(node, ast.Attribute) and node.attr in EXIT:
        return node.value
    return None


def scan_function(func: ast.FunctionDef) -> tuple[dict[int, str], set[int], set[int]]:
    """(id of each runner call → its literal args joined, ids of calls checked as happy, ids checked as errors)."""
    calls: dict[int, ast.Call] = {}
    names: dict[str, list[tuple[int, int]]] = defaultdict(list)  # name → (line, call) of each assignment
    for node in ast.walk(func):
        if (call := _runner_call(node)) is not None:
            calls[id(call)] = call
        if isinstance(node, ast.Assign) and (call := _runner_call(node.value)) is not None:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id].append((node.lineno, id(call)))

    def calls_of(expr: ast.AST | None) -> list[int]:
        if expr is None:
            return []
        if (call := _runner_call(expr)) is not None:
            return [id(call)]
        if isinstance(expr, ast.Name):  # the result of the last assignment to that name before this line
            before = [(line, key) for line, key in names.get(expr.id, []) if line <= expr.lineno]
            return [max(before)[1]] if before else []
        return []

    happy: set[int] = set()
    error: set[int] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Compare) and len(node.comparators) == 1:
            nonzero = _nonzero(node.comparators[0])
            for target in calls_of(_exit_of(node.left)):
                if nonzero is True:
                    error.add(target)
                elif nonzero is False:
                    happy.add(target)
        elif isinstance(node, ast.Attribute) and node.attr == "stdout":
            happy.update(calls_of(node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "fails" and node.args:
            error.update(calls_of(node.args[0]))
    return {key: _literal_args(call) for key, call in calls.items()}, happy, error


def scan_tests() -> tuple[dict[tuple[str, ...], Seen], set[tuple[str, str]]]:
    """What the tests of tests/client run: per command path, the tests of its happy path and of its errors; and
    every `X.<resource>.<method>(` called."""
    seen: dict[tuple[str, ...], Seen] = defaultdict(Seen)
    sdk_calls: set[tuple[str, str]] = set()
    for source in sorted(HERE.glob("test_*.py")):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Attribute):
                    sdk_calls.add((owner.attr, node.func.attr))
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            calls, happy, error = scan_function(node)
            for key, args in calls.items():
                path = command_path(args)
                if path is None:
                    continue
                test_id = f"{source.name}::{node.name}"
                if key in happy:
                    seen[path].happy.add(test_id)
                if key in error:
                    seen[path].error.add(test_id)
    return seen, sdk_calls


def test_the_scanner_reads_commands_and_what_their_tests_check():
    assert command_path(["-o", "yaml", "projects", "get", "x"]) == ("projects", "get")
    assert command_path(["--json", "runs", "logs", "1", "-f"]) == ("runs", "logs")
    assert command_path(["runs"]) is None
    assert command_path(["nope", "list"]) is None
    source = (
        "def test_x(cli):\n"
        "    ok = cli('projects', 'list')\n"
        "    assert ok.exit_code == 0\n"
        "    json.loads(cli('runs', 'get', '1').stdout)\n"
        "    fails(cli('models', 'get', 'x'), 6, 'No')\n"
        "    bad = cli('datasets', 'get', 'x')\n"
        "    assert (bad.exit_code, bad.stderr) == (6, '')\n"
        "    cli('tokens', 'list')\n"
    )
    calls, happy, error = scan_function(ast.parse(source).body[0])
    by_args = {tuple(args): key for key, args in calls.items()}
    assert by_args[("projects", "list")] in happy
    assert by_args[("runs", "get", "1")] in happy
    assert by_args[("models", "get", "x")] in error
    assert by_args[("datasets", "get", "x")] in error
    unchecked = by_args[("tokens", "list")]
    assert unchecked not in happy
    assert unchecked not in error


def test_every_command_has_a_happy_path_and_a_clear_error_tested():
    seen, _sdk = scan_tests()
    missing = []
    for path in sorted(leaf_commands()):
        what = seen.get(path, Seen())
        lacks = [kind for kind, tests in (("happy path", what.happy), ("clear error", what.error)) if not tests]
        if lacks:
            missing.append(f"portal {' '.join(path)}: no test of its {' nor its '.join(lacks)}")
    assert not missing, "\n".join(missing)


def sdk_methods() -> dict[tuple[str, str], object]:
    client = Client("http://127.0.0.1:9")
    found = {}
    for name, resource in vars(client).items():
        if name in ("http", "url"):
            continue
        for method, member in inspect.getmembers(type(resource), inspect.isfunction):
            if not method.startswith("_"):
                found[(name, method)] = member
    client.close()
    return found


def test_every_sdk_method_is_called_by_a_test_or_by_a_tested_command():
    seen, sdk_calls = scan_tests()
    by_commands = set()
    for path, command in leaf_commands().items():
        if seen.get(path) and seen[path].happy:
            source = inspect.getsource(command.callback)
            by_commands.update(re.findall(r"client\.(\w+)\.(\w+)\(", source))
    missing = sorted(f"{res}.{method}" for res, method in sdk_methods() if (res, method) not in sdk_calls | by_commands)
    assert not missing, f"SDK methods no test calls: {', '.join(missing)}"
