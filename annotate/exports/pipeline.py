"""The export pipeline: votes per pair → decisions → preference rows → `training.snapshot.SnapshotWriter`.

Kept out of the models and the Celery task: the task and the command call `snapshot_write`, the
page and the API call `export_preview`; both walk the same stream through `_plan`, so a preview's
counts are the counts the snapshot gets.

Consensus is the one rule the quality dashboard uses too (annotate/review/consensus.py: strict_majority),
decided for a batch of pairs at a time: the winner is the choice (a, b, tie, both_bad) with strictly more
votes than any other; a shared top count is no consensus and the pair is left out. Only an a or b
majority makes a row (chosen = the winner's response); a tie or both_bad majority is counted in the
manifest and left out.

Adjudicators' rulings (annotate/review/adjudication.py) may decide pairs instead (the `adjudications`
filter): with `split`, the latest ruling of a pair whose counted votes have no strict majority; with `all`,
the latest ruling of every ruled pair, whatever its votes. A pair a ruling decides skips the vote checks
(min_judgments, exclude_ties, min_agreement); tags, gold and max_pairs_per_prompt still apply. A ruling of
a or b makes a row (`meta.decided_by` "adjudication"); tie or both_bad leaves the pair out. The manifest
counts what the rulings did (`counts.adjudications`) and says how they were used
(`filters.adjudication_rule`).

A row's `meta.strength` (row_strength) is the deciding ruling's strength, else the mean strength of the counted
votes for the chosen answer; the votes query averages each side's strengths, so it costs no query of its own.
"""

from __future__ import annotations

import gc
import hashlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from annotate.exports.filters import ExportError, ExportFilters
from annotate.exports.selectors import (
    PairVotes,
    pair_votes_stream,
    qualification_answers_left_out,
    reviewer_ids_by_username,
)
from annotate.quality.agreement import krippendorff_alpha, percent_agreement
from annotate.review.adjudication import Ruling, latest_rulings
from annotate.review.choices import WINNER_BOTH_BAD, WINNER_SWAP, WINNER_TIE, WINNERS
from annotate.review.consensus import CONSENSUS_RULE, NO_CONSENSUS, strict_majority
from annotate.review.models import Project
from training.snapshot import SnapshotWriter

# Why a pair made no row, in the order the checks run; the first that applies is counted.
EXCLUSIONS = ("tags", "gold", "adjudicated_tie", "adjudicated_both_bad", "too_few_judgments", "tie_vote",
              "no_consensus", "both_bad_majority", "tie_majority", "below_min_agreement", "max_pairs_per_prompt")
ADJUDICATION_RULES = {
    "ignore": "rulings are not used: every pair is decided by its counted votes",
    "split": ("a pair whose counted votes have no strict majority is decided by its latest ruling; a or b makes a "
              "row, tie or both_bad leaves it out; other pairs are decided by their votes"),
    "all": ("every pair with a ruling is decided by its latest ruling, whatever its votes; a or b makes a row, tie "
            "or both_bad leaves it out; pairs without a ruling are decided by their votes"),
}
CONSENSUS_BATCH = 4096  # pairs whose consensus is decided in one vectorised call
# The checks of pair_exclusion that read only a pair's votes and consensus, in its order: vote_exclusions
# decides them for a batch of pairs at once.
VOTE_EXCLUSIONS = ("too_few_judgments", "tie_vote", "no_consensus", "both_bad_majority", "tie_majority",
                   "below_min_agreement")

ProgressCallback = Callable[[int], None]


def _winner_name(code: int) -> str | None:
    return None if code == NO_CONSENSUS else WINNERS[code]


def pair_exclusion(pair: PairVotes, filters: ExportFilters, *, winner: str | None, share: float,
                   ruling: str | None = None) -> str | None:
    """Why the pair makes no row (the first reason that applies), or None; winner and share are its consensus,
    `ruling` the adjudicator's winner when a ruling decides the pair (the vote checks are then skipped)."""
    if filters.tags and not set(filters.tags) & set(pair.tags):
        return "tags"
    if (filters.gold == "exclude" and pair.gold) or (filters.gold == "only" and not pair.gold):
        return "gold"
    if ruling is not None:
        return {"tie": "adjudicated_tie", "both_bad": "adjudicated_both_bad"}.get(ruling)
    if sum(pair.votes) < filters.min_judgments:
        return "too_few_judgments"
    if filters.exclude_ties and (pair.votes[2] or pair.votes[3]):
        return "tie_vote"
    if winner is None:
        return "no_consensus"
    if winner == "both_bad":
        return "both_bad_majority"
    if winner == "tie":
        return "tie_majority"
    if share < filters.min_agreement:
        return "below_min_agreement"
    return None


def prompt_split(*, prompt_key: str, seed: int, test_ratio: float) -> str:
    """'train' or 'test' for every pair of a prompt: a hash of (seed, prompt key), not of the database's ids.

    The key is the prompt's text (training.snapshot.prompt_key, stored as Prompt.content_key), not its
    import id: two ids with one text are one prompt, on one side, as the snapshot writer checks.
    """
    digest = hashlib.sha256(f"{seed}\x00{prompt_key}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2**64 < test_ratio else "train"


def vote_exclusions(votes: np.ndarray, winners: np.ndarray, shares: np.ndarray, filters: ExportFilters) -> np.ndarray:
    """pair_exclusion's vote checks for a batch: (p, 4) votes and their strict_majority winners and shares give,
    per pair, the index in VOTE_EXCLUSIONS of the first check that applies, or -1 when none does."""
    has_tie_vote = votes[:, WINNER_TIE] + votes[:, WINNER_BOTH_BAD] > 0
    conditions = [
        votes.sum(axis=1) < filters.min_judgments,
        has_tie_vote if filters.exclude_ties else np.zeros(len(votes), dtype=bool),
        winners == NO_CONSENSUS,
        winners == WINNER_BOTH_BAD,
        winners == WINNER_TIE,
        shares < filters.min_agreement,
    ]
    return np.select(conditions, list(range(len(VOTE_EXCLUSIONS))), default=-1)


def row_strength(pair: PairVotes, *, winner: str, ruling: Ruling | None) -> float | None:
    """A row's meta.strength: the deciding ruling's strength, else the mean strength of the counted votes for the
    winner that gave one (3 decimals); None when there is none. Strength says how strongly, not which side, so the
    un-swapped winner picks the votes and nothing is swapped back."""
    if ruling is not None:
        return None if ruling.strength is None else float(ruling.strength)
    mean = pair.strength_a if winner == "a" else pair.strength_b
    return None if mean is None else round(mean, 3)


# Not frozen, like PairVotes: built once per row, and a frozen dataclass is several times slower to build.
@dataclass(slots=True)
class PlannedRow:
    split: str
    pair: PairVotes
    winner: str
    share: float
    adjudicated: bool = False
    strength: float | None = None

    @property
    def meta(self) -> dict:
        pair, share = self.pair, self.share
        a, b, tie, both_bad = pair.votes  # WINNERS' order
        return {
            "pair_id": pair.pair_id,
            "prompt_id": pair.prompt_id,
            "votes": {"a": a, "b": b, "tie": tie, "both_bad": both_bad},
            "judgments": a + b + tie + both_bad,
            "consensus_share": round(share, 6),
            "decided_by": "adjudication" if self.adjudicated else (
                "unanimous" if share == 1.0 else "strict_majority"),
            "strength": self.strength,
            "criteria_version": pair.criteria_version,
        }


@dataclass
class Tally:
    """What the pipeline saw: the manifest's counts and every pair's votes (for the agreement summary)."""

    pairs_considered: int = 0
    judgments_counted: int = 0
    judgments_in_rows: int = 0
    excluded: Counter = field(default_factory=Counter)
    rows: Counter = field(default_factory=Counter)
    prompts: dict = field(default_factory=lambda: {"train": 0, "test": 0})
    criteria_versions: set = field(default_factory=set)
    votes: array = field(default_factory=lambda: array("i"))  # a, b, tie, both_bad of every pair seen
    adjudications: Counter = field(default_factory=Counter)
    qualification_answers_left_out: int = 0  # answers of the qualification round: never votes

    def counts(self) -> dict:
        return {
            "pairs_considered": self.pairs_considered,
            "judgments_counted": self.judgments_counted,
            "judgments_in_rows": self.judgments_in_rows,
            "qualification_answers_left_out": self.qualification_answers_left_out,
            "excluded": {reason: self.excluded[reason] for reason in EXCLUSIONS},
            "adjudications": {key: self.adjudications[key] for key in ADJUDICATION_COUNTS},
        }

    def criteria_version(self) -> int | None:
        """The one criteria version behind every row, or None when rows mix versions (or there are none)."""
        return next(iter(self.criteria_versions)) if len(self.criteria_versions) == 1 else None


# What counts.adjudications holds: pairs considered that have a ruling; rulings that decided a pair; of those,
# pairs whose votes were split, and pairs whose votes had a strict majority the ruling agreed with or overruled;
# rows made by a ruling.
ADJUDICATION_COUNTS = ("pairs_with_ruling", "rulings_used", "split_pairs_decided", "majorities_confirmed",
                       "majorities_overruled", "rows")


def _ruling_applies(filters: ExportFilters, *, ruling: Ruling | None, winner: str | None) -> bool:
    if ruling is None or filters.adjudications == "ignore":
        return False
    return filters.adjudications == "all" or winner is None


def _plan_prompt(group: list[PairVotes], decisions: Iterator[tuple[int, float, int]], filters: ExportFilters,
                 tally: Tally, rulings: dict[int, Ruling]) -> list[PlannedRow]:
    """The rows of one prompt's pairs; `decisions` yields each pair's (winner code, share, vote exclusion) in order
    (vote_exclusions)."""
    keep = []
    votes_alone_decide = not filters.tags and filters.gold == "include"  # no check that reads the prompt
    for pair in group:
        code, share, vote_reason = next(decisions)
        ruling = rulings.get(pair.pair_id) if rulings else None
        if ruling is None and votes_alone_decide:
            # pair_exclusion would find vote_reason: no prompt check applies and no ruling decides the pair.
            if vote_reason < 0:
                keep.append((pair, WINNERS[code], share, None))
            else:
                tally.excluded[VOTE_EXCLUSIONS[vote_reason]] += 1
            continue
        winner = _winner_name(code)
        adjudicated = _ruling_applies(filters, ruling=ruling, winner=winner)
        if ruling is not None:
            tally.adjudications["pairs_with_ruling"] += 1
        reason = pair_exclusion(pair, filters, winner=winner, share=share,
                                ruling=ruling.winner if adjudicated else None)
        if adjudicated and reason not in ("tags", "gold"):
            tally.adjudications["rulings_used"] += 1
            if winner is None:
                tally.adjudications["split_pairs_decided"] += 1
            else:
                tally.adjudications["majorities_confirmed" if ruling.winner == winner else "majorities_overruled"] += 1
        if reason is None:
            keep.append((pair, ruling.winner, share, ruling) if adjudicated else (pair, winner, share, None))
        else:
            tally.excluded[reason] += 1
    if filters.max_pairs_per_prompt is not None and len(keep) > filters.max_pairs_per_prompt:
        keep.sort(key=lambda item: (-item[2], -sum(item[0].votes), item[0].pair_id))
        tally.excluded["max_pairs_per_prompt"] += len(keep) - filters.max_pairs_per_prompt
        keep = sorted(keep[: filters.max_pairs_per_prompt], key=lambda item: item[0].pair_id)
    if not keep:
        return []
    split = prompt_split(prompt_key=group[0].prompt_key, seed=filters.seed, test_ratio=filters.test_ratio)
    tally.prompts[split] += 1
    rows = []
    for pair, winner, share, ruling in keep:  # ruling: the one that decided the pair, or None
        tally.rows[split] += 1
        tally.judgments_in_rows += sum(pair.votes)
        tally.criteria_versions.add(pair.criteria_version)
        tally.adjudications["rows"] += ruling is not None
        rows.append(PlannedRow(split=split, pair=pair, winner=winner, share=share, adjudicated=ruling is not None,
                               strength=row_strength(pair, winner=winner, ruling=ruling)))
    return rows


def _plan_batch(groups: list[list[PairVotes]], filters: ExportFilters, tally: Tally,
                rulings: dict[int, Ruling]) -> Iterator[PlannedRow]:
    """Rows of whole prompt groups, their pairs' consensus, vote checks and tallies decided in one call."""
    votes = np.array([pair.votes for group in groups for pair in group], dtype=np.int64).reshape(-1, len(WINNERS))
    winners, shares = strict_majority(votes)
    reasons = vote_exclusions(votes, winners, shares, filters)
    tally.pairs_considered += len(votes)
    tally.judgments_counted += int(votes.sum())
    tally.votes.frombytes(votes.astype(np.intc).tobytes())  # tally.votes is array("i"): a C int each
    decisions = zip(winners.tolist(), shares.tolist(), reasons.tolist(), strict=True)
    for group in groups:
        yield from _plan_prompt(group, decisions, filters, tally, rulings)


def _plan(stream: Iterable[PairVotes], filters: ExportFilters, tally: Tally,
          on_progress: ProgressCallback | None, rulings: dict[int, Ruling]) -> Iterator[PlannedRow]:
    """Rows to write, prompt by prompt (the stream comes ordered by prompt key, then pair): one group per
    prompt text, so its pairs share a split, a max_pairs_per_prompt and one count in the manifest."""
    groups: list[list[PairVotes]] = []
    group: list[PairVotes] = []
    pending = 0
    for pair in stream:
        if group and pair.prompt_key != group[0].prompt_key:
            groups.append(group)
            pending += len(group)
            group = []
            if pending >= CONSENSUS_BATCH:
                yield from _plan_batch(groups, filters, tally, rulings)
                groups, pending = [], 0
                if on_progress is not None:
                    on_progress(tally.pairs_considered)
        group.append(pair)
    if group:
        groups.append(group)
    yield from _plan_batch(groups, filters, tally, rulings)
    if on_progress is not None:
        on_progress(tally.pairs_considered)


def _flagged_reviewers(*, project: Project) -> list[dict]:
    """Reviewers the agreement report flags, with their flags: read from the project's stored report
    when it is current, recomputed (without intervals) when there is none or judgments came since.
    Either way the same judgments give the same flags, so the manifest (and the snapshot id) does not
    say which."""
    # Imported here: the report pulls in scipy.stats, which only this filter needs.
    from annotate.quality.services import flagged_reviewers_current

    return flagged_reviewers_current(project=project)


def _model_scores(*, project: Project) -> dict[int, dict[str, tuple[float, float]]]:
    """The attached model reviewers' scores by pair (annotate/quality/model_reviewers.py); read only for an export
    that asks for them."""
    from annotate.quality.model_reviewers import model_scores_by_pair

    return model_scores_by_pair(project=project)


def model_scores_of_row(scores: dict[str, tuple[float, float]], *, winner: str) -> dict[str, dict[str, float]]:
    """A row's meta.model_scores: {identity: {"chosen": x, "rejected": y}} from each model's (score of a, of b)."""
    return {identity: dict(zip(("chosen", "rejected"), (a, b) if winner == "a" else (b, a), strict=True))
            for identity, (a, b) in sorted(scores.items())}


def agreement_summary(*, votes: array, flagged: list[dict] | None) -> dict:
    """Agreement of the votes this export counted (flat a, b, tie, both_bad per pair), by the quality
    module's own estimators: the same figures as the agreement report's headline for the same votes,
    each pair counted in both orientations (which answer is "a" is only the import file's order)."""
    value_counts = np.frombuffer(votes, dtype=np.int32).reshape(-1, len(WINNERS)) if len(votes) else (
        np.zeros((0, len(WINNERS)), dtype=np.int32))
    a_b_exchanged = np.array(WINNER_SWAP)
    alpha = krippendorff_alpha(value_counts=value_counts, level="nominal", n_resamples=0,
                               rng=np.random.default_rng(0), swap=a_b_exchanged)
    return {
        "of": "the votes this export counted",
        "judgments": int(value_counts.sum()),
        "pairs": int(value_counts.shape[0]),
        "pairs_with_overlap": int((value_counts.sum(axis=1) >= 2).sum()),
        "percent_agreement": percent_agreement(value_counts=value_counts),
        "krippendorff_alpha": {"nominal": {"value": alpha.value, "reason": alpha.reason}},
        "flagged_reviewers": flagged,
    }


def empty_test_split_warning(*, counts: dict, test_ratio: float) -> str | None:
    """One line when a snapshot has train rows but no test row: a run trained on it cannot be judged on held-out
    pairs, and nothing else says so (a test share of 0.1 over 21 prompts can draw none). None otherwise."""
    if counts.get("test") or not counts.get("train"):
        return None
    prompts = sum((counts.get("prompts") or {}).values()) or counts.get("train")
    return (f"no test rows: a test share of {test_ratio:g} over {prompts} prompt(s) drew none, so a run trained on "
            "this snapshot cannot be judged on held-out pairs; raise the test share or export more prompts")


def export_preview(*, project: Project, filters: ExportFilters) -> dict:
    """The counts a snapshot with these filters would get, without writing anything, and a warning when it would
    have no test split."""
    excluded_reviewers = frozenset()
    if filters.exclude_flagged:
        flagged = _flagged_reviewers(project=project)
        excluded_reviewers = reviewer_ids_by_username(usernames=[r["username"] for r in flagged])
    tally = Tally(qualification_answers_left_out=qualification_answers_left_out(
        project=project, filters=filters, excluded_reviewers=excluded_reviewers))
    with closing(pair_votes_stream(project=project, filters=filters, excluded_reviewers=excluded_reviewers,
                                   with_texts=False)) as stream:
        for _ in _plan(stream, filters, tally, None, latest_rulings(project=project)):
            pass
    counts = {"train": tally.rows["train"], "test": tally.rows["test"], "prompts": dict(tally.prompts),
              **tally.counts()}
    warning = empty_test_split_warning(counts=counts, test_ratio=filters.test_ratio)
    return {**counts, "warnings": [warning] if warning else []}


@contextmanager
def _older_objects_left_out_of_collection() -> Iterator[None]:
    """While rows stream, the cyclic collector's full passes skip the objects alive before (Django, the app).

    The rows make no reference cycles, yet every full pass rescanned all the older objects: about a tenth of an
    export's time at 1M judgments. A process that froze its objects for good (annotate/wsgi.py) is left as it is.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def snapshot_write(*, project: Project, filters: ExportFilters, out_dir: Path, created_at: str,
                   code_version: dict | None = None, on_stage: Callable[[str], None] | None = None,
                   on_progress: ProgressCallback | None = None, on_total: ProgressCallback | None = None) -> dict:
    """Write the snapshot of `project` under these filters to `out_dir`; return its manifest.

    `on_total` hears how many pairs have a counted vote as soon as the votes query answers (before any row);
    `on_progress` how many of them are done, after each batch.

    The folder is claimed first (the writer refuses an existing one before any heavy read) and appears
    only when complete; on any error nothing is left at `out_dir`. The writer's snapshot id hashes the
    file hashes and the provenance without `created_at`, so the same data and filters give the same id.
    """
    recorded = {**filters.as_dict(), "consensus_rule": CONSENSUS_RULE,
                "adjudication_rule": ADJUDICATION_RULES[filters.adjudications]}
    stage = on_stage or (lambda name: None)
    with SnapshotWriter(out_dir, project=project.slug, created_at=created_at, criteria_version=None,
                        filters=recorded, row_format=filters.row_format, file_format=filters.file_format,
                        code_version=code_version) as writer:
        flagged, excluded_reviewers = None, frozenset()
        if filters.exclude_flagged:
            stage("finding flagged reviewers")
            flagged = _flagged_reviewers(project=project)
            excluded_reviewers = reviewer_ids_by_username(usernames=[r["username"] for r in flagged])
        stage("counting votes")
        tally = Tally(qualification_answers_left_out=qualification_answers_left_out(
            project=project, filters=filters, excluded_reviewers=excluded_reviewers))
        rulings = latest_rulings(project=project)
        model_scores = _model_scores(project=project) if filters.model_scores else None

        def total_known(total: int) -> None:
            stage("writing rows")
            if on_total is not None:
                on_total(total)

        votes = pair_votes_stream(project=project, filters=filters, excluded_reviewers=excluded_reviewers,
                                  on_total=total_known)
        # Closed on an error too, not whenever the traceback lets go of it: the votes' reader and connection stop.
        with closing(votes) as stream, _older_objects_left_out_of_collection():
            for row in _plan(stream, filters, tally, on_progress, rulings):
                pair = row.pair
                chosen, rejected = (pair.text_a, pair.text_b) if row.winner == "a" else (pair.text_b, pair.text_a)
                meta = row.meta
                if model_scores is not None:
                    meta["model_scores"] = model_scores_of_row(model_scores.get(pair.pair_id, {}), winner=row.winner)
                try:
                    writer.add_pair(row.split, prompt=pair.messages, chosen=chosen, rejected=rejected, meta=meta)
                except ValueError as error:
                    raise ExportError(f"prompt {pair.prompt_id} (pair {pair.pair_id}): {error}") from None
        stage("finishing")
        # The writer takes these at construction; they are only known once every row is written.
        writer.extra_counts = tally.counts()
        summary = agreement_summary(votes=tally.votes, flagged=flagged)
        writer.agreement = summary
        writer.criteria_version = tally.criteria_version()
    return writer.manifest
