"""Rules for the tests themselves (docs/testing.md), checked on their source like tests/test_layers.py:

- no assertion about a measured duration: speed is shown by benchmarks that print their figures, never by a
  test (a timed assertion fails on a loaded machine). A deadline that only bounds a wait for something to happen
  is fine: those are listed in DEADLINE_GUARDS with the reason.
- every test asserts something: an `assert`, `pytest.raises`/`warns`/`fail`, or a call of a function (in its
  module, or imported by name from tests/conftest.py or tests/helpers) that does; a method call never counts,
  whatever its name. Tests that check otherwise are listed in NO_ASSERT.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"time", "perf_counter", "monotonic", "time_ns", "perf_counter_ns", "monotonic_ns"}

# "file::function" -> why a comparison with the clock there bounds a wait rather than measures a duration.
DEADLINE_GUARDS = {
    "test_train_resume.py::test_sigkill_then_resume_is_bitwise_identical":
        "waits (at most 240 s) for the training subprocess to save a state before killing it",
    "test_train_multinode.py::test_two_nodes_and_slurm_tasks_match_one_node_and_resume_after_a_kill":
        "waits (at most 600 s) for the two-node run to save a state before killing it",
    "test_preemption_cluster.py::wait_for_state": "waits (at most 300 s) for a state file to appear",
    "test_preemption_cluster.py::test_timeouts_exhausted_is_one_line":
        "waits (at most 300 s) for a new state before signalling the job again",
    "test_faults.py::_start_and_interrupt": "waits (at most 240 s) for a logged step before sending SIGINT",
}
# "file::test" -> how the test checks without an assert of its own.
NO_ASSERT: dict[str, str] = {}


@functools.cache
def _sources() -> tuple[tuple[str, ast.Module], ...]:
    return tuple((str(path.relative_to(TESTS)), ast.parse(path.read_text(), filename=str(path)))
                 for path in sorted(TESTS.rglob("*.py")))


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _clock_aliases(tree: ast.Module) -> set[str]:
    """Names bound by `from time import perf_counter` (and the like) in a module."""
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and node.module == "time" for alias in node.names if alias.name in CLOCKS}


def _reads_clock(node: ast.AST, aliases: set[str], timed: set[str]) -> bool:
    """The expression reads the clock, or a name that holds a clock reading (or one derived from it)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            if (isinstance(f, ast.Attribute) and f.attr in CLOCKS and isinstance(f.value, ast.Name)
                    and f.value.id == "time") or (isinstance(f, ast.Name) and f.id in aliases):
                return True
        if isinstance(sub, ast.Name) and sub.id in timed:
            return True
    return False


def timed_assertions(tree: ast.Module) -> dict[str, list[int]]:
    """function name -> lines of the assertions in it that compare a clock reading (or a value derived from one,
    such as `time.perf_counter() - t0` or `t0 + 240`)."""
    aliases, found = _clock_aliases(tree), {}
    if not aliases and not any(isinstance(node, ast.Import) and any(a.name == "time" for a in node.names)
                               for node in ast.walk(tree)):
        return found  # the module never reads the clock
    for fn in _functions(tree):
        timed: set[str] = set()
        for _ in range(3):  # names derived from names derived from the clock
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None \
                        and _reads_clock(node.value, aliases, timed):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    timed |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        lines = [node.lineno for node in ast.walk(fn) if isinstance(node, ast.Assert)
                 and any(isinstance(c, ast.Compare) and _reads_clock(c, aliases, timed) for c in ast.walk(node.test))]
        if lines:
            found[fn.name] = lines
    return found


def _calls(fn: ast.AST) -> set[str]:
    """The functions `fn` calls by a bare name (its module's, or imported by name from tests/helpers); a method or
    another module's function (`core.step(...)`) never counts as a test helper, whatever its name."""
    return {node.func.id for node in ast.walk(fn) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def _asserts_itself(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "raises", "warns", "fail", "deprecated_call") and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == "pytest":
            return True
    return False


@functools.cache
def _summary(tree: ast.Module) -> tuple[tuple[str, bool, frozenset[str]], ...]:
    """(name, asserts itself, names it calls) of each function of a module."""
    return tuple((fn.name, _asserts_itself(fn), frozenset(_calls(fn))) for fn in _functions(tree))


def asserting_functions(trees: list[ast.Module]) -> set[str]:
    """Names of the functions (in these modules) that assert, themselves or through another such function."""
    defs = [summary for tree in trees for summary in _summary(tree)]
    found = {name for name, asserts, _ in defs if asserts}
    while True:
        more = {name for name, _, calls in defs if name not in found and calls & found}
        if not more:
            return found
        found |= more


def silent_tests(tree: ast.Module, shared: list[ast.Module]) -> list[str]:
    """The test functions of a module that assert nothing, themselves or through a function that does."""
    helpers = asserting_functions([tree, *shared])
    return [name for name, asserts, calls in _summary(tree) if name.startswith("test_")
            and not (asserts or calls & helpers)]


def unasserting_tests() -> list[str]:
    sources = dict(_sources())
    shared = [tree for name, tree in sources.items() if name == "conftest.py" or name.startswith("helpers")]
    return [f"{name}::{test}" for name, tree in sources.items() if Path(name).name.startswith("test_")
            for test in silent_tests(tree, shared)]


def test_no_test_asserts_on_a_measured_duration() -> None:
    found = {f"{name}::{fn}": lines for name, tree in _sources() for fn, lines in timed_assertions(tree).items()}
    timed = {where: lines for where, lines in found.items() if where not in DEADLINE_GUARDS}
    assert not timed, f"assertions on measured durations (print them in a benchmark instead): {timed}"
    stale = set(DEADLINE_GUARDS) - set(found)
    assert not stale, f"DEADLINE_GUARDS entries with no clock comparison left: remove {sorted(stale)}"


def test_every_test_asserts_something() -> None:
    silent = unasserting_tests()
    missing = [where for where in silent if where not in NO_ASSERT]
    assert not missing, f"tests that assert nothing (add an assertion, or list them in NO_ASSERT): {missing}"
    stale = set(NO_ASSERT) - set(silent)
    assert not stale, f"NO_ASSERT entries that assert now: remove {sorted(stale)}"


BAD = '''
import time
from time import perf_counter as clock
import pytest

def test_timed():
    t0 = time.perf_counter()
    work()
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0

def test_timed_alias():
    start = clock()
    assert clock() - start < 2

def test_deadline():
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline

def test_untimed():
    assert len(time.strftime("%Y")) == 4

def check(x):
    assert x

def test_through_a_helper():
    check(1)

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_nothing():
    work()

def step(x):
    assert x

def test_a_method_named_like_a_helper():
    core.step(1)
'''


def test_the_scans_find_what_they_look_for() -> None:
    """The rules above can fail: on a module with each kind of test, they flag exactly the bad ones."""
    tree = ast.parse(BAD)
    assert set(timed_assertions(tree)) == {"test_timed", "test_timed_alias", "test_deadline"}
    assert silent_tests(tree, []) == ["test_nothing", "test_a_method_named_like_a_helper"]
