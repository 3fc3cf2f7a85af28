"""Answer audit: right number, wrong reasoning?

A verifier checks the final answer only, and a reward model may reward what merely looks right. An audit batch
samples answers a GRPO run rewarded most (from its rollouts/): those the verifier gave the full reward, and of
the open answers no verifier checks, the top tenth by the reward model's score; it shows each one alone to
reviewers, who say whether the reasoning holds
(yes / no / unsure) with a rationale. Blind: a reviewer sees the prompt and the answer, never the run, the
checkpoint or the rollout. Each answer goes to `overlap` distinct reviewers; Krippendorff's alpha
(nominal, over answers with two or more verdicts) says whether they agree.

The figure: each answer's verdict is the strict majority of its yes/no votes (unsure abstains; a tie or
no decisive vote leaves it undecided); the share of decided answers whose reasoning is broken, with a
95% Wilson interval over answers, per checkpoint.
"""

from __future__ import annotations

from collections import defaultdict
from operator import attrgetter
from pathlib import Path

import numpy as np
from django.contrib.auth.models import AbstractBaseUser
from django.core import signing
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, F, OuterRef

from annotate.errors import UserMistake
from annotate.limits import MAX_INT32, MAX_RATIONALE_CHARS, text_within, whole_number
from annotate.quality.agreement import krippendorff_alpha
from annotate.quality.reviewers import wilson_interval
from annotate.runs.models import AuditBatch, AuditItem, AuditJudgment, Checkpoint, Run
from training.grpo.audit_sample import audit_draw, audit_draw_by_steps, rewarded_rows, step_windows

VERDICTS = tuple(AuditJudgment.Verdict.values)  # yes, no, unsure: the value order of the agreement counts
MIN_RATIONALE_CHARS = 10


def _prompt_text(prompt: str) -> str:
    """A rollout's prompt column holds text, or chat messages as JSON: show the user's words."""
    import json

    try:
        messages = json.loads(prompt)
    except (TypeError, ValueError):
        return prompt
    if isinstance(messages, list):
        return "\n\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    return prompt


def _rollout_rows(run: Run) -> list[dict]:
    from training.grpo.rollouts import read_rollouts  # pyarrow only; no torch

    table = read_rollouts(Path(run.folder))
    columns = ("rollout_id", "task_id", "prompt", "completion", "reward", "status", "scorer", "policy_step",
               "reward_model_score", "reward_model")
    return table.select(list(columns)).to_pylist() if table.num_rows else []


def rewarded_rollouts(run: Run) -> list[dict]:
    """Completions of the run rewarded most (training.grpo.audit_sample.rewarded_rows): those the verifier called
    correct with the full reward, and the open answers whose reward-model score is in the run's top tenth."""
    return rewarded_rows(_rollout_rows(run))


def audit_create(*, run: Run, size: int, overlap: int = 3, seed: int = 0, spread_over_steps: bool = False,
                 created_by: AbstractBaseUser | None = None) -> AuditBatch:
    """Sample `size` fully rewarded answers of a GRPO run into a new audit batch.

    The sample is the rollouts whose sha256(seed, rollout_id) sorts first: the same run and seed give the
    same answers whatever order the rollout files list them in. With `spread_over_steps`, the run's steps are
    split into windows and each window's most rewarded answers are drawn from evenly
    (audit_sample.audit_draw_by_steps), so the audit by step compares like with like."""
    size = whole_number("size", size, low=1, high=5000, hint="answers to sample")
    overlap = whole_number("overlap", overlap, low=1, high=20, hint="reviewers per answer")
    seed = whole_number("seed", seed, low=0, high=MAX_INT32)
    if run.kind != Run.Kind.GRPO:
        raise UserMistake(f"run {run.pk} is a {run.kind} run; an answer audit samples a GRPO run's rollouts")
    if not isinstance(spread_over_steps, bool):
        raise UserMistake(f"spread_over_steps must be true or false, not {spread_over_steps!r}")
    rows = _rollout_rows(run)
    candidates = rewarded_rows(rows)
    if not candidates:
        raise UserMistake(f"run {run.pk} has no answer with the full reward (nor an open answer a reward model scored) "
                          f"in {run.folder}/rollouts; nothing to audit")

    chosen = audit_draw_by_steps(rows, size, seed) if spread_over_steps else audit_draw(candidates, size, seed)
    with transaction.atomic():
        batch = AuditBatch.objects.create(run=run, checkpoint=run.made_checkpoint, overlap=overlap, seed=seed,
                                          spread_over_steps=spread_over_steps, created_by=created_by)
        AuditItem.objects.bulk_create([
            AuditItem(batch=batch, rollout_id=row["rollout_id"], task_id=row["task_id"] or "",
                      prompt=_prompt_text(row["prompt"] or ""), answer=row["completion"] or "",
                      reward=row["reward"], scorer=row["scorer"] or "", policy_step=row["policy_step"])
            for row in chosen])
    return batch


def _open_for(reviewer: AbstractBaseUser):
    """Answers that still need verdicts and that this reviewer has not judged."""
    judged_by_them = AuditJudgment.objects.filter(item=OuterRef("pk"), reviewer=reviewer)
    return (AuditItem.objects.annotate(verdicts=Count("judgments")).filter(verdicts__lt=F("batch__overlap"))
            .exclude(Exists(judged_by_them)))


def audit_next(*, reviewer: AbstractBaseUser) -> AuditItem | None:
    """The fullest open answer first, so answers reach their overlap (and agreement can be measured) early."""
    return _open_for(reviewer).order_by("-verdicts", "id").first()


def _served_signer(reviewer: AbstractBaseUser) -> signing.Signer:
    return signing.Signer(salt=f"pairwise.audit-served.{reviewer.pk}")


def served_token(item: AuditItem, reviewer: AbstractBaseUser) -> str:
    """What comes with an answer served to a reviewer and goes back with their verdict: the item's id signed
    for this reviewer, so a verdict is taken only on an answer this reviewer was served."""
    return _served_signer(reviewer).sign(str(item.pk))


def _was_served(item_id: int, reviewer: AbstractBaseUser, token: str) -> bool:
    try:
        return _served_signer(reviewer).unsign(str(token or "")) == str(item_id)
    except signing.BadSignature:
        return False


def audit_judge(*, item_id, reviewer: AbstractBaseUser, verdict: str, rationale: str, token: str) -> AuditJudgment:
    """Record a reviewer's verdict on an answer they were served (`token`, from served_token); one per reviewer
    and answer, at most `overlap` per answer."""
    item_id = whole_number("item", item_id, low=1, high=2**63 - 1)
    if verdict not in VERDICTS:
        raise UserMistake(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    rationale = (rationale or "").strip()
    if len(rationale) < MIN_RATIONALE_CHARS:
        raise UserMistake(f"rationale is required: say in at least {MIN_RATIONALE_CHARS} characters why the "
                          "reasoning holds or where it breaks")
    text_within("rationale", rationale, MAX_RATIONALE_CHARS)
    with transaction.atomic():
        item = AuditItem.objects.select_for_update().select_related("batch").filter(pk=item_id).first()
        if item is None or not _was_served(item_id, reviewer, token):
            # The same answer for an item that does not exist and one never served to this reviewer.
            raise UserMistake(f"no audit item {item_id} was served to you; ask for the next one", status=404)
        if item.judgments.filter(reviewer=reviewer).exists():
            raise UserMistake(f"you have judged audit item {item_id} already", status=409)
        if item.judgments.count() >= item.batch.overlap:
            raise UserMistake(f"audit item {item_id} has all its {item.batch.overlap} verdicts; ask for the next one",
                              status=409)
        try:
            return AuditJudgment.objects.create(item=item, reviewer=reviewer, verdict=verdict, rationale=rationale)
        except IntegrityError:
            raise UserMistake(f"you have judged audit item {item_id} already", status=409) from None


def _summary(items: list[AuditItem], votes: dict[int, list[str]]) -> dict:
    broken = decided = 0
    for item in items:
        yes, no = votes[item.pk].count("yes"), votes[item.pk].count("no")
        if yes != no:
            decided += 1
            broken += no > yes
    low, high = wilson_interval(hits=np.array([broken]), total=np.array([decided]))
    counts = np.array([[votes[item.pk].count(v) for v in VERDICTS] for item in items], dtype=np.int64).reshape(
        -1, len(VERDICTS))
    alpha = krippendorff_alpha(value_counts=counts, level="nominal", n_resamples=0, rng=np.random.default_rng(0))
    return {
        "answers": len(items),
        "judged": sum(1 for item in items if votes[item.pk]),
        "verdicts": int(counts.sum()),
        "decided": decided,
        "broken": broken,
        "broken_share": broken / decided if decided else None,
        "broken_ci": [float(low[0]), float(high[0])] if decided else None,
        "alpha": alpha.value,
        "alpha_note": None if alpha.value is not None else (alpha.reason or "").replace("pair", "answer"),
    }


def by_step_windows(items: list[AuditItem], votes: dict[int, list[str]]) -> list[dict]:
    """The audit of `items` split by the training step that wrote each answer (audit_sample.step_windows: equal
    windows from step 0 to the last audited one): where broken reasoning rose, so that an engineer sees when the
    run started to earn reward it should not have, and which saved checkpoint came before."""
    return [{"steps": steps, **_summary(members, votes)}
            for steps, members in step_windows(items, step_of=attrgetter("policy_step"))]


def audit_results(*, run: Run | None = None, checkpoint: Checkpoint | None = None) -> list[dict]:
    """The share of rewarded answers with broken reasoning, per checkpoint (the run's output), for one run's
    audits or one checkpoint's; each with the same split by training step ("by_steps", by_step_windows)."""
    items = AuditItem.objects.select_related("batch__checkpoint")
    if run is not None:
        items = items.filter(batch__run=run)
    if checkpoint is not None:
        items = items.filter(batch__checkpoint=checkpoint)
    items = list(items)
    votes: dict[int, list[str]] = defaultdict(list)
    for item_id, verdict in AuditJudgment.objects.filter(item__in=items).values_list("item_id", "verdict"):
        votes[item_id].append(verdict)
    by_checkpoint: dict[Checkpoint | None, list[AuditItem]] = defaultdict(list)
    for item in items:
        by_checkpoint[item.batch.checkpoint].append(item)
    return [{"checkpoint": found.name if found else None, "checkpoint_id": found.pk if found else None,
             **_summary(group, votes), "by_steps": by_step_windows(group, votes)}
            for found, group in sorted(by_checkpoint.items(), key=lambda pair: pair[0].pk if pair[0] else 0)]


def open_items_count(reviewer: AbstractBaseUser) -> int:
    return _open_for(reviewer).count()
