"""torch.compile(fullgraph=True) of the model families against eager: eval and a training step (outputs and every
parameter gradient), no graph breaks, and other batch and input sizes.

Tolerances: float32, relative to the largest magnitude of the compared tensor; inductor reorders float32 sums
(LayerNorm, matmuls), so compiled and eager agree to float32 rounding accumulated over the network, not bitwise.
"""

import copy

import pytest
import timm
import torch

import mrconvnext  # noqa: F401  (registers the models)

TOL = 1e-4
# one block per stage: every stage (and its kernel lengths) is covered, at a third of the cold compile time


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=TOL, atol=TOL * max(b.abs().max().item(), 1e-6))


def _step(model, x):
    y = model(x)
    y.square().mean().backward()
    params = getattr(model, '_orig_mod', model).named_parameters()  # the compiled wrapper prefixes '_orig_mod.'
    return y.detach(), {n: p.grad.clone() for n, p in params if p.grad is not None}


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize('deployed', [False, True])
def test_mrconvnext_eval_fullgraph(deployed):
    model = timm.create_model('mrconvnext_atto', num_classes=5, ls_init_value=1.0, depths=(1, 1, 1, 1)).eval()
    if deployed:
        model.reparameterize()
    x = torch.randn(2, 3, 64, 64)
    explain = torch._dynamo.explain(model)(x)
    assert explain.graph_break_count == 0, explain.break_reasons
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    with torch.no_grad():
        # a new batch and input size (one recompile) for the deployed form; the branched form (slow to compile:
        # every branch kernel is traced) at one size
        for shape in [(2, 3, 64, 64), (3, 3, 96, 64)][: 2 if deployed else 1]:
            x = torch.randn(shape)
            _close(compiled(x), model(x))


# Inductor compiles the training step at one batch size; the changing batch size (a dynamic recompile, another minute
# of inductor's C++ code generation on CI's two cores) is checked through AOTAutograd's joint graph with aot_eager.
@pytest.mark.parametrize('backend,batches', [('inductor', (4,)), ('aot_eager', (4, 3))])
def test_mrconvnext_training_step_fullgraph(backend, batches):
    model = timm.create_model('mrconvnext_atto', num_classes=5, ls_init_value=1.0, depths=(1, 1, 1, 1)).train()
    compiled_model = copy.deepcopy(model)
    compiled = torch.compile(compiled_model, fullgraph=True, backend=backend)
    for shape in [(b, 3, 64, 64) for b in batches]:
        x = torch.randn(shape)
        model.zero_grad()
        compiled_model.zero_grad()
        y, grads = _step(model, x)
        yc, grads_c = _step(compiled, x)
        _close(yc, y)
        assert grads.keys() == grads_c.keys()
        for name in grads:
            _close(grads_c[name], grads[name])
    # the BatchNorm running statistics were updated alike
    for b, bc in zip(model.buffers(), compiled_model.buffers()):
        if b.is_floating_point():
            _close(bc, b)
