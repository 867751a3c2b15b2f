"""The commands' persistent compilation cache: the user's folder unless JAX has one or the
environment turns it off, and a command's programs land in it."""

import jax
import pytest

from vaco_jax import cli
from vaco_jax.run import compilation_cache

TRAIN = ["train", "--env", "toy_reach", "--total-steps", "512", "--num-envs", "8",
         "--rollout-length", "16", "--eval-every", "2", "--num-eval-envs", "4",
         "--actor-hidden", "16", "--critic-hidden", "16", "--seeds", "1", "--no-progress"]


@pytest.fixture
def no_cache_yet(monkeypatch):
    """JAX without a cache folder or size for the test (the session's own are put back after)."""
    monkeypatch.delenv("JAX_COMPILATION_CACHE_MAX_SIZE", raising=False)
    session = jax.config.jax_compilation_cache_dir
    size = jax.config.jax_compilation_cache_max_size
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_compilation_cache_max_size", -1)
    yield
    jax.config.update("jax_compilation_cache_dir", session)
    jax.config.update("jax_compilation_cache_max_size", size)


def test_the_user_s_folder_by_default(no_cache_yet, monkeypatch, tmp_path):
    monkeypatch.delenv(compilation_cache.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compilation_cache.enable() == tmp_path / "vaco_jax" / "xla"
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "vaco_jax" / "xla")
    assert jax.config.jax_compilation_cache_max_size == compilation_cache.MAX_BYTES == 2 * 2**30


def test_without_filelock_the_cache_stays_unbounded_rather_than_unread(no_cache_yet, monkeypatch,
                                                                       tmp_path):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "filelock" else find_spec(name, *a))
    monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, str(tmp_path / "mine"))
    assert compilation_cache.enable() == tmp_path / "mine"
    assert jax.config.jax_compilation_cache_max_size == -1


def test_a_size_the_user_set_is_kept_no_limit_included(no_cache_yet, monkeypatch, tmp_path):
    monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, str(tmp_path / "mine"))
    jax.config.update("jax_compilation_cache_max_size", 123 * 2**20)
    assert compilation_cache.enable() == tmp_path / "mine"
    assert jax.config.jax_compilation_cache_max_size == 123 * 2**20
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_compilation_cache_max_size", -1)  # what JAX read from the variable
    monkeypatch.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", "-1")
    assert compilation_cache.enable() == tmp_path / "mine"
    assert jax.config.jax_compilation_cache_max_size == -1


def test_programs_cached_without_a_limit_stay_usable_under_one(no_cache_yet, monkeypatch,
                                                               tmp_path):
    """A folder an unlimited cache filled (an earlier version's) has no access times, which
    JAX's eviction reads for every program: each gets its file's modification time, and new
    programs are written beside the old ones without a warning."""
    import warnings

    from jax._src import compilation_cache as jax_cache

    folder = tmp_path / "xla"
    shortest = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax_cache.reset_cache()
        jax.jit(lambda x: x * 3.0 + 1.0)(jax.numpy.ones(3)).block_until_ready()
        old = sorted(p.name for p in folder.iterdir())
        assert old and not [n for n in old if n.endswith("-atime")]
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, str(folder))
        assert compilation_cache.enable() == folder
        programs = [p for p in folder.iterdir() if p.name.endswith("-cache")]
        for program in programs:
            stamp = folder / program.name.replace("-cache", "-atime")
            assert int.from_bytes(stamp.read_bytes(), "little") == program.stat().st_mtime_ns
        jax_cache.reset_cache()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # JAX warns where it cannot write an entry
            jax.jit(lambda x: x * 5.0 - 2.0)(jax.numpy.ones(4)).block_until_ready()
        assert len([p for p in folder.iterdir() if p.name.endswith("-cache")]) > len(programs)
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", shortest)
        jax_cache.reset_cache()


def test_the_environment_chooses_the_folder_or_turns_it_off(no_cache_yet, monkeypatch,
                                                             tmp_path):
    monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, "off")
    assert compilation_cache.enable() is None
    assert jax.config.jax_compilation_cache_dir is None
    monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, str(tmp_path / "mine"))
    assert compilation_cache.enable() == tmp_path / "mine"


def test_a_cache_jax_already_has_is_kept(no_cache_yet, monkeypatch, tmp_path):
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "jax_own"))
    monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, str(tmp_path / "mine"))
    assert compilation_cache.enable() == tmp_path / "jax_own"
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "jax_own")


def test_a_training_command_compiles_into_the_cache(no_cache_yet, monkeypatch, tmp_path):
    # JAX opens its cache once per process: reopened here on the test's folder, and after the
    # test on the session's again.
    from jax._src import compilation_cache as jax_cache

    folder = tmp_path / "xla"
    monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, str(folder))
    shortest = jax.config.jax_persistent_cache_min_compile_time_secs
    # Every program is cached, however fast it compiles (JAX's default skips those under 1 s).
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax_cache.reset_cache()
    try:
        assert cli.main([*TRAIN, "--out", str(tmp_path / "run")]) == 0
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", shortest)
        jax_cache.reset_cache()
    assert any(folder.iterdir())
