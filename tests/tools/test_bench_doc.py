"""scripts/_bench.py's docs/benchmarks.md writer: each table a section of its own, rewritten in place by its
command, with the date, machine, commit, versions and command; the other sections and the intro stay."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from .conftest import REPO


@pytest.fixture(scope='module')
def bench():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REPO / 'scripts'))
        spec = importlib.util.spec_from_file_location('bench_helpers_under_test', REPO / 'scripts' / '_bench.py')
        module = importlib.util.module_from_spec(spec)
        mp.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
    return module


def test_sections_are_written_and_replaced_in_place(bench, tmp_path):
    doc = tmp_path / 'benchmarks.md'
    table = bench.markdown_rows([{'case': 'a', 'ms': 1.5}, {'case': 'b', 'ms': 2.0, 'ratio': 1.33}])
    assert table == ['| case | ms | ratio |', '| --- | --- | --- |', '| a | 1.5 |  |', '| b | 2.0 | 1.33 |']
    bench.write_doc_section('one', 'First table', 'python scripts/x.py --one', table, doc)
    bench.write_doc_section('two', 'Second table', 'python scripts/y.py', ['| k |', '| --- |', '| 1 |'], doc)
    bench.write_doc_section('one', 'First table', 'python scripts/x.py --one --again', ['| new |'], doc)
    text = doc.read_text()
    assert text.startswith('# Benchmarks\n')
    assert text.count('<!-- bench:one -->') == text.count('<!-- /bench:one -->') == 1
    first, second = text.index('<!-- bench:one -->'), text.index('<!-- bench:two -->')
    assert first < second, 'a rewritten section keeps its place'
    one = text[first : text.index('<!-- /bench:one -->')]
    assert '## First table' in one and '| new |' in one and '| a | 1.5 |' not in one
    assert 'by `python scripts/x.py --one --again`.' in one and 'commit ' in one and 'torch ' in one
    assert '| 1 |' in text[second:], 'the other section stays'
