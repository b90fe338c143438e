"""memplan (placeholder while the front end is being built)."""
