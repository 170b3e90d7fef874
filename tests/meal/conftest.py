"""Fixtures of the MEAL tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
    """JAX's persistent compilation cache for one test module: runs of one configuration
    compile the same programs, the later ones load them (the module's first still
    compiles). Modules that train ``ppo-jax`` several times use it
    (``pytestmark = pytest.mark.usefixtures("compile_cache")``)."""
    import jax

    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    previous = {k: getattr(jax.config, k) for k in keys}
    jax.config.update(keys[0], str(tmp_path_factory.mktemp("jax-cache")))
    jax.config.update(keys[1], 0.0)
    yield
    for key, value in previous.items():
        jax.config.update(key, value)
