"""The home page: every project with what the user's roles can act on, from every app.

At the project level because it reads all of them (review's project rows, exports' newest snapshots, runs'
latest runs and checkpoints), which none of the apps may import from the others.
"""

from django.shortcuts import render

from annotate.exports.selectors import latest_done_exports
from annotate.review.selectors import project_rows_for_home
from annotate.roles import ADJUDICATOR_ROLES, REVIEWER_ROLES, STAFF_ROLES, user_roles
from annotate.runs.selectors import latest_checkpoints, latest_runs


def home(request):
    """Each project with what the user's roles can act on; for admins and engineers, the newest finished export
    of each, and the latest runs too."""
    roles = user_roles(request.user)
    can = {"review": bool(roles & REVIEWER_ROLES), "adjudicate": bool(roles & ADJUDICATOR_ROLES),
           "staff": bool(roles & STAFF_ROLES), "admin": "admin" in roles,
           "see_left": "reviewer" in roles}
    rows = project_rows_for_home(user=request.user, roles=roles)
    if can["staff"]:
        exports = latest_done_exports()
        for row in rows:
            row["latest_export"] = exports.get(row["project"].pk)
    return render(request, "review/home.html", {
        "rows": rows, "roles": sorted(roles), "can": can,
        "runs": latest_runs(limit=5) if can["staff"] else [],
        "checkpoints": latest_checkpoints(limit=5) if can["staff"] else [],
    })
