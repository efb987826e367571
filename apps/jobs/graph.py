"""A layered layout of a pipeline's DAG for the server-rendered picture (left to right, by depth)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.jobs.dag import topological_order

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 150, 44, 60, 22, 12


@dataclass
class Box:
    name: str
    template: str
    x: int
    y: int
    w: int = NODE_W
    h: int = NODE_H

    @property
    def cx(self) -> int:
        return self.x + self.w // 2

    @property
    def cy(self) -> int:
        return self.y + self.h // 2


def layout(spec: dict[str, Any]) -> dict[str, Any]:
    nodes = {n["name"]: n for n in spec.get("nodes", [])}
    graph = {name: list(n.get("depends_on", [])) for name, n in nodes.items()}
    depth: dict[str, int] = {}
    for name in topological_order(graph):
        depth[name] = 1 + max((depth[d] for d in graph[name] if d in depth), default=-1)
    columns: dict[int, list[str]] = {}
    for name in topological_order(graph):
        columns.setdefault(depth[name], []).append(name)
    boxes: dict[str, Box] = {}
    for col, names in columns.items():
        for row, name in enumerate(names):
            boxes[name] = Box(
                name, str(nodes[name].get("template", "")), PAD + col * (NODE_W + GAP_X), PAD + row * (NODE_H + GAP_Y)
            )
    edges = [
        {
            "from": dep,
            "to": name,
            "x1": boxes[dep].x + NODE_W,
            "y1": boxes[dep].cy,
            "x2": boxes[name].x,
            "y2": boxes[name].cy,
        }
        for name, deps in graph.items()
        for dep in deps
        if dep in boxes
    ]
    width = PAD * 2 + (max(columns, default=0) + 1) * (NODE_W + GAP_X) - GAP_X
    height = PAD * 2 + max((len(v) for v in columns.values()), default=1) * (NODE_H + GAP_Y) - GAP_Y
    return {"boxes": list(boxes.values()), "edges": edges, "width": width, "height": height}
