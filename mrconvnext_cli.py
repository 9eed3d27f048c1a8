"""The console entry points (``mrconvnext-train``, ``-validate``, ...): ``--help`` answers without importing torch.

``import mrconvnext`` imports torch and timm to register the models (seconds on a small machine), and importing any
module of the package runs it first. So this module lies beside the package, not in it: for ``-h`` / ``--help`` it
loads ``mrconvnext/tools/cli_args.py`` (standard library only) by its path and lets that tool's parser print its help;
any other command line imports the tool and runs its ``main``, which parses with the same parser.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

# entry point -> (module whose main() runs it, the parser function in cli_args)
TOOLS = {
    'train': ('mrconvnext.tools.train', 'train_parser'),
    'validate': ('mrconvnext.tools.validate', 'validate_parser'),
    'benchmark': ('mrconvnext.tools.benchmark', 'benchmark_parser'),
    'export': ('mrconvnext.tools.export', 'export_parser'),
    'plot': ('mrconvnext.tools.plot', 'plot_parser'),
    'flops': ('mrconvnext.tools.flops', 'flops_parser'),
    'digits': ('mrconvnext.tools.digits', 'digits_parser'),
    'demo': ('mrconvnext.demo', 'demo_parser'),
    'engines': ('mrconvnext.engines', 'engines_parser'),
}


def _help(parser_name: str, argv: list[str]) -> None:
    path = Path(__file__).resolve().with_name('mrconvnext') / 'tools' / 'cli_args.py'
    spec = importlib.util.spec_from_file_location('_mrconvnext_cli_args', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    getattr(module, parser_name)().parse_args(argv)  # prints the help and exits, as the tool's own parse would


def _run(tool: str) -> None:
    module_name, parser_name = TOOLS[tool]
    argv = sys.argv[1:]
    if any(a == '-h' or (a.startswith('--h') and '--help'.startswith(a)) for a in argv):  # argparse's abbreviations
        _help(parser_name, argv)
    status = importlib.import_module(module_name).main(argv)
    sys.exit(status if isinstance(status, int) else 0)


def _entry(tool: str):
    def main() -> None:
        _run(tool)

    main.__name__ = main.__qualname__ = tool
    main.__doc__ = f'``mrconvnext-{tool}``'
    return main


train, validate, benchmark, export, plot, flops, digits, demo, engines = (_entry(tool) for tool in TOOLS)
