"""The package's import rules, read from its source (every import statement, those inside functions included):
an underscore name means "this file only", so no module imports one from another file or reaches into another
module's underscore attributes; the operators (``mrconvnext.ops``) import each other without a cycle; and no
test, benchmark or script patches a private name of the package (engines are chosen through ``engine=`` /
``method=`` and :mod:`mrconvnext.ops.engines`); and the layers import only downwards (ops <- layers <- models <-
tools)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / 'mrconvnext'


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob('*.py'))}


def _is_package(name: str) -> bool:
    return MODULES[name].name == '__init__.py'


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` reads from."""
    if not node.level:
        return node.module or ''
    base = importer.split('.')
    if not _is_package(importer):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return '.'.join(base + ([node.module] if node.module else []))


def _imports(name: str):
    """``(line, module, imported name or None)`` for every import of a ``mrconvnext`` module in module ``name``."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith('mrconvnext'):
                    yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(name, node)
            if source.startswith('mrconvnext'):
                for alias in node.names:
                    yield node.lineno, source, alias.name


def _targets(source: str, imported: str | None) -> list[str]:
    """The modules an import loads: a submodule where the name is one, else the module itself."""
    if imported is not None and f'{source}.{imported}' in MODULES:
        return [f'{source}.{imported}']
    return [source] if source in MODULES else []


def _private(dotted: str) -> bool:
    return any(part.startswith('_') and not part.startswith('__') for part in dotted.split('.'))


def test_no_module_imports_an_underscore_name_from_another_file():
    bad = []
    for name in MODULES:
        for line, source, imported in _imports(name):
            if _private(source) or (imported is not None and _private(imported)):
                bad.append(f'{MODULES[name].relative_to(ROOT)}:{line}: {source} import {imported}')
    assert not bad, 'underscore names imported across files:\n' + '\n'.join(bad)


def test_no_module_reaches_into_another_modules_underscore_attributes():
    """``engines._modules`` and the like: attributes of an imported package module whose name starts with ``_``."""
    bad = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _resolve(name, node).startswith('mrconvnext'):
                source = _resolve(name, node)
                aliases |= {a.asname or a.name for a in node.names if f'{source}.{a.name}' in MODULES}
            elif isinstance(node, ast.Import):
                aliases |= {a.asname for a in node.names if a.name.startswith('mrconvnext') and a.asname}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _private(node.attr)
            ):
                bad.append(f'{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}')
    assert not bad, 'private attributes of other modules used:\n' + '\n'.join(bad)


def _ops_graph() -> dict[str, set[str]]:
    graph = {name: set() for name in MODULES if name.startswith('mrconvnext.ops')}
    for name in graph:
        for _, source, imported in _imports(name):
            graph[name] |= {t for t in _targets(source, imported) if t in graph and t != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_operators_import_graph_has_no_cycle():
    graph = _ops_graph()
    assert len(graph) > 20 and graph['mrconvnext.ops.talk.api']  # the graph was read
    cycle = _cycle(graph)
    assert cycle is None, 'import cycle: ' + ' -> '.join(cycle)


def test_the_cycle_finder_finds_cycles():
    """The check above can fail: a graph with a circle is reported, one without is not."""
    assert _cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}) == ['a', 'b', 'c', 'a']
    assert _cycle({'a': {'b', 'c'}, 'b': {'c'}, 'c': set()}) is None


@pytest.mark.parametrize('folder', ['tests', 'scripts'])
def test_nothing_patches_a_private_name_of_the_package(folder):
    """``monkeypatch.setattr(module, '_name', ...)`` or ``module._name = ...`` on a package module: choosing an
    engine that way bypasses the resolver; tests and scripts use ``engine=`` / ``method=`` and public names."""
    bad = []
    for path in sorted((ROOT / folder).rglob('*.py')):
        if path.name == 'test_imports.py':
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == 'setattr'
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and _private(node.args[1].value)
                and 'mrconvnext' in ast.unparse(node.args[0]) + _imported_as(tree, ast.unparse(node.args[0]))
            ):
                bad.append(f'{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}')
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and _private(target.attr):
                        owner = ast.unparse(target.value)
                        if 'mrconvnext' in owner + _imported_as(tree, owner.split('.')[0]):
                            bad.append(f'{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}')
    assert not bad, 'private names patched:\n' + '\n'.join(bad)


def _imported_as(tree: ast.Module, name: str) -> str:
    """Where ``name`` was imported from in ``tree`` ('' if it was not)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if any((a.asname or a.name) == name for a in node.names):
                return node.module
        elif isinstance(node, ast.Import):
            if any((a.asname or a.name.split('.')[0]) == name for a in node.names):
                return next(a.name for a in node.names if (a.asname or a.name.split('.')[0]) == name)
    return ''


LAYERS = ('mrconvnext.ops', 'mrconvnext.layers', 'mrconvnext.models', 'mrconvnext.tools')  # lowest first


def _layer(module: str) -> int | None:
    """The index in ``LAYERS`` of the layer a module belongs to (None: the package's top-level modules)."""
    for i, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + '.'):
            return i
    return None


def _upward_imports(modules) -> list[str]:
    bad = []
    for name in modules:
        here = _layer(name)
        if here is None:
            continue
        for line, source, imported in _imports(name):
            for target in _targets(source, imported) or [source]:
                there = _layer(target)
                if there is None and target != 'mrconvnext':
                    there = len(LAYERS)  # a top-level module (the CLIs, the demo) sits above every layer
                if there is not None and there > here:
                    bad.append(f'{MODULES[name].relative_to(ROOT)}:{line}: {target}')
    return bad


def test_layers_import_only_downwards():
    """ops <- layers <- models <- tools: operators know nothing of modules, modules nothing of models, models
    nothing of the tools (imports inside functions included)."""
    assert sum(_layer(name) == 3 for name in MODULES) > 5  # the modules were read
    bad = _upward_imports(MODULES)
    assert not bad, 'imports from a higher layer:\n' + '\n'.join(bad)


def test_the_layer_rule_finds_an_upward_import(tmp_path, monkeypatch):
    """The check above can fail: an operator module importing a layer is reported."""
    planted = tmp_path / 'planted.py'
    planted.write_text('def f():\n    from mrconvnext.layers import MRConv1d\n    return MRConv1d\n')
    monkeypatch.setitem(MODULES, 'mrconvnext.ops.planted', planted)
    monkeypatch.setitem(globals(), 'ROOT', tmp_path)
    assert _upward_imports(['mrconvnext.ops.planted']) == ['planted.py:2: mrconvnext.layers']
