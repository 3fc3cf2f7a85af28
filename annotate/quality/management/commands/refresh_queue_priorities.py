from django.core.management.base import BaseCommand, CommandError

from annotate.quality.queue_priorities import queue_priorities_refresh
from annotate.review.projects import project_or_error


class Command(BaseCommand):
    help = ("Write the queue priorities of a leaderboard project's open pairs from its models' ratings now "
            "(celery beat also does this every 5 minutes for every leaderboard project).")

    def add_arguments(self, parser):
        parser.add_argument("slug")

    def handle(self, *args, slug, **options):
        project = project_or_error(slug=slug)
        if not project.leaderboard_priority:
            raise CommandError(f"project {slug!r} is not a leaderboard project; turn it on with "
                               f"create_project {slug} --leaderboard-priority on")
        changed = queue_priorities_refresh(project=project, force=True)
        self.stdout.write(f"{changed} pair(s) changed priority")
