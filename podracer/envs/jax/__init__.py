"""Adapters of the JAX environment suites: each turns a suite into podracer's Environment."""
