"""One case, end to end."""
