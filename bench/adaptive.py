"""Adaptive overlap against a fixed overlap: export accuracy per judgment, with reviewers of known quality.

    .venv/bin/python bench/adaptive.py [--pairs 800] [--seeds 3] [--database-url postgres|postgres://...]

A simulated world with a known truth: 8 models with true Bradley-Terry strengths, one answer pair per
prompt from two different models, and for each pair the truly better answer (drawn once from the
strengths). Ten reviewers judge through the real queue and judgment services (assignment_next,
judgment_submit, as the API calls them): one random clicker, one left-biased (clicks "left" 60% of the
time whatever is there), and eight careful reviewers who see the better answer with a per-pair
accuracy between 0.70 and 0.95 and call a tie 5% of the time. Left and right are the queue's own coin.

Part 1, every pair judged until the queue has nothing left: fixed overlaps 3 and 5 against adaptive
overlaps, at the judgments each needs. Part 2, the same budget of judgments (what a fixed overlap of 3
spends on --pairs pairs) over a pool of three times as many pairs, in which some models answered far
more prompts than others (as on a leaderboard that checkpoints join at different times): how many correct
rows it buys, and the models' rating intervals, with and without leaderboard priority (refreshed every
--refresh-every judgments, as the periodic task would).

Export accuracy is read from real snapshots (annotate/exports/pipeline.py snapshot_write: strict
majority, split pairs left out): the share of exported rows whose chosen answer is the truly better one.
Ratings and their 95% bootstrap intervals are annotate/quality/ratings.py's. Every figure is the mean
over --seeds worlds (different truths, reviewers' draws and orders), with its standard deviation.

Runs on a fresh embedded SQLite database in a temporary folder by default, or on a PostgreSQL database
the bench creates and drops (`pairwise_bench_adaptive`). Prints tables and writes
bench/results/adaptive.json. Target: the same export accuracy with at least 30% fewer judgments.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and the apps

from bench.common import (
    drop_database,
    machine,
    recreate_database,
    results_path,
    setup_django_and_migrate,
    utc_timestamp,
    write_results,
)

PG_DB = "pairwise_bench_adaptive"
MODELS = 8
CAREFUL = 8
TIE_RATE = 0.05
LEFT_BIAS = 0.6
TARGET_SAVING = 0.30
SAME_ACCURACY = 0.01  # "the same export accuracy": a row accuracy at most one point below the fixed overlap's

# Part 1: (label, settings for project_create_or_update, the fixed overlap it is compared with).
PART1 = [
    ("fixed 3", {"overlap": 3}, None),
    ("fixed 5", {"overlap": 5}, None),
    ("adaptive 2-3 settled", {"min_overlap": 2, "max_overlap": 3, "overlap_stop_rule": "settled"}, "fixed 3"),
    ("adaptive 2-5 settled", {"min_overlap": 2, "max_overlap": 5, "overlap_stop_rule": "settled"}, "fixed 5"),
    ("adaptive 2-4 majority", {"min_overlap": 2, "max_overlap": 4, "overlap_stop_rule": "majority"}, "fixed 3"),
    ("adaptive 2-5 lead2", {"min_overlap": 2, "max_overlap": 5, "overlap_stop_rule": "lead2"}, "fixed 3"),
    ("adaptive 2-6 lead2", {"min_overlap": 2, "max_overlap": 6, "overlap_stop_rule": "lead2"}, "fixed 5"),
]
# Part 2: the same budget of judgments, with and without leaderboard priority.
PART2 = [
    ("fixed 3", {"overlap": 3}),
    ("adaptive 2-5 lead2", {"min_overlap": 2, "max_overlap": 5}),
    ("fixed 3 + leaderboard", {"overlap": 3, "leaderboard_priority": True}),
    ("adaptive 2-5 lead2 + leaderboard", {"min_overlap": 2, "max_overlap": 5, "leaderboard_priority": True}),
]


@dataclass
class World:
    """The truth of one seed: model strengths, each prompt's two models and which answer is better."""

    strength: np.ndarray
    items: list[dict]
    better_text: dict[str, str]  # prompt_id -> the text of the truly better answer
    accuracy: dict[str, float]  # prompt_id -> how often a careful reviewer sees it
    seed: int
    index: dict[str, int]  # prompt_id -> its number in the world


def make_world(*, pairs: int, seed: int, skewed: bool = False) -> World:
    """`skewed`: some models answered far more prompts than others (the k-th most frequent 1/k as often),
    as on a leaderboard that checkpoints join at different times; else every model equally often."""
    rng = np.random.default_rng(seed)
    strength = np.sort(rng.normal(0.0, 0.8, MODELS))[::-1]
    frequency = 1.0 / (1.0 + rng.permutation(MODELS)) if skewed else np.ones(MODELS)
    items, better_text, accuracy = [], {}, {}
    for i in range(pairs):
        a, b = rng.choice(MODELS, size=2, replace=False, p=frequency / frequency.sum())
        prompt_id = f"s{seed}-q{i:05d}"
        texts = {a: f"Answer of model {a} to question {i} of world {seed}.",
                 b: f"Answer of model {b} to question {i} of world {seed}."}
        a_better = rng.random() < 1.0 / (1.0 + np.exp(-(strength[a] - strength[b])))
        better_text[prompt_id] = texts[a] if a_better else texts[b]
        accuracy[prompt_id] = float(rng.uniform(0.70, 0.95))
        items.append({"prompt_id": prompt_id, "prompt": f"Question {i} of world {seed}?",
                      "responses": [{"text": texts[a], "model": f"m{a}"}, {"text": texts[b], "model": f"m{b}"}]})
    return World(strength=strength, items=items, better_text=better_text, accuracy=accuracy, seed=seed,
                 index={item["prompt_id"]: i for i, item in enumerate(items)})


def click_of(*, kind: str, rng: np.random.Generator, better_on_left: bool, accuracy: float) -> str:
    """What a reviewer of this kind clicks, given where the better answer is shown.

    `rng` is seeded by (world, reviewer, prompt): a reviewer shown the same pair in two projects of the
    bench decides the same way (common random numbers), so the projects differ only in who is asked and
    when a pair stops, and their difference is measured with far less noise.
    """
    if kind == "random":
        return str(rng.choice(["left", "right", "tie", "both_bad"], p=[0.45, 0.45, 0.05, 0.05]))
    if kind == "left" and rng.random() < LEFT_BIAS:
        return "left"
    if rng.random() < TIE_RATE:
        return "tie"
    sees_better = rng.random() < accuracy
    return "left" if sees_better == better_on_left else "right"


def setup_django(database_url: str | None) -> None:
    # In memory where the machine has it: the figures are about judgments, not about the disk's flushes.
    memory = "/dev/shm" if Path("/dev/shm").is_dir() else None
    os.environ["PAIRWISE_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-adaptive-", dir=memory)
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    else:
        os.environ.pop("DATABASE_URL", None)  # the embedded SQLite file in the temporary folder
    setup_django_and_migrate()


def reviewers() -> list[tuple[object, str]]:
    from annotate.review.users import user_add

    kinds = ["random", "left"] + ["careful"] * CAREFUL
    made = []
    for i, kind in enumerate(kinds):
        user, _, _ = user_add(username=f"sim{i:02d}-{kind}", role="reviewer", password=uuid.uuid4().hex)
        made.append((user, kind))
    return made


def run_project(*, slug: str, settings: dict, world: World, team, seed: int, budget: int | None,
                refresh_every: int) -> dict:
    """Judge a project through the queue until it is done (or the budget is spent); measure its export."""
    from annotate.quality.queue_priorities import queue_priorities_refresh
    from annotate.review.assignments import assignment_next
    from annotate.review.demo_data import DEMO_CRITERIA
    from annotate.review.import_sql import items_import
    from annotate.review.importing import items_parse
    from annotate.review.judgments import judgment_submit
    from annotate.review.projects import project_create_or_update

    project, _, _ = project_create_or_update(
        slug=slug, name=slug, instructions=DEMO_CRITERIA["instructions"], criteria_items=DEMO_CRITERIA["criteria"],
        retest_rate=0, **settings,
    )
    items_import(project=project, items=items_parse(json.dumps(item) for item in world.items))
    texts = {pair.pk: (pair.prompt.external_id, pair.response_a.text)
             for pair in project.pairs.select_related("prompt", "response_a")}
    rng = np.random.default_rng(seed)  # who asks next: the same order in every project of a world
    active = list(range(len(team)))
    judged, started = 0, time.perf_counter()
    while active and (budget is None or judged < budget):
        pick = int(rng.integers(len(active)))
        user, kind = team[active[pick]]
        assignment = assignment_next(project=project, reviewer=user)
        if assignment is None:
            active.pop(pick)  # nothing is left for them; nothing reopens: every assignment is judged at once
            continue
        prompt_id, a_text = texts[assignment.pair_id]
        a_better = world.better_text[prompt_id] == a_text
        decides = np.random.default_rng([world.seed, active[pick], world.index[prompt_id]])
        click = click_of(kind=kind, rng=decides, better_on_left=a_better == assignment.a_on_left,
                         accuracy=world.accuracy[prompt_id])
        judgment_submit(
            assignment_id=assignment.pk, reviewer=user, choice=click,
            strength=int(rng.integers(1, 4)) if click in ("left", "right") else None,
            criteria={"correct": click if click in ("left", "right") else "tie", "complete": "tie"},
            rationale=f"Judged on correctness and completeness ({judged}).", client_key=uuid.uuid4(),
        )
        judged += 1
        if project.leaderboard_priority and judged % refresh_every == 0:
            queue_priorities_refresh(project=project)
    seconds = time.perf_counter() - started
    return {"judgments": judged, "seconds": seconds, **export_measure(project=project, world=world),
            **ratings_measure(project=project, world=world)}


def export_measure(*, project, world: World) -> dict:
    """A real snapshot of the project: its rows' agreement with the truth."""
    from annotate.exports.filters import ExportFilters
    from annotate.exports.pipeline import snapshot_write

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "snapshot"
        manifest = snapshot_write(project=project, filters=ExportFilters(), out_dir=out,
                                  created_at="2026-01-01T00:00:00Z")
        rows = [json.loads(line) for name in ("train.jsonl", "test.jsonl") for line in
                (out / name).read_text().splitlines()]
    prompt_of = dict(project.pairs.values_list("pk", "prompt__external_id"))
    correct = sum(row["chosen"][0]["content"] == world.better_text[prompt_of[row["meta"]["pair_id"]]] for row in rows)
    pairs = project.pairs.count()
    return {"pairs": pairs, "pairs_judged": manifest["counts"]["pairs_considered"], "rows": len(rows),
            "row_accuracy": correct / len(rows) if rows else None, "correct_rows": correct,
            "no_consensus": manifest["counts"]["excluded"]["no_consensus"]}


def ratings_measure(*, project, world: World) -> dict:
    """Bradley-Terry ratings of the models with 95% bootstrap intervals, against the true strengths.

    Two kinds of interval: each model's rating (annotate/quality/ratings.py, as the dashboard shows them),
    and what a leaderboard needs, the difference between two models next to each other in the true order
    (the same fit, fit_bradley_terry, on 200 resamples of the judgments).
    """
    from scipy.stats import kendalltau

    from annotate.quality.ratings import bradley_terry_ratings, fit_bradley_terry
    from annotate.quality.selectors import judgment_table_for_project

    table = judgment_table_for_project(project=project)
    ratings = bradley_terry_ratings(table=table, n_resamples=200, rng=np.random.default_rng(0))
    model_of_name = np.array([int(name.split("@")[0][1:]) for name in table.model_names], dtype=np.int64)
    true = world.strength[model_of_name[ratings.model]]

    counted = ~table.is_retest & (table.model_a != table.model_b)
    first, second = model_of_name[table.model_a[counted]], model_of_name[table.model_b[counted]]
    winner = table.winner[counted]
    first_scores = np.where(winner == 0, 1.0, np.where(winner == 1, 0.0, 0.5))  # a tie is half a win each
    resample = np.random.default_rng(0).integers(0, first.size, size=(200, first.size))
    scores = np.zeros((201, MODELS, MODELS))
    for r, rows in enumerate([np.arange(first.size), *resample]):
        np.add.at(scores[r], (first[rows], second[rows]), first_scores[rows])
        np.add.at(scores[r], (second[rows], first[rows]), 1.0 - first_scores[rows])
    theta = fit_bradley_terry(score=scores)
    order = np.argsort(-world.strength)  # true order, best first
    differences = theta[:, order[:-1]] - theta[:, order[1:]]  # each model minus the next one down
    low, high = np.quantile(differences[1:], [0.025, 0.975], axis=0)
    return {"mean_interval_width": float((ratings.ci_high - ratings.ci_low).mean()),
            "neighbour_difference_width": float((high - low).mean()),
            "neighbours_in_order": float((differences[0] > 0).mean()),
            "rank_tau": float(kendalltau(ratings.rating, true).statistic)}


def summary(values: list[float | None]) -> dict:
    values = [v for v in values if v is not None]
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0}


def fmt(stat: dict, digits: int = 3) -> str:
    return f"{stat['mean']:.{digits}f} ± {stat['sd']:.{digits}f}"


def main() -> int:
    try:
        return run()
    finally:
        if "PAIRWISE_DATA_DIR" in os.environ and Path(os.environ["PAIRWISE_DATA_DIR"]).name.startswith("bench-adaptive-"):
            shutil.rmtree(os.environ["PAIRWISE_DATA_DIR"], ignore_errors=True)


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=800, help="pairs per project in part 1; the budget of part 2 is 3x this")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--refresh-every", type=int, default=100, help="judgments between leaderboard priority refreshes")
    parser.add_argument("--database-url", default="", help="empty: embedded SQLite; 'postgres': a database of its own")
    parser.add_argument("--out", type=Path, default=results_path("adaptive"))
    args = parser.parse_args()

    database_url = args.database_url
    if database_url == "postgres":
        database_url = recreate_database(PG_DB)
    setup_django(database_url or None)
    team = reviewers()

    part1: dict[str, list[dict]] = {label: [] for label, _, _ in PART1}
    part2: dict[str, list[dict]] = {label: [] for label, _ in PART2}
    for seed in range(args.seeds):
        world = make_world(pairs=args.pairs, seed=seed)
        for k, (label, settings, _) in enumerate(PART1):
            part1[label].append(run_project(slug=f"p1-{seed}-{k}", settings=settings, world=world, team=team,
                                            seed=seed, budget=None, refresh_every=args.refresh_every))
            print(f"seed {seed} {label}: {part1[label][-1]['judgments']} judgments", file=sys.stderr)
        pool = make_world(pairs=3 * args.pairs, seed=1000 + seed, skewed=True)
        for k, (label, settings) in enumerate(PART2):
            part2[label].append(run_project(slug=f"p2-{seed}-{k}", settings=settings, world=pool, team=team,
                                            seed=seed, budget=3 * args.pairs, refresh_every=args.refresh_every))
            print(f"seed {seed} {label}: {part2[label][-1]['judgments']} judgments", file=sys.stderr)

    keys = ("judgments", "rows", "row_accuracy", "correct_rows", "no_consensus", "mean_interval_width",
            "neighbour_difference_width", "neighbours_in_order", "rank_tau", "seconds")
    table1 = {label: {key: summary([run[key] for run in runs]) for key in keys} for label, runs in part1.items()}
    table2 = {label: {key: summary([run[key] for run in runs]) for key in keys} for label, runs in part2.items()}

    print(f"\nPart 1: {args.pairs} pairs, every pair judged until the queue is empty; "
          f"mean ± sd over {args.seeds} seeds")
    print(f"{'overlap':<24} {'judgments':>15} {'per pair':>9} {'rows':>13} {'row accuracy':>15} "
          f"{'correct rows':>15} {'CI width':>15}")
    for label, row in table1.items():
        print(f"{label:<24} {fmt(row['judgments'], 0):>15} {row['judgments']['mean'] / args.pairs:>9.2f} "
              f"{fmt(row['rows'], 0):>13} {fmt(row['row_accuracy']):>15} {fmt(row['correct_rows'], 0):>15} "
              f"{fmt(row['mean_interval_width']):>15}")
    verdicts = []
    print(f"\nAgainst a fixed overlap, same pairs and reviewers (target: {TARGET_SAVING:.0%} fewer judgments, "
          f"row accuracy at most {SAME_ACCURACY:.2f} lower):")
    for label, _, reference in PART1:
        if reference is None:
            continue
        runs, fixed = part1[label], part1[reference]
        saving = [1 - a["judgments"] / f["judgments"] for a, f in zip(runs, fixed, strict=True)]
        accuracy_change = [a["row_accuracy"] - f["row_accuracy"] for a, f in zip(runs, fixed, strict=True)]
        yield_change = [a["correct_rows"] / f["correct_rows"] - 1 for a, f in zip(runs, fixed, strict=True)]
        verdict = {
            "adaptive": label, "fixed": reference, "judgments_saved": summary(saving),
            "row_accuracy_change": summary(accuracy_change), "correct_rows_change": summary(yield_change),
            "meets_target": statistics.fmean(saving) >= TARGET_SAVING
            and statistics.fmean(accuracy_change) >= -SAME_ACCURACY,
        }
        verdicts.append(verdict)
        print(f"  {label:<24} vs {reference:<8}: {100 * verdict['judgments_saved']['mean']:5.1f}% fewer judgments "
              f"(sd {100 * verdict['judgments_saved']['sd']:.1f}), row accuracy {verdict['row_accuracy_change']['mean']:+.3f} "
              f"(sd {verdict['row_accuracy_change']['sd']:.3f}), correct rows "
              f"{100 * verdict['correct_rows_change']['mean']:+.1f}%  target met: {verdict['meets_target']}")

    met = ", ".join(f"{v['adaptive']} (against {v['fixed']})" for v in verdicts if v["meets_target"])
    print(f"Target met by: {met}" if met else "Target not met by any adaptive setting")

    print(f"\nPart 2: the same {3 * args.pairs} judgments over a pool of {3 * args.pairs} pairs, some models "
          f"answered far more often than others; mean ± sd over {args.seeds} seeds")
    print(f"{'overlap':<34} {'rows':>11} {'row accuracy':>14} {'correct rows':>12} {'CI width':>14} "
          f"{'neighbour CI':>14} {'in order':>14} {'rank tau':>14}")
    for label, row in table2.items():
        print(f"{label:<34} {fmt(row['rows'], 0):>11} {fmt(row['row_accuracy']):>14} {fmt(row['correct_rows'], 0):>12} "
              f"{fmt(row['mean_interval_width']):>14} {fmt(row['neighbour_difference_width']):>14} "
              f"{fmt(row['neighbours_in_order']):>14} {fmt(row['rank_tau']):>14}")
    print("CI width: mean width of the models' 95% rating intervals; neighbour CI: of the difference between "
          "two models next to each other in the true order; in order: share of those neighbours ranked right.")

    from django.db import connection

    report = {
        "benchmark": "adaptive", "pairs": args.pairs, "seeds": args.seeds, "database": connection.vendor,
        "reviewers": {"random": 1, "left_biased": 1, "careful": CAREFUL, "left_bias": LEFT_BIAS,
                      "careful_accuracy": [0.70, 0.95], "tie_rate": TIE_RATE},
        "models": MODELS, "target_saving": TARGET_SAVING, "same_accuracy_tolerance": SAME_ACCURACY,
        "part1_every_pair_done": table1, "part1_against_fixed": verdicts,
        "part2_same_budget": {"budget": 3 * args.pairs, "pool": 3 * args.pairs, "refresh_every": args.refresh_every,
                              "model_frequency": "the k-th most frequent model answers 1/k as often",
                              "results": table2},
        "runs": {"part1": part1, "part2": part2},
        "machine": machine(),
        "created_at": utc_timestamp(),
    }
    write_results(args.out, report)
    if args.database_url == "postgres":
        connection.close()
        drop_database(PG_DB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
