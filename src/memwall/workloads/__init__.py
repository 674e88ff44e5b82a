"""Training steps: networks and configurations lowered to kernels and access streams."""
