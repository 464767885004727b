"""Helpers every layer may use: validation of configs, imports by name, seeding, statistics and
array ops."""
