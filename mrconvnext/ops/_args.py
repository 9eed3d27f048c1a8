"""Argument checks shared by the operators and the layers: one rule, one message."""

from __future__ import annotations

import operator

__all__ = ['check_int']


def check_int(owner: str, name: str, value: object, minimum: int = 1) -> int:
    """``value`` as an int if it is an integer (not a bool) ``>= minimum``; else a ``TypeError`` /
    ``ValueError`` that names ``owner``, the argument, what was expected and what arrived."""
    if isinstance(value, bool):
        raise TypeError(f'{owner}: {name} must be an int >= {minimum}, got bool')
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f'{owner}: {name} must be an int >= {minimum}, got {type(value).__name__}') from None
    if value < minimum:
        raise ValueError(f'{owner}: {name} must be an int >= {minimum}, got {value}')
    return value
