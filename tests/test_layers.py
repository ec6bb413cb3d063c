"""The dependency direction is one way (issue 10, item 8): every kwsniff module imports only from
layers below its own, as docs/development.md's "Layers, bottom up" lists them. Imports are read with ast,
including those under TYPE_CHECKING and inside functions (a deferred import is still a dependency).
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
    {"pipeline", "pipeline.run", "pipeline.run_live", "pipeline.keylogs"},
    {"pipeline.live_worker"},  # a process of `capture --workers`, built on run_live
    {"pipeline.run_workers"},  # their coordinator
    {"spark"},  # the fleet pipeline (imports pyspark only when called)
    {"report"},  # the report's sections over the tables and their plots
    {"core"},  # the jobs both doors call: options, decoding inputs into sinks, outputs, report answers
    # The two doors onto the core, side by side: neither imports the other (SIBLINGS).
    {"commands", "api"},
    {"cli"},
    {"entry"},
    {"__main__"},
]
# Upward imports allowed on purpose, each with its reason.
EXCEPTIONS: set[tuple[str, str]] = {
    # The package root re-exports the Python API (kwsniff.read...) by a module __getattr__ that
    # imports kwsniff.api on first use: `import kwsniff` itself loads nothing of it.
    ("kwsniff", "api"),
    # `kwsniff.report` is both this package and the API's report function: once the package is
    # imported the root's attribute is the package, so the package is callable and calls the API.
    ("report", "api"),
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


def imports() -> list[tuple[str, str]]:
    """(importing module, imported kwsniff module) for every import in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [(module, name) for name in names if name == "kwsniff" or name.startswith("kwsniff.")]
    return found


def test_every_module_belongs_to_a_listed_layer() -> None:
    layers = {layer_of(m) for pair in imports() for m in pair}
    layers |= {"kwsniff" if p.stem == "__init__" else p.stem for p in PACKAGE.glob("*.py")}
    layers |= {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert layers <= set().union(*LAYERS), layers - set().union(*LAYERS)


def test_no_module_imports_a_layer_above_or_beside_its_own() -> None:
    wrong = sorted(
        {
            (layer_of(importer), layer_of(imported))
            for importer, imported in imports()
            if layer_of(importer) != layer_of(imported)
            # Beside: another layer of the same level, as the doors are (SIBLINGS).
            and level(layer_of(imported)) >= level(layer_of(importer))
        }
        - EXCEPTIONS
    )
    assert wrong == []


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
