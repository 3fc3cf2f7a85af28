"""GRPO on verifiable tasks (docs/training.md, "GRPO"): TRL's GRPOTrainer with Pairwise's verifiers as the
reward, every attempt recorded in the run folder's rollouts/, zero-variance groups counted and acted on,
a difficulty pre-pass, rescoring under another scorer version, and a ledger of where the time went.
"""
