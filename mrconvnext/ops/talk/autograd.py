"""Autograd of the TaLK operators, shared by every engine's operators: what is saved, and which backward runs."""

from __future__ import annotations

__all__ = ['register_talk1d_autograd', 'register_talk2d_autograd']


def _talk1d_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])  # x itself (slopes) and the offsets: O(B*C*L), nothing per window
    ctx.args = inputs[2:]


def register_talk1d_autograd(forward_op, backward_op) -> None:
    """Autograd of a TaLK 1-D operator ``forward_op(x, offsets, *args)`` through
    ``backward_op(grad_y, x, offsets, *args, need_dx, need_doff) -> (dx, doff)``."""

    def grad(ctx, grad_y):
        x, offsets = ctx.saved_tensors
        need_dx, need_doff = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, doff = backward_op(grad_y, x, offsets, *ctx.args, need_dx, need_doff)
        return (dx if need_dx else None), (doff if need_doff else None), *(None,) * len(ctx.args)

    forward_op.register_autograd(grad, setup_context=_talk1d_setup)


def _left_out(P) -> bool:
    """Whether a 2-D forward's second output is the ``(0,)`` tensor that stands for a table it left out."""
    return P.dim() == 1 and P.shape[0] == 0


def _talk2d_setup(ctx, inputs, output):
    P = output[1]
    ctx.rebuild = _left_out(P)  # the table left out: x is saved (never larger than it) and the table rebuilt
    ctx.save_for_backward(inputs[0] if ctx.rebuild else P, inputs[1])  # the integral image (or x), the offsets
    ctx.args = inputs[2:]
    ctx.x_dtype = inputs[0].dtype


def register_talk2d_autograd(forward_op, backward_op, table_op=None) -> None:
    """Autograd of a TaLK 2-D operator ``forward_op(x, offsets, *args) -> (y, P)`` through
    ``backward_op(grad_y, P, offsets, *args, need_dx, need_doff) -> (dx, doff)``. A forward that leaves the table out
    (``P`` of shape ``(0,)``) has x saved instead and ``table_op(x) -> P`` rebuild it for the backward."""

    def grad(ctx, grad_y, _grad_P):
        P, offsets = ctx.saved_tensors
        if ctx.rebuild:
            if table_op is None:
                raise RuntimeError(f'{forward_op}: its forward left the table out, and no table operator rebuilds it')
            P = table_op(P)
        need_dx, need_doff = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, doff = backward_op(grad_y.to(ctx.x_dtype), P, offsets, *ctx.args, need_dx, need_doff)
        return (dx if need_dx else None), (doff if need_doff else None), *(None,) * len(ctx.args)

    forward_op.register_autograd(grad, setup_context=_talk2d_setup)
