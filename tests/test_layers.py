"""The dependency direction is one way (issue 10, item 8): every kwsniff module imports only from
layers below its own, as docs/development.md's "Layers, bottom up" lists them, and no two modules
import each other, however indirectly (issue 46): two measures of the tree that must stay 0. Imports
are read with ast, including those under TYPE_CHECKING and inside functions (a deferred import is
still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kwsniff"

# Bottom up. A module may import from its own layer package and from any layer listed before it.
LAYERS: list[set[str]] = [
    # The package root (__version__), the defaults every layer shares, the memory budget and the
    # cache of compiled decoder code.
    {"kwsniff", "defaults", "memory", "codecache"},
    {"capture"},
    {"net"},
    {"tcp"},
    {"tls"},  # TLS records between reassembly and framing (decryption from key logs)
    {"protocol"},
    {"kafka"},
    {"records"},
    {"rows"},
    {"tables"},
    {"sinks"},
    {"view"},  # the live view, metrics, message rendering and the summary, fed from rows
    # The core pipeline package holds three layers of its own, bottom up.
    {"pipeline.connection"},
    # The compiled common case of session.py (_fastpath.c): it imports nothing, session.py imports it.
    {"pipeline._fastpath"},
    {"pipeline.session"},
    {"pipeline.loop"},  # the one decode loop (fed)
    {"pipeline", "pipeline.run", "pipeline.run_live", "pipeline.keylogs"},
    {"pipeline.live_worker"},  # a process of `capture --workers`, built on run_live
    {"pipeline.run_workers"},  # their coordinator
    {"spark"},  # the fleet pipeline (imports pyspark only when called)
    {"sections"},  # the report's sections over the tables and their plots
    {"core"},  # the jobs both doors call: options, decoding inputs into sinks, outputs, report answers
    # The two doors onto the core, side by side: neither imports the other (SIBLINGS).
    {"commands", "api"},
    {"cli"},
    {"entry"},
    {"__main__"},
]
# Upward imports allowed on purpose, each with its reason; neither measure counts them.
EXCEPTIONS: set[tuple[str, str]] = {
    # The package root re-exports the Python API (kwsniff.read...) by a module __getattr__ that
    # imports kwsniff.api on first use: `import kwsniff` itself loads nothing of it, so no module's
    # import waits on it (the Spark executors' check imports the root to see which kwsniff it got).
    ("kwsniff", "api"),
}


# Layers of one level may not import each other: the command line and the Python API are two doors
# onto the core, and what one needs of the other belongs in the core.
SIBLINGS = {("commands", "api"), ("api", "commands")}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if parts[1:2] == ["pipeline"]:
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else parts[0]


def level(layer: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if layer in names)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def imported_names(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names taken from it) of every import statement in ``path``, relative ones made absolute."""
    module = module_name(path)
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            name = node.module if node.level == 0 else ".".join(filter(None, [base, node.module]))
            found.append((name or "", [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def imports() -> list[tuple[str, str]]:
    """(importing module, imported kwsniff module) for every import in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, _ in imported_names(path):
            if name == "kwsniff" or name.startswith("kwsniff."):
                found.append((module_name(path), name))
    return found


def import_graph() -> dict[str, set[str]]:
    """{module: the kwsniff modules it imports}; `from kwsniff.sections import summaries` imports
    the module kwsniff.sections.summaries (a name that is not a module is taken from the package)."""
    paths = sorted(PACKAGE.rglob("*.py"))
    # The compiled extensions are modules too (kwsniff/rows/_partfacts.c is kwsniff.rows._partfacts).
    modules = {module_name(p) for p in [*paths, *PACKAGE.rglob("*.c")]}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in paths:
        importer = module_name(path)
        for name, taken in imported_names(path):
            if name not in modules:
                continue
            for target in [f"{name}.{t}" if f"{name}.{t}" in modules else name for t in taken] or [name]:
                if (layer_of(importer), layer_of(target)) not in EXCEPTIONS:
                    graph[importer].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: the modules
    of each import each other, directly or through the others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:  # recursion depth is at most the modules' count
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_every_module_belongs_to_a_listed_layer() -> None:
    layers = {layer_of(m) for pair in imports() for m in pair}
    layers |= {"kwsniff" if p.stem == "__init__" else p.stem for p in PACKAGE.glob("*.py")}
    layers |= {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert layers <= set().union(*LAYERS), layers - set().union(*LAYERS)


def upward() -> list[tuple[str, str]]:
    """Every (importing module, imported module) whose import goes to a layer above or beside the
    importer's own, but for EXCEPTIONS."""
    return sorted(
        {
            (importer, imported)
            for importer, imported in imports()
            if layer_of(importer) != layer_of(imported)
            # Beside: another layer of the same level, as the doors are (SIBLINGS).
            and level(layer_of(imported)) >= level(layer_of(importer))
            and (layer_of(importer), layer_of(imported)) not in EXCEPTIONS
        }
    )


def test_no_module_imports_a_layer_above_or_beside_its_own() -> None:
    wrong = upward()
    assert len(wrong) == 0, f"{len(wrong)} imports up a layer:\n" + "\n".join(f"{a} -> {b}" for a, b in wrong)


def test_no_modules_import_each_other() -> None:
    found = cycles(import_graph())
    assert len(found) == 0, f"{len(found)} import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_sees_a_cycle_through_a_function_level_import() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    graph = import_graph()
    # summaries.py once imported engines.py inside its functions while engines.py imported it back.
    assert "kwsniff.sections.summaries" in graph["kwsniff.sections.engines"]
    assert "kwsniff.sections.engines" not in graph["kwsniff.sections.summaries"]
    assert "kwsniff.sections.summaries" in graph["kwsniff.core.output"]  # `from pkg import module`


def test_the_checker_sees_an_upward_import() -> None:
    # connection.py once imported session.py under TYPE_CHECKING; that would be caught as this pair.
    assert level("pipeline.session") > level("pipeline.connection")
    assert ("kwsniff.pipeline.connection", "kwsniff.pipeline.session") not in imports()
    assert ("kwsniff.pipeline.session", "kwsniff.pipeline.connection") in imports()
    assert ("kwsniff.kafka.pairing", "kwsniff.protocol") in imports()  # kafka sits above protocol


def test_the_doors_are_siblings_that_may_not_import_each_other() -> None:
    assert level("commands") == level("api")
    assert level("core") < level("commands") and level("cli") > level("api")
    importers = {(layer_of(a), layer_of(b)) for a, b in imports()}
    assert ("commands", "core") in importers and ("api", "core") in importers
    assert not SIBLINGS & importers


def test_the_development_page_lists_the_layers_in_this_order() -> None:
    page = (PACKAGE.parent / "docs" / "development.md").read_text(encoding="utf-8")
    block = page.split("Layers, bottom up", 1)[1].split("```")[1]
    lines = [line for line in block.strip().splitlines() if not line.startswith(" ")]
    listed = [
        line.split()[0].rstrip("/").removesuffix(".py").removesuffix(".c").replace("/", ".") for line in lines
    ]
    order = [level(name) for name in listed]
    assert order == sorted(order), listed
