"""Test set-up: two virtual CPU devices, set before JAX is imported anywhere.

Single-device tests pass ``devices=jax.devices()[:1]``; multi-device tests use both.
"""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import pytest


@pytest.fixture(scope="session")
def two_devices():
    devices = jax.devices()
    assert len(devices) >= 2, "conftest must force two virtual CPU devices"
    return devices[:2]


@pytest.fixture(scope="session")
def one_device():
    return jax.devices()[:1]
