"""Helpers every layer may use: validation of configs, imports by name, seeding, statistics, array ops."""
