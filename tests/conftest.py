import gc

import jax
import pytest

import simjax

# The process settings simjax's programs were measured with (XLA:CPU flags and one thread,
# which keep batched loops from hanging on a 2-core machine; the persistent compilation
# cache), before the first JAX computation.
simjax.configure()
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


# XLA:CPU loads each kernel of a compiled program into its own pages (three mappings per
# kernel); one Hessian of an Assembler solve is ~1000 kernels, ~3000 mappings, so a single
# test module of second-derivative checks can pass Linux's vm.max_map_count (65530) and the
# next compile or cache load dies inside jaxlib (abort or segfault).
_MAP_BUDGET = 30_000


def _mapping_count() -> int:
    try:
        with open("/proc/self/maps") as fh:
            return sum(1 for _ in fh)
    except OSError:  # not Linux
        return 0


@pytest.fixture(autouse=True)
def _stay_below_the_mapping_limit():
    """Drop JAX's compiled programs after a test once the process holds more than
    ``_MAP_BUDGET`` memory mappings (see above); a no-op otherwise."""
    yield
    if _mapping_count() > _MAP_BUDGET:
        jax.clear_caches()
        gc.collect()
