"""The README's export_snapshot synopsis names every option the command takes."""

import re
from pathlib import Path

from django.core.management import load_command_class

README = Path(__file__).resolve().parents[2] / "README.md"
DJANGO_OPTIONS = {"--help", "--version", "--verbosity", "--settings", "--pythonpath", "--traceback", "--no-color",
                  "--force-color", "--skip-checks"}


def test_the_readme_synopsis_lists_every_export_snapshot_option():
    parser = load_command_class("annotate.exports", "export_snapshot").create_parser("manage.py", "export_snapshot")
    options = {name for action in parser._actions for name in action.option_strings if name.startswith("--")}
    readme = README.read_text()
    start = readme.index("python manage.py export_snapshot SLUG")
    synopsis = readme[start:readme.index("```", start)]
    assert options - DJANGO_OPTIONS - set(re.findall(r"--[a-z-]+", synopsis)) == set()
