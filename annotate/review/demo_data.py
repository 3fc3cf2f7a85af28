"""Sample prompts with answer pairs in the import format, for the demo, tests and benchmarks.

Word problems with two answers each from two versions of a model: one right and explained, one with a
common slip (averaging the speeds, dropping the unit) or right but bare. Some answers carry Markdown,
code and HTML, as real model answers do.
"""

import random

DEMO_CRITERIA = {
    "instructions": "Pick the answer a careful teacher would give a ten-year-old.",
    "criteria": [
        {"key": "correct", "text": "Every fact and every step is right."},
        {"key": "complete", "text": "It explains the conditions and the process, not only the result."},
    ],
}


# Every fifth prompt carries gold: 6 gold pairs in the default 30 prompts, for a few live gold checks. The
# onboarding demo takes gold every second prompt (15 of 30: its round of 5 items x 2 attempts, each attempt on gold
# the reviewer has not seen, and live checks).
GOLD_EVERY = 5


def _speed_item(rng: random.Random, index: int, gold_every: int) -> dict:
    hours = rng.choice([2, 3, 4, 5])
    speed = rng.choice([40, 45, 50, 60, 72, 80])
    total = speed * hours
    first = rng.randrange(10, total - 10, 5)
    second = total - first
    prompt = (
        f"A car travels {first} km, then {second} km. The whole trip takes {hours} hours. "
        "What is its average speed?"
    )
    right = (
        f"Average speed is total distance over total time.\n\n"
        f"- Total distance: {first} km + {second} km = **{total} km**\n"
        f"- Total time: **{hours} h**\n\n"
        f"So the average speed is {total} / {hours} = **{speed} km/h**."
    )
    slips = [
        f"The answer is {speed}.",
        f"Add the distances: {total}. Divide by the number of legs: {total / 2:g} km/h.",
        f"It goes {total} km in {hours} hours, so about {speed + rng.choice([-5, 5])} km/h.",
    ]
    wrong = rng.choice(slips)
    answers = [right, wrong]
    reason = "It divides the total distance by the total time and shows each step; the other does not."
    gold = {"preferred": 0, "reason": reason} if index % gold_every == 0 else None
    if rng.random() < 0.5:
        answers.reverse()
        gold = {"preferred": 1, "reason": reason} if gold else None
    item = {
        "prompt_id": f"speed-{index:03d}",
        "prompt": prompt,
        "responses": [
            {"text": answers[0], "model": "sft", "model_version": "v3"},
            {"text": answers[1], "model": "sft", "model_version": "v4"},
        ],
        "tags": ["math", "speed"],
    }
    if gold:
        item["gold"] = gold
    return item


def _code_item(index: int) -> dict:
    return {
        "prompt_id": f"code-{index:03d}",
        "prompt": [{"role": "user", "content": "Write a Python function `sort_numbers(xs)` that returns the list sorted."}],
        "responses": [
            {"text": "```python\ndef sort_numbers(xs):\n    return sorted(xs)\n```\n\n`sorted` returns a new list.",
             "model": "sft", "model_version": "v3"},
            {"text": "Use <b>bubble sort</b>: <script>alert('hi')</script>\n\n```python\ndef sort_numbers(xs):\n"
                     "    xs.sort()\n```", "model": "sft", "model_version": "v4"},
        ],
        "tags": ["code"],
    }


def demo_items(*, count: int = 30, seed: int = 0, gold_every: int = GOLD_EVERY) -> list[dict]:
    """`count` import rows; every tenth prompt is a code task, every `gold_every`th (a speed problem) carries gold."""
    rng = random.Random(seed)
    return [_code_item(i) if i % 10 == 9 else _speed_item(rng, i, gold_every) for i in range(count)]
