"""Pages of the jobs app, one module per concept (templates, pipelines, runs, logs)."""
