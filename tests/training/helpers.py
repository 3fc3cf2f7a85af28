"""Helpers the training tests (and the runs tests that train) share."""


def write_unlearnable_tasks(path):
    """Missing-information tasks answered in at most four characters: too few to say what is missing ("unknown")
    or to mark an answer ("Answer:"), so every answer of every group is wrong with reward 0, whatever the model."""
    from training.task_families import make_tasks
    from training.tasks import write_tasks

    write_tasks(path, make_tasks("missing", n=6, seed=0))
    return path
