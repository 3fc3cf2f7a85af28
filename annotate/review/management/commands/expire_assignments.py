from django.core.management.base import BaseCommand

from annotate.review.assignments import assignments_expire_stale


class Command(BaseCommand):
    help = "Return assignments held past their expiry to the pool (celery beat also does this every minute)."

    def handle(self, *args, **options):
        total = 0
        while expired := assignments_expire_stale():
            total += expired
        self.stdout.write(f"{total} assignment(s) expired")
