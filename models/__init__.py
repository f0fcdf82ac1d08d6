"""tilepy.models: autograd tensors, layers, optimizers and training loops built on tilepy
kernels.
"""
