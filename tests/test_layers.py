"""The package stays layered: no import cycles, no import from a higher layer into a lower one.

The graph is built from the source (``ast``), with every import statement counted wherever it
is (module level or inside a function), so a lazy import cannot hide a cycle or an upward edge.
Layers, bottom to top (README "Architecture"); an import may go down, or sideways within the
same package, never up.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = [  # (layer, module prefixes)
    ("core", ("esopt.core",)),
    ("tasks", ("esopt.tasks",)),
    ("models, noise", ("esopt.models", "esopt.noise")),  # the tiny family's pretraining reads tasks' data
    ("engines", ("esopt.engines",)),
    ("evaluator", ("esopt.evaluator",)),
    ("algorithms", ("esopt.algorithms",)),
    ("runtime", ("esopt.runtime",)),
    ("study", ("esopt.study",)),
    ("cli", ("esopt.cli", "esopt.sweep", "esopt.evaluate", "esopt.aggregate", "esopt.analyze", "esopt.design",
             "esopt.plan", "esopt.fetch", "esopt.migrate_ids", "hydra_plugins")),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    files = list((ROOT / "esopt").rglob("*.py")) + list((ROOT / "hydra_plugins").rglob("*.py"))
    return {module_name(p): p for p in files}


def layer_of(mod: str) -> tuple[int, str]:
    """(layer index, package unit) of a module; the unit is the matching prefix."""
    if mod == "esopt":
        return 0, "esopt"
    for i, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if mod == prefix or mod.startswith(prefix + "."):
                return i, "cli" if name == "cli" else prefix  # the entry points are one unit
    raise AssertionError(f"module {mod} belongs to no layer: add it to LAYERS")


def imports(path: Path, mod: str, known: set[str]) -> set[str]:
    """The esopt / hydra_plugins modules ``path`` imports, anywhere in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package.split(".")
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `import a.b.c` of a module: the longest known
                name = name.rpartition(".")[0]
            if name and name != mod:
                out.add(name)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(p, m, set(mods)) for m, p in mods.items()}


def test_every_module_has_a_layer(graph):
    for mod in graph:
        layer_of(mod)


def test_no_import_goes_up_a_layer(graph):
    bad = []
    for mod, deps in graph.items():
        la, unit_a = layer_of(mod)
        for dep in deps:
            lb, unit_b = layer_of(dep)
            if lb > la or (lb == la and unit_a != unit_b and dep != "esopt"):
                bad.append(f"{mod} ({LAYERS[la][0]}) imports {dep} ({LAYERS[lb][0]})")
    assert not bad, "upward or sideways imports:\n" + "\n".join(sorted(bad))


# study/ in rooms, bottom to top: the shared sweep reader and trend fit at its top level, the
# mechanism analyses, the claims, the report; a room imports only from itself or below.
STUDY_ROOMS = ["esopt.study", "esopt.study.analyses", "esopt.study.claims", "esopt.study.report"]


def study_room(mod: str) -> int:
    parts = mod.split(".")
    sub = ".".join(parts[:3])
    return STUDY_ROOMS.index(sub) if sub in STUDY_ROOMS and len(parts) > 3 or mod in STUDY_ROOMS[1:] else 0


def test_study_rooms_import_only_downward(graph):
    study = [m for m in graph if m.startswith("esopt.study.")]
    assert {study_room(m) for m in study} == {0, 1, 2, 3}, "every room holds modules"
    bad = [f"{m} imports {d}" for m in study for d in graph[m]
           if d.startswith("esopt.study") and study_room(d) > study_room(m)]
    assert not bad, "a study room imports from a room above it:\n" + "\n".join(sorted(bad))
    assert study_room("esopt.study.claims.rules") > study_room("esopt.study.analyses.sparsity")
    assert study_room("esopt.study.report.page") > study_room("esopt.study.claims.simulate")

def test_no_import_cycle(graph):
    state: dict[str, int] = {}
    cycles = []

    def visit(mod, stack):
        state[mod] = 1
        stack.append(mod)
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_check_sees_lazy_and_upward_imports(tmp_path):
    """The graph builder itself: a function-level import is an edge, and an upward one fails."""
    f = tmp_path / "mod.py"
    f.write_text("def f():\n    from esopt.study import report\n    import esopt.cli.sweep\n")
    deps = imports(f, "esopt.core.fake", {"esopt.study", "esopt.study.report", "esopt.cli.sweep",
                                            "esopt.cli"})
    assert deps == {"esopt.study.report", "esopt.cli.sweep"}
    assert all(layer_of(d)[0] > layer_of("esopt.core.fake")[0] for d in deps)
