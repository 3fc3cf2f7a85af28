import json
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate.runs.demo_checkpoint import (
    RECIPE_RECORD,
    SHIPPED_FOLDER,
    SHIPPED_MANIFEST,
    shipped_manifest_write,
)


class Command(BaseCommand):
    help = ("Write the demo checkpoint that ships with Pairwise (annotate/runs/demo_files/tiny-sft and its manifest) "
            "from tiny-sft's default recipe: built here, or taken from a folder that recipe built (--from). Run it "
            "after changing the recipe; tests/runs/test_demo_checkpoint_shipped.py checks the two agree.")

    def add_arguments(self, parser):
        parser.add_argument("--from", dest="source", help="a folder `python -m training tiny-sft --out DIR` wrote "
                                                          "with the default recipe (else the recipe runs here)")

    def handle(self, *args, source, **options):
        from training.tiny import TinySFTConfig, build_tiny_sft

        with tempfile.TemporaryDirectory(prefix="pairwise-ship-") as scratch:
            if source is None:
                source = Path(scratch) / "tiny-sft"
                build_tiny_sft(source, TinySFTConfig(), log=self.stdout.write)
            source = Path(source)
            try:
                config = json.loads((source / RECIPE_RECORD).read_text())["config"]
            except (OSError, ValueError, KeyError):
                raise CommandError(f"--from {source}: no {RECIPE_RECORD} with a config; give a folder that "
                                   "python -m training tiny-sft wrote") from None
            if config != asdict(TinySFTConfig()):
                changed = sorted(key for key, value in asdict(TinySFTConfig()).items() if config.get(key) != value)
                raise CommandError(f"--from {source} was built with another recipe than the default (differs in "
                                   f"{', '.join(changed)}); build it with python -m training tiny-sft --out DIR")
            shutil.rmtree(SHIPPED_FOLDER, ignore_errors=True)
            shutil.copytree(source, SHIPPED_FOLDER)
        manifest = shipped_manifest_write()
        self.stdout.write(f"wrote {SHIPPED_FOLDER} ({len(manifest['files'])} files, {manifest['content_hash']}) "
                          f"and {SHIPPED_MANIFEST.name}")
