"""Every dotted ``mrconvnext.…`` name that the documentation mentions exists: the docstrings and comments of the
package and the scripts, README.md, CONTRIBUTING.md and ``docs/**/*.md``. A name resolves when its longest importable
prefix imports and the rest are attributes (a module that moved, or a constant that was renamed, fails here). The
CHANGELOG is history and may name what has since moved; string literals in code (logger names, operator names such
as ``mrconvnext.fft_conv``) are not references."""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r'(?<![\w.:/-])mrconvnext(?:\.[A-Za-z_]\w*)+')


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or a module's (nested) attribute."""
    parts = name.split('.')
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module('.'.join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


def _python_prose(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of a Python file's docstrings and comments."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                out.append((node.body[0].lineno, doc))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    return out


def mentions(path: Path) -> list[tuple[int, str]]:
    """``(line, dotted name)`` for every ``mrconvnext.…`` name mentioned in the prose of ``path``."""
    text = path.read_text()
    chunks = _python_prose(text) if path.suffix == '.py' else [(1, text)]
    out = []
    for line, chunk in chunks:
        for m in NAME.finditer(chunk):
            out.append((line + chunk.count('\n', 0, m.start()), m.group(0)))
    return out


def documented_files() -> list[Path]:
    files = [*ROOT.glob('mrconvnext/**/*.py'), *ROOT.glob('scripts/*.py'), *ROOT.glob('docs/**/*.md')]
    return sorted(files) + [ROOT / 'README.md', ROOT / 'CONTRIBUTING.md']


def test_every_mentioned_name_resolves():
    missing = [
        f'{path.relative_to(ROOT)}:{line}: {name}'
        for path in documented_files()
        for line, name in mentions(path)
        if not resolves(name)
    ]
    assert not missing, 'names that do not exist:\n' + '\n'.join(missing)


def test_a_planted_wrong_name_is_reported(tmp_path):
    """The check itself: a moved module, a missing attribute and a typo are reported, in a docstring, a comment and
    Markdown alike, at their lines; existing names and string literals are not."""
    code = tmp_path / 'planted.py'
    code.write_text(
        '"""See :func:`mrconvnext.ops.long_conv1d` and :mod:`mrconvnext.ops.lag_remap`."""\n'
        "LOGGER = 'mrconvnext.not_a_reference'\n"
        '# the constant mrconvnext.ops.engines.NO_SUCH_CONSTANT\n'
    )
    doc = tmp_path / 'planted.md'
    doc.write_text('Intro.\n\n`python -m mrconvnext.tools.benchmark`, then `mrconvnext.layers.MRConv2dd`.\n')
    found = {(path.name, line, name, resolves(name)) for path in (code, doc) for line, name in mentions(path)}
    assert found == {
        ('planted.py', 1, 'mrconvnext.ops.long_conv1d', True),
        ('planted.py', 1, 'mrconvnext.ops.lag_remap', False),
        ('planted.py', 3, 'mrconvnext.ops.engines.NO_SUCH_CONSTANT', False),
        ('planted.md', 3, 'mrconvnext.tools.benchmark', True),
        ('planted.md', 3, 'mrconvnext.layers.MRConv2dd', False),
    }


@pytest.mark.parametrize(
    'name', ['mrconvnext.ops.long_conv.lag_remap.remap_lags', 'mrconvnext.models.mrconvnext.mrconvnext_t']
)
def test_existing_names_resolve(name):
    assert resolves(name)
