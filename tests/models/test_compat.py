"""Checkpoints written by an earlier version load with the same outputs (``tests/fixtures/compat``, written by the
package at commit b0ea039 with ``tests/fixtures/make_compat_fixture.py``): a state dict and a ``save_for_hf``
directory per family, and the logits that version computed on a fixed batch."""

import json
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file

import mrconvnext  # noqa: F401  (registers the models)

FIXTURE = Path(__file__).parent.parent / 'fixtures' / 'compat'
RECORD = json.loads((FIXTURE / 'models.json').read_text())['models']
OUTPUTS = load_file(FIXTURE / 'outputs.safetensors')


def _close(y: torch.Tensor, ref: torch.Tensor) -> None:
    """Bitwise: the same arithmetic as then (a change of algorithm that only moves float32 rounding would justify
    a tolerance of 1e-6 of the logit scale, stated here)."""
    assert torch.equal(y, ref), (y - ref).abs().max().item()


@pytest.mark.parametrize('key', sorted(RECORD))
def test_old_state_dict_loads_with_the_same_outputs(key):
    spec = RECORD[key]
    model = timm.create_model(spec['name'], **spec['kwargs']).eval()
    model.load_state_dict(load_file(FIXTURE / f'{key}.safetensors'))
    with torch.no_grad():
        _close(model(OUTPUTS['x']), OUTPUTS[key])


@pytest.mark.parametrize('key', sorted(RECORD))
def test_old_save_for_hf_directory_loads_with_the_same_outputs(key):
    model = timm.create_model(f'local-dir:{FIXTURE / f"hf-{key}"}', pretrained=True).eval()
    with torch.no_grad():
        _close(model(OUTPUTS['x']), OUTPUTS[key])
