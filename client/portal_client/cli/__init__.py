"""The `portal` command: everything the pages do, from a terminal or a CI job.

Exit codes: 0 success; 1 other error; 2 invalid input (400, bad usage); 3 portal unreachable; 4 not logged in
(401); 5 forbidden (403); 6 not found (404); 7 conflict (409); 8 rate limited; 9 server error; 10 a run (or
service) that was waited for failed; 11 a wait timed out.

One module per command family; importing them registers their commands on `main`."""

from portal_client.cli import account, data, extras, runs, serving
from portal_client.cli._base import PortalGroup, State, main, need_project, output_option, pass_state, project_option

__all__ = [
    "PortalGroup",
    "State",
    "account",
    "data",
    "extras",
    "main",
    "need_project",
    "output_option",
    "pass_state",
    "project_option",
    "runs",
    "serving",
]
