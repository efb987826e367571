"""A simulated GPU cluster behind the runtime interface, for benchmarks and tests only (docs/scheduling.md).

Not a runtime anyone can choose: it is not in `apps.runtime.base.RUNTIMES`; `cluster.simulated_runtime()` puts it
there for the length of a replay. `traces` makes and reads job traces, `replay` drives a trace through a policy on a
virtual clock and measures what happened (`apps.jobs.simulation` puts the portal's own dispatcher in the loop).
"""
