"""The migration that adds Prompt.content_key gives the prompts already stored their key."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotate.review.models import Prompt
from training.snapshot import prompt_key

BEFORE = [("review", "0003_drop_indexes_covered_by_composites")]
AFTER = [("review", "0004_prompt_content_key")]


@pytest.mark.django_db(transaction=True)
def test_prompts_stored_before_the_key_existed_get_it():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    project = old.get_model("review", "Project").objects.create(slug="old", name="Old")
    old_prompt = old.get_model("review", "Prompt")
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    for external_id, messages in [("first", [{"role": "user", "content": "2+2?"}]), ("again", [{"content": "2+2?", "role": "user"}]),
                                  ("chat", chat)]:
        old_prompt.objects.create(project=project, external_id=external_id, messages=messages)

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())  # back to where the other tests expect the schema

    keys = dict(Prompt.objects.values_list("external_id", "content_key"))
    assert keys == {"first": prompt_key("2+2?"), "again": prompt_key("2+2?"), "chat": prompt_key(chat)}
