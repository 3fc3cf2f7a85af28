"""Imported once by the cycle's stage server (training/grpo/cycle.py, launcher "forkserver"), so that the stage
processes forked from it start with torch, transformers, TRL and the verifiers already imported, and with pint's unit
registry (which checking a math task's schema reads) already built."""

import datasets  # noqa: F401
import torch  # noqa: F401
import transformers  # noqa: F401
import trl  # noqa: F401

import training.cli
import training.grpo.rewards
import training.grpo.stages
import training.grpo.trainer
import training.verifiers.reward_function  # noqa: F401
from training.verifiers.units import unit_registry

unit_registry()
