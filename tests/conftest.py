import gc

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module.

    Every XLA:CPU executable holds memory mappings for its code; a long-lived pytest worker
    that compiles a few thousand programs reaches Linux's ``vm.max_map_count`` (65530) and
    the next compile aborts inside LLVM. Clearing the caches between modules keeps each
    worker far below it (and its memory down)."""
    yield
    jax.clear_caches()
    gc.collect()
