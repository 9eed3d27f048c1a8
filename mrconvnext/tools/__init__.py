"""The ImageNet workflow: train, validate, benchmark, export and plot (console entry points ``mrconvnext-*``).

Each module has ``main(argv: list[str] | None = None)``; ``scripts/<name>.py`` and the console
entry points call it. ``digits`` writes scikit-learn's handwritten digits as an ImageFolder for a
first run without ImageNet. The modules are imported on use (``from mrconvnext.tools import train``),
so ``import mrconvnext`` does not pull in the data and plotting stacks.
"""

__all__ = ['train', 'validate', 'benchmark', 'export', 'plot', 'digits']
