"""Every private part of TRL (and the libraries under it) that training/ touches is listed in training/trl_private.py,
and the installed versions are checked for each one before a run starts: a TRL that moved one is refused in one line
naming it, and a new touch cannot be added to training/ without being listed."""

import ast
import functools
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the training extras are not installed")

from training import trl_private
from training.trl_private import TOUCH_POINTS, TouchPoint, UnsupportedTRL, check_touch_points

TRAINING = Path(__file__).resolve().parents[2] / "training"
# Documented public names that happen to start with an underscore.
PUBLIC = {("os", "_exit")}


def test_the_installed_trl_has_every_touch_point():
    check_touch_points()


def test_a_touch_point_the_installed_trl_lacks_is_refused_in_one_line_naming_it():
    import trl

    moved = replace(TOUCH_POINTS[0], name="_generate_batch")
    with pytest.raises(UnsupportedTRL) as refused:
        check_touch_points((*TOUCH_POINTS, moved))
    assert str(refused.value) == (
        f"trl.GRPOTrainer._generate_batch does not exist in the installed TRL {trl.__version__}, but "
        "training.grpo.trainer:trl_answers calls it (training/trl_private.py); install a TRL in the supported range "
        "(pip install 'trl>=1.16,<1.17')")


def test_a_touch_point_whose_signature_changed_is_refused_in_one_line_naming_the_parameter():
    import trl

    changed = TouchPoint("trl.GRPOTrainer", "_get_per_token_logps_and_entropies", (trl_private.CALL,),
                         ("training.grpo.trainer:PairwiseGRPOTrainer.policy_logprobs",), "why",
                         parameters=("model", "logits_to_drop"))
    with pytest.raises(UnsupportedTRL) as refused:
        check_touch_points((changed,))
    assert str(refused.value).startswith(
        "trl.GRPOTrainer._get_per_token_logps_and_entropies no longer takes logits_to_drop in the installed TRL "
        f"{trl.__version__}, but training.grpo.trainer:PairwiseGRPOTrainer.policy_logprobs calls it")


def test_an_instance_attribute_set_in_the_owners_init_counts_as_present_and_a_made_up_one_does_not():
    import trl

    assert trl_private.defined_on(trl.GRPOTrainer, "_metrics")  # set in __init__, not on the class
    assert not trl_private.defined_on(trl.GRPOTrainer, "_pairwise_made_up")


# --- every private touch in training/ is listed -------------------------------------------------------------------


def _external_bases() -> dict[str, type]:
    """The library classes our classes subclass, by the name a class statement in training/ writes."""
    import transformers
    import trl

    return {"GRPOTrainer": trl.GRPOTrainer, "DPOTrainer": trl.DPOTrainer, "RewardTrainer": trl.RewardTrainer,
            "TrainerCallback": transformers.TrainerCallback, "TrlParser": trl.TrlParser}


@functools.cache
def _on_external(cls: type, name: str) -> bool:
    return trl_private.defined_on(cls, name)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


class _Touches(ast.NodeVisitor):
    """Private attributes a module touches, as (name, "module:Class.function")."""

    def __init__(self, module: str, ours: set[str], roots: dict[str, type]):
        self.module, self.ours, self.roots = module, ours, roots
        self.stack: list[tuple[str, str]] = []  # ("class" | "def", name)
        self.found: set[tuple[str, str]] = set()

    def where(self) -> str:
        classes = [i for i, (kind, _) in enumerate(self.stack) if kind == "class"]
        start = classes[-1] if classes else 0
        names = [name for _, name in self.stack[start:]][:2]
        return f"{self.module}:{'.'.join(names) or '<module>'}"

    def external_root(self) -> type | None:
        classes = [name for kind, name in self.stack if kind == "class"]
        return self.roots.get(classes[-1]) if classes else None

    def visit_ClassDef(self, node):
        self.stack.append(("class", node.name))
        self.generic_visit(node)
        self.stack.pop()

    def visit_FunctionDef(self, node):
        if self.stack and self.stack[-1][0] == "class" and _private(node.name):
            root = self.external_root()
            if root is not None and _on_external(root, node.name):
                self.found.add((node.name, f"{self.module}:{self.stack[-1][1]}.{node.name}"))
        self.stack.append(("def", node.name))
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Attribute(self, node):
        name, base = node.attr, node.value
        if _private(name):
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                touched = True
            elif isinstance(base, ast.Name) and base.id in ("self", "cls"):
                root = self.external_root()
                touched = name not in self.ours or (root is not None and _on_external(root, name))
            elif isinstance(base, ast.Name) and (base.id, name) in PUBLIC:
                touched = False
            else:
                touched = name not in self.ours or any(_on_external(cls, name) for cls in _external_bases().values())
            if touched:
                self.found.add((name, self.where()))
        self.generic_visit(node)


def _modules() -> dict[str, ast.Module]:
    return {".".join(path.relative_to(TRAINING.parent).with_suffix("").parts): ast.parse(path.read_text())
            for path in sorted(TRAINING.rglob("*.py"))}


def _our_private_names(trees) -> set[str]:
    """Private names our own code defines: methods and class attributes of our classes, and `self._x = ...`."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _private(item.name):
                        names.add(item.name)
                    targets = item.targets if isinstance(item, ast.Assign) else (
                        [item.target] if isinstance(item, ast.AnnAssign) else [])
                    names |= {t.id for t in targets if isinstance(t, ast.Name) and _private(t.id)}
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"):
                names.add(node.attr)
    return names


def _external_roots(trees) -> dict[str, type]:
    """Each class of ours that derives from a library class (directly or through ours), mapped to that class."""
    bases = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
    external = _external_bases()

    def root(name: str, seen=()) -> type | None:
        if name in external:
            return external[name]
        for base in bases.get(name, ()):
            if base not in seen and (found := root(base, (*seen, name))) is not None:
                return found
        return None

    return {name: found for name in bases if (found := root(name)) is not None}


@pytest.fixture(scope="module")
def touches() -> set[tuple[str, str]]:
    modules = _modules()
    ours, roots = _our_private_names(modules.values()), _external_roots(modules.values())
    found = set()
    for module, tree in modules.items():
        visitor = _Touches(module, ours, roots)
        visitor.visit(tree)
        found |= visitor.found
    return found


def test_every_private_touch_in_training_is_in_the_registry(touches):
    listed = {(point.name, where) for point in TOUCH_POINTS for where in point.where}
    unlisted = sorted(touches - listed)
    assert not unlisted, f"private parts of TRL touched but not in training/trl_private.py: {unlisted}"


def test_every_private_touch_the_registry_lists_is_still_made(touches):
    stale = sorted((point.name, where) for point in TOUCH_POINTS if _private(point.name) for where in point.where
                   if (point.name, where) not in touches)
    assert not stale, f"training/trl_private.py lists touches training/ no longer makes: {stale}"


def test_a_new_private_touch_is_found():
    import trl

    module = ast.parse(
        "class Ours(GRPOTrainer):\n"
        "    def _prepare_inputs(self, inputs):\n"          # overrides a private method
        "        return self._metrics\n"                     # reads a private attribute TRL sets
        "def outside(trainer):\n"
        "    return trainer._tokenizer\n")                   # reads one from outside
    visitor = _Touches("training.example", {"_own"}, {"Ours": trl.GRPOTrainer})
    visitor.visit(module)
    assert visitor.found == {("_prepare_inputs", "training.example:Ours._prepare_inputs"),
                             ("_metrics", "training.example:Ours._prepare_inputs"),
                             ("_tokenizer", "training.example:outside")}
