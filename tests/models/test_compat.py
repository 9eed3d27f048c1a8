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


# The fixture's logits were computed with 2 CPU threads, and float32 reductions split their sums by thread: bitwise
# equality needs the same split (1 thread differs by ~3e-8), whatever share of the cores a test worker has.
FIXTURE_THREADS = 2


@pytest.fixture(autouse=True)
def _fixture_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(FIXTURE_THREADS)
    yield
    torch.set_num_threads(threads)


# The fixture's logits were computed on an AMD EPYC, where this test held bitwise. torch's float32 CPU kernels
# (GEMM, LayerNorm, FFT) pick their code by the CPU's vector units, so another CPU rounds differently: on an AVX-512
# Xeon the logits differed by 6e-8 to 9e-8 (1e-7 of their scale) with every family's code unchanged. A change in
# what a checkpoint loads or computes moves them by far more.
TOLERANCE = 1e-6  # of the largest logit


def _close(y: torch.Tensor, ref: torch.Tensor) -> None:
    """Equal to float32 rounding: within ``TOLERANCE`` of the logits' scale (bitwise on the CPU that wrote them)."""
    err = (y - ref).abs().max().item()
    assert err <= TOLERANCE * ref.abs().max().item(), err


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


# The old ``backend`` keyword in a saved config (``model_args``): (family key, old value, the new spelling)
OLD_CONFIGS = [
    ('mrconvnext', 'fft', dict(method='fft')),
    ('mrconvnext', 'direct', dict(method='direct')),
    ('mrconvnext_deployed', 'fft', dict(method='fft')),
    ('talkconvnext', 'torch', dict(engine='torch')),
    ('talkconvnext2d', 'reference', dict(engine='reference')),
]


@pytest.mark.parametrize('key, backend, new', OLD_CONFIGS)
def test_old_config_with_backend_loads_with_a_warning_and_the_same_outputs(key, backend, new, tmp_path):
    """A ``save_for_hf`` directory whose config still says ``backend=...`` (the spelling before ``method`` /
    ``engine``) loads, warns once that the keyword is deprecated, and computes what the new spelling computes
    (bitwise) and what the old version computed with ``'auto'`` (within 1e-5 of the logit scale: another method
    rounds differently in float32)."""
    src = FIXTURE / f'hf-{key}'
    dst = tmp_path / f'hf-{key}'
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    config = json.loads((src / 'config.json').read_text())
    config['model_args']['backend'] = backend
    (dst / 'config.json').write_text(json.dumps(config))
    with pytest.warns(DeprecationWarning, match=f'backend={backend!r} is deprecated'):
        old = timm.create_model(f'local-dir:{dst}', pretrained=True).eval()
    new_model = timm.create_model(f'local-dir:{src}', pretrained=True, **new).eval()
    with torch.no_grad():
        y = old(OUTPUTS['x'])
        assert torch.equal(y, new_model(OUTPUTS['x']))
        ref = OUTPUTS[key]
        assert (y - ref).abs().max() <= 1e-5 * ref.abs().max()
