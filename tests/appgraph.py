"""Print the import graph between the apps (and `portal`, `portal.lib`), migrations left out, and fail on a cycle.

`make appgraph` (`python -m tests.appgraph` from the checkout). import-linter (`make lint`) enforces the
layers; this shows what they allow in use.
"""

from __future__ import annotations

import sys

import grimp


def unit(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "portal":
        return "portal.lib" if parts[1:2] == ["lib"] else "portal"
    return ".".join(parts[:2])


def edges() -> dict[str, set[str]]:
    graph = grimp.build_graph("apps", "portal")
    found: dict[str, set[str]] = {}
    for module in graph.modules:
        if ".migrations" in module:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = unit(module), unit(imported)
            if ".migrations" not in imported and a != b:
                found.setdefault(a, set()).add(b)
    return found


def cycle(found: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(found.get(node, ())):
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (loop := visit(nxt, [*path, node])):
                return loop
        state[node] = 2
        return None

    for node in sorted(found):
        if node not in state and (loop := visit(node, [])):
            return loop
    return None


def main() -> int:
    found = edges()
    for a in sorted(found):
        print(f"{a:15} -> {', '.join(sorted(found[a]))}")
    if loop := cycle(found):
        print("cycle: " + " -> ".join(loop))
        return 1
    print("no cycle between units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
