"""docs/usage.md's export_snapshot synopsis names every option the command takes."""

import re
from pathlib import Path

from django.core.management import load_command_class

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"
DJANGO_OPTIONS = {"--help", "--version", "--verbosity", "--settings", "--pythonpath", "--traceback", "--no-color",
                  "--force-color", "--skip-checks"}


def test_the_usage_synopsis_lists_every_export_snapshot_option():
    parser = load_command_class("annotate.exports", "export_snapshot").create_parser("manage.py", "export_snapshot")
    options = {name for action in parser._actions for name in action.option_strings if name.startswith("--")}
    usage = USAGE.read_text()
    start = usage.index("python manage.py export_snapshot SLUG")
    synopsis = usage[start:usage.index("```", start)]
    assert options - DJANGO_OPTIONS - set(re.findall(r"--[a-z-]+", synopsis)) == set()
