from django.core.management.base import BaseCommand, CommandError

from annotate.review.errors import ReviewError
from annotate.review.users import user_add
from annotate.roles import ROLES


class Command(BaseCommand):
    help = ("Create a user with a role and print their password; for an existing user, change the role "
            "(and the password only when --password is given).")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=ROLES)
        parser.add_argument("--password", help="Default for a new user: a random one, printed. An existing "
                                                "user keeps theirs unless this is given.")

    def handle(self, *args, username, role, password, **options):
        try:
            user, password_set, created = user_add(username=username, role=role, password=password,
                                                   replace_password=password is not None)
        except ReviewError as exc:
            raise CommandError(str(exc)) from None
        if created:
            shown = password_set if password is None else "(as given)"
            self.stdout.write(f"created {role} {user.get_username()}  password: {shown}")
        else:
            kept = "password: (as given)" if password is not None else "password unchanged (give --password to set one)"
            self.stdout.write(f"user {user.get_username()} exists: role is now {role}; {kept}")
