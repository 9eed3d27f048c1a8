"""Functional operators: no parameters, no knowledge of models."""

from .long_conv import choose_backend, circular_kernel, crop_kernel, fft_size, long_conv1d

__all__ = ['long_conv1d', 'fft_size', 'choose_backend', 'crop_kernel', 'circular_kernel']
