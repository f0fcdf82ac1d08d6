"""The convolution kernels the models use: the library's NCHW forward, input gradient and
weight gradient (tilepy/kernels/conv_nchw.py, S = [stride, pad, dilation])."""

from tilepy.kernels.conv_nchw import conv2d_dgrad, conv2d_fwd, conv2d_wgrad

__all__ = ["conv2d_dgrad", "conv2d_fwd", "conv2d_wgrad"]
