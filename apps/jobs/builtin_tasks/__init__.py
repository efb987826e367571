"""The scripts of the built-in job templates (`python -m apps.jobs.builtin_tasks.<script>`).

Programs that run outside the portal, in task environments (under the local agent, or in pods of the portal's own
image on a cluster): standard library and the task environment's ML packages, no Django and no portal code
(tests/portal/test_django_free_programs.py). They speak to the portal through the task's env contract and its HTTP
APIs only. docs/apps.md says why they live here.
"""
