import subprocess
import sys

from training.verifiers.reward_function import make_reward_function

MATH = {"task_id": "speed-001", "kind": "math", "prompt": "How fast?", "answer": "50", "unit": "km/h"}


def test_trl_shaped_call_scores_dataset_columns(add_task, add_solution):
    reward = make_reward_function(workers=1)
    try:
        columns = {
            "prompts": ["p1", "p2", "p3", "p4"],
            "task_id": ["speed-001", "speed-001", "add-001", "bad"],
            "kind": ["math", "math", "code", "math"],
            "answer": ["50", "50", None, "\\frac{"],
            "unit": ["km/h", "km/h", None, None],
            "prompt": ["How fast?"] * 3 + ["?"],
            "entry_point": [None, None, "add", None],
            "reference_solution": [None, None, add_task["reference_solution"], None],
            "public_tests": [None, None, add_task["public_tests"], None],
            "hidden_tests": [None, None, add_task["hidden_tests"], None],
            "trainer_state": None,
        }
        completions = [
            [{"role": "assistant", "content": "The answer is $\\boxed{50 \\text{ km/h}}$"}],
            [{"role": "assistant", "content": "The answer is 75 km/h"}],
            [{"role": "assistant", "content": f"```python\n{add_solution}```"}],
            [{"role": "assistant", "content": "The answer is 5"}],
        ]
        rewards = reward(completions=completions, **columns)
        assert rewards[0] == 1.0
        assert 0.0 <= rewards[1] < 1.0
        assert rewards[2] == 1.0
        # The gold answer cannot be parsed: the verifier cannot score, so no reward, not 0.
        assert rewards[3] is None
        assert reward.__name__ == "pairwise_verifier"
    finally:
        reward.close()


def test_tasks_given_up_front_are_looked_up_by_id():
    reward = make_reward_function([MATH], workers=1)
    try:
        assert reward(["The answer is 50 km/h"], task_id=["speed-001"]) == [1.0]
    finally:
        reward.close()


def test_verifiers_import_without_django():
    code = (
        "import sys, training.verifier_commands, training.verifiers.reward_function, training.tasks, "
        "training.verifiers.code_verifier, training.verifiers.math_verifier\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'annotate', 'celery', 'rest_framework')]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
