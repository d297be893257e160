"""The package layout is the architecture: each folder is one layer and imports only from the
layers below it (or within itself), and no module imports itself back through others."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bottom to top: the sans-IO core, the sinks and tools beside it, the adapters, the applications
LAYERS = {"streaming.wire": 0, "streaming.operators": 1, "streaming.sinks": 1, "infra": 1, "streaming.spark": 2,
          "producers": 2, "streaming.apps": 3}


def modules() -> dict[str, Path]:
    found = {}
    for top in ("streaming", "producers", "infra"):
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every project module `name` imports, at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def layer_of(module: str) -> str | None:
    return max((folder for folder in LAYERS if module == folder or module.startswith(folder + ".")),
               key=len, default=None)


def test_there_is_no_import_circle():
    g = graph()
    state: dict[str, int] = {}
    circles = []

    def visit(node, trail):
        state[node] = 1
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [node])
    assert circles == []


def test_each_folder_imports_only_from_the_layers_below_it():
    wrong = []
    for module, targets in graph().items():
        mine = layer_of(module)
        for target in targets:
            theirs = layer_of(target)
            if mine is None or theirs is None or theirs == mine:
                continue
            if LAYERS[theirs] >= LAYERS[mine]:
                wrong.append(f"{module} ({mine}) imports {target} ({theirs})")
    assert wrong == []


def test_the_sans_io_core_imports_no_spark_kafka_or_database():
    heavy = ("pyspark", "confluent_kafka", "kafka", "sqlite3", "psycopg", "pandas", "pyarrow")
    for name, path in modules().items():
        if layer_of(name) in ("streaming.wire", "streaming.operators"):
            tree = ast.parse(path.read_text())
            used = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
                (n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
            assert not used & set(heavy), f"{name} imports {used & set(heavy)}"


def test_every_module_belongs_to_a_layer():
    assert [m for m in modules() if layer_of(m) is None and m != "streaming"] == []


def test_no_code_comment_or_doc_cites_a_tracker_number():
    """A comment says why, citing the spec section or the measured reason: an issue number means
    nothing to a reader of the repository."""
    import re
    cited = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for top in ("streaming", "producers", "infra", "tests", "schemas")
             for path in sorted((ROOT / top).rglob("*")) if path.suffix in (".py", ".yml", ".avsc", ".sh", ".md")
             for n, line in enumerate(path.read_text().splitlines(), 1) if cited.search(line)]
    found += [f"{path.relative_to(ROOT)}:{n}" for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
              for n, line in enumerate(path.read_text().splitlines(), 1) if cited.search(line)]
    found += [f"{name}:{n}" for name in ("Makefile", "pyproject.toml")
              for n, line in enumerate((ROOT / name).read_text().splitlines(), 1) if cited.search(line)]
    assert not found, "\n".join(found)


def test_no_module_imports_another_modules_private_name():
    """A leading underscore says a name is its module's own: the project's modules and tests import
    only public names from each other (the standard library's are not this project's to change)."""
    project = set(modules()) | {p.stem for p in (ROOT / "tests").glob("*.py")}
    found = []
    for path in [*modules().values(), *(ROOT / "tests").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in
                                                      {m.split(".")[0] for m in project}):
                found += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


def _declared(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and "__all__" in [
                getattr(t, "id", None) for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]:
            return [e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)]
    return None


def _fallbacks(tree: ast.Module) -> set[int]:
    """The imports an `except ImportError:` tries when the first fails (another revision's names)."""
    return {id(n) for handler in ast.walk(tree) if isinstance(handler, ast.ExceptHandler)
            and getattr(handler.type, "id", None) == "ImportError" for n in ast.walk(handler)}


def test_each_module_says_what_it_offers_and_the_others_take_only_that():
    """__all__ on every module names what it defines or passes on; an import of a project name from
    a module takes one it names (or a submodule of a package)."""
    mods = modules()
    offered, undeclared, missing, taken = {}, [], [], []
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        declared = _declared(tree)
        if declared is None:
            undeclared.append(name)
            continue
        bound = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                 for a in n.names} | {t.id for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                                       for t in ast.walk(n) if isinstance(t, ast.Name)} | {
            n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        missing += [f"{name}.{d}" for d in declared if d not in bound]
        offered[name] = set(declared)
    for path in [*mods.values(), *(ROOT / "tests").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        skip = _fallbacks(tree)
        own = next((m for m, p in mods.items() if p == path), None)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or id(node) in skip:
                continue
            base = node.module or ""
            if node.level:
                package = own if path.name == "__init__.py" else own.rsplit(".", 1)[0]
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base in offered:
                taken += [f"{path.relative_to(ROOT)}: {base}.{a.name}" for a in node.names
                          if a.name not in offered[base] and f"{base}.{a.name}" not in mods]
    assert (undeclared, missing, taken) == ([], [], [])
