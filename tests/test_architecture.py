"""The package's import graph has no cycle (issue 16). pyproject.toml's import-linter contracts keep
the layers pointing down (`make test` runs lint-imports); a cycle between two modules of one layer
(model.py and seq2seq.py, say) is not a layer violation, so this test looks for any cycle at all."""

import pytest

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the dev extra)")


def strongly_connected(graph) -> list[list[str]]:
    """Tarjan's components of the module graph with more than one module: the import cycles."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycle():
    assert strongly_connected(grimp.build_graph("blocklab")) == []


def test_the_check_finds_a_cycle():
    class Graph:  # a -> b -> c -> a, and d alone
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]

    assert strongly_connected(Graph()) == [["a", "b", "c"]]
