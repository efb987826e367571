"""The portal's model server: a lean process (no Django) that serves one model over the Open Inference
Protocol v2 with adaptive request batching. Run it as `python -m apps.serving.modelserver --help`;
docs/serving-modelserver.md explains the design and the measurements behind it."""
