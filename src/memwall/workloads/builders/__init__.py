"""Per-architecture step builders: each declares kernels over named tensors, and frees nothing."""
