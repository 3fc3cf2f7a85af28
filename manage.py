#!/usr/bin/env python
"""Pairwise's command line for admins: python manage.py <command>."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:  # a settings mistake: say it in one line, no traceback
        print(f"pairwise: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
