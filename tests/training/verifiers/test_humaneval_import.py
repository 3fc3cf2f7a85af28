import json

from training.verifiers.humaneval_import import humaneval_problems, humaneval_tasks


def test_every_humaneval_problem_becomes_a_code_task_with_its_own_id():
    tasks = humaneval_tasks()
    problems = humaneval_problems()
    assert len(tasks) == len(problems) == 164
    assert [t["task_id"] for t in tasks] == [p["task_id"] for p in problems]
    assert all(t["kind"] == "code" and t["hidden_tests"] for t in tasks)
    first = tasks[0]
    assert {"args": [[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3], "expected": True} in first["hidden_tests"]
    json.dumps(tasks)


def test_every_canonical_solution_scores_correct_and_a_wrong_one_does_not(code_verifier):
    tasks = humaneval_tasks()
    results = code_verifier.verify_many([(t, t["reference_solution"]) for t in tasks])
    failures = [(r.task_id, r.reason) for r in results if r.status != "correct"]
    assert failures == []
    stub = [(t, t["prompt"] + "    return None\n") for t in tasks[:20]]
    assert all(r.status == "wrong" for r in code_verifier.verify_many(stub))
