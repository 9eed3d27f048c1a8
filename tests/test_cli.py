"""mrconvnext_cli, the console entry points: ``--help`` answers from the tools' own parsers without importing torch or
timm, and every console script of pyproject.toml goes through it."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mrconvnext_cli
from tests.limits import HANG_LIMIT_S

ROOT = Path(__file__).resolve().parents[1]

_HELP_ALL = """
import contextlib, io, json, sys
import mrconvnext_cli
out = {}
for tool in mrconvnext_cli.TOOLS:
    sys.argv = ['mrconvnext-' + tool, '--help']
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            getattr(mrconvnext_cli, tool)()
        except SystemExit as e:
            out[tool] = (e.code, buf.getvalue())
print(json.dumps({'help': out, 'imported': sorted(m for m in ('torch', 'timm', 'mrconvnext') if m in sys.modules)}))
"""


def test_help_answers_without_importing_torch_and_equals_the_tools_parsers(monkeypatch):
    env = {'COLUMNS': '100', 'PATH': '/usr/bin:/bin', 'PYTHONPATH': str(ROOT)}
    proc = subprocess.run(
        [sys.executable, '-c', _HELP_ALL], capture_output=True, text=True, env=env, cwd=ROOT, timeout=HANG_LIMIT_S
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result['imported'] == [], result['imported']
    monkeypatch.setenv('COLUMNS', '100')
    for tool, (module_name, _) in mrconvnext_cli.TOOLS.items():
        code, text = result['help'][tool]
        assert code == 0 and text.startswith('usage: '), tool
        # the tool's own main (what runs without --help) prints the same help
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as exit_:
            importlib.import_module(module_name).main(['--help'])
        assert exit_.value.code == 0 and buf.getvalue() == text, tool


def test_every_console_script_goes_through_the_launcher():
    text = (ROOT / 'pyproject.toml').read_text()
    section = text[text.index('[project.scripts]') :].split('\n[', 1)[0]  # (tomllib is Python >= 3.11)
    scripts = dict(re.findall(r'^([\w-]+) = "([\w.:]+)"$', section, flags=re.M))
    assert scripts, section
    for name, target in scripts.items():
        module, func = target.split(':')
        assert module == 'mrconvnext_cli' and name == f'mrconvnext-{func}' and func in mrconvnext_cli.TOOLS, target
    assert len(scripts) == len(mrconvnext_cli.TOOLS)
