"""The tile-language kernels behind tilepy.models' autograd ops (forward and backward),
one family per module, and `launch`, which runs a kernel on the current backend with the
arrays the op has already checked. Sizes are symbolic wherever the kernel allows, so one
compile serves every shape; small op codes select a formula at run time inside one kernel.
"""
