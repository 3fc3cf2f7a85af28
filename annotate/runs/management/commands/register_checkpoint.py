from django.core.management.base import BaseCommand, CommandError

from annotate.errors import UserMistake
from annotate.runs.checkpoints import checkpoint_register, checkpoint_resolve


class Command(BaseCommand):
    help = ("Register a checkpoint: a local Hugging Face checkpoint folder (hashed by its weight files) or a URI. "
            "A trained checkpoint's parent.json links its parent when the parent is registered.")

    def add_arguments(self, parser):
        parser.add_argument("checkpoint", help="checkpoint folder, or a URI such as s3://bucket/ckpt")
        parser.add_argument("--name", help="name shown on pages and used in the API (default: the folder's name)")
        parser.add_argument("--parent", help="the registered checkpoint it was trained from (name or id)")
        parser.add_argument("--hash", default="", dest="content_hash",
                            help="content hash of a URI's weights (sha256:...); computed for a local folder")

    def handle(self, *args, checkpoint, name, parent, content_hash, **options):
        try:
            parent_checkpoint = checkpoint_resolve(parent, key="--parent") if parent else None
            registered = checkpoint_register(uri=checkpoint, name=name, parent=parent_checkpoint,
                                             content_hash=content_hash)
        except UserMistake as error:
            raise CommandError(str(error)) from None
        parent_text = f", parent {registered.parent.name}" if registered.parent else ""
        self.stdout.write(f"checkpoint {registered.pk} {registered.name}: {registered.uri} "
                          f"({registered.content_hash or 'no content hash'}{parent_text})")
