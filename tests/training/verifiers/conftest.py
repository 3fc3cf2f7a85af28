import pytest

from training.verifiers.code_verifier import CodeVerifier
from training.verifiers.math_verifier import MathVerifier

ADD_TASK = {
    "task_id": "add-001",
    "kind": "code",
    "prompt": "Write add(a, b) that returns a + b.",
    "entry_point": "add",
    "reference_solution": "def add(a, b):\n    return a + b\n",
    "public_tests": [{"args": [1, 2], "expected": 3}],
    "hidden_tests": [{"args": [5, 7], "expected": 12}, {"args": [-4, 4]}],
    "random_tests": {
        "generator": "def generate(rng):\n    return [rng.randint(-99, 99), rng.randint(-99, 99)]",
        "count": 5,
    },
    "limits": {"time_s": 1, "memory_mb": 128},
}
ADD_SOLUTION = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="session")
def code_verifier():
    verifier = CodeVerifier(workers=2)
    yield verifier
    verifier.close()


@pytest.fixture(scope="session")
def math_verifier():
    verifier = MathVerifier(workers=2)
    yield verifier
    verifier.close()


@pytest.fixture
def add_task():
    import copy

    return copy.deepcopy(ADD_TASK)


@pytest.fixture
def add_solution():
    return ADD_SOLUTION
