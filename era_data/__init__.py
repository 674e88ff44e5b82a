"""Shipped data: machine profiles, network presets and published measurements (TOML)."""
