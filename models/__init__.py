"""tilepy.models (planned; nothing here yet): autograd tensors, layers, optimizers and training
loops built on tilepy kernels.
"""
