"""mxkernels: Triton production kernels and torch ops (MXLinear, recipes, training).

Empty until the kernels issue lands; the reference they are held to is `mxref`.
"""
