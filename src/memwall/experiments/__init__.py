"""Experiments: sweeps over machines, networks and batches, and their figures."""
