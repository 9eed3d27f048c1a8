"""TorchScript support for the token mixers: the scripted model calls each mixer's Python forward.

The mixers' forwards call custom operators through Python glue (backend choice, kernel synthesis, caches) that
TorchScript cannot compile. A mixer derives from :class:`ScriptedInPython` and marks its forward with
:func:`python_forward` (``torch.jit.ignore``). When ``torch.jit.script`` prepares the module it registers the Python
module under a fresh id (a scripted int attribute); the scripted model's ignored forward then runs the Python
module's forward, which shares its parameters and buffers with the scripted one.

So ``torch.jit.script(model)`` works and gives the eager results, but the scripted model needs Python:
``torch.jit.save`` cannot serialize it (deploy with ``torch.export`` or ONNX), and the registry keeps every scripted
mixer's Python module alive for the life of the process.
"""

import functools
import itertools
from collections.abc import Callable

import torch
import torch.nn as nn

__all__ = ['ScriptedInPython', 'python_forward']

_PYTHON_MODULES: dict[int, nn.Module] = {}
_IDS = itertools.count(1)


class ScriptedInPython(nn.Module):
    """Base of modules whose forward TorchScript calls in Python (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.python_module_id = 0  # set when scripted

    def __prepare_scriptable__(self) -> nn.Module:
        self.python_module_id = next(_IDS)
        _PYTHON_MODULES[self.python_module_id] = self
        return self


def python_forward(forward: Callable) -> Callable:
    """``torch.jit.ignore`` a forward; called from TorchScript, it runs on the registered Python module (whose training
    mode follows the scripted module's)."""

    @functools.wraps(forward)
    def run(self, *args):
        module = self
        if isinstance(self, torch.jit.ScriptModule):
            module = _PYTHON_MODULES[self.python_module_id]
            if module.training != self.training:
                module.train(self.training)
        return forward(module, *args)

    return torch.jit.ignore(run)
