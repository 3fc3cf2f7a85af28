from django.core.management.base import BaseCommand, CommandError

from annotate.review import services


class Command(BaseCommand):
    help = "Create a user with a role (or change an existing user's role and password); prints the password."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=services.ROLES)
        parser.add_argument("--password", help="Default: a random one, printed.")

    def handle(self, *args, username, role, password, **options):
        try:
            user, password_set, created = services.user_add(username=username, role=role, password=password)
        except services.ReviewError as exc:
            raise CommandError(str(exc)) from None
        shown = password_set if password is None else "(as given)"
        self.stdout.write(f"{'created' if created else 'updated'} {role} {user.get_username()}  password: {shown}")
