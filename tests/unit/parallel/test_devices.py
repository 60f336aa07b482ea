import jax


def test_eight_simulated_cpu_devices_for_sharding_tests():
    assert jax.device_count() == 8, f"conftest should give 8 CPU devices, got {jax.devices()}"
