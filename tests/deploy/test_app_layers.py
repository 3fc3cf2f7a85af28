"""The apps depend on each other in one direction (docs/design.md, "Layout and the rules of dependency"):
review <- quality <- exports <- runs. Each may import the apps to its left and never one to its right,
counting imports inside functions, so no two apps import each other and a newcomer can read them in order."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["review", "quality", "exports", "runs"]  # each app may import those before it
BELOW_EVERY_APP = {"roles", "limits", "errors", "api_errors", "parsers", "permissions", "celery", "jobs"}


def imported_annotate_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for every `annotate.*` import in the file, at the top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.startswith("annotate.")]
    return found


def test_no_app_imports_an_app_to_its_right_and_the_shared_modules_import_no_app():
    wrong = []
    for app in LAYERS:
        allowed = set(LAYERS[: LAYERS.index(app) + 1])
        for path in sorted((ROOT / "annotate" / app).rglob("*.py")):
            for line, name in imported_annotate_modules(path):
                target = name.split(".")[1]
                if target in LAYERS and target not in allowed:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} ({app}) imports {name}")
    for module in sorted(BELOW_EVERY_APP):
        path = ROOT / "annotate" / f"{module}.py"
        for line, name in imported_annotate_modules(path):
            if name.split(".")[1] in LAYERS:
                wrong.append(f"{path.relative_to(ROOT)}:{line} (below every app) imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def late():\n    from annotate.runs.models import Run\n    return Run\n")
    assert (2, "annotate.runs.models") in imported_annotate_modules(sample)
