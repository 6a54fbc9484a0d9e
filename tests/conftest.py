"""Shared fixtures: real Redis-protocol servers started by the tests themselves.
Plain helper functions are in ``tests/helpers.py`` (and ``tests/api_support.py`` for HTTP):
a test module imports from there, never from this file.

- ``redis_url``: vecserve's own embedded valkey-server in a temporary data dir, started
  through the same :class:`vecserve.embedded.EmbeddedServer` that the CLI uses; or the
  throw-away server given by ``pytest --redis-url URL`` / ``$VECSERVE_TEST_REDIS_URL``
  (it is FLUSHED between tests). Never ``$VECSERVE_REDIS_URL``: that is where users point
  vecserve at their real data, so the suite removes it from its environment at start
  (the library, and every command a test runs, then never reaches that server).
- ``cluster_url``: a 3-node Redis Cluster of valkey-server processes on loopback, formed
  with CLUSTER ADDSLOTSRANGE + CLUSTER MEET (no valkey-cli needed).
- ``store``: a :class:`vecserve.store.Store` on ``redis_url``, flushed after each test.
- ``app_client``: ``app_client(app)`` enters an :class:`~tests.api_support.AppClient` on
  the app (its lifespan runs) and leaves it after the test.
- ``_collect_after_cluster_tests`` (every test marked ``cluster``): ``gc.collect()`` at
  its teardown, so what it leaked is reported against it.
- ``live_server``: ``live_server(app)`` serves the app with a real uvicorn on a socket the
  suite binds, and gives its base URL; ``service_url`` is the vecserve service so served.
"""

from __future__ import annotations

import contextlib
import gc
import os

import numpy as np
import pytest

from tests.api_support import AppClient, running_app
from tests.helpers import start_cluster, write_w2v
from vecserve.embedded import EmbeddedServer
from vecserve.store import Store

TEST_URL_ENV = "VECSERVE_TEST_REDIS_URL"

# tests/mpi/ holds programs that every rank of ``mpiexec -n N python -m pytest tests/mpi/X``
# runs (tests/test_train_distributed.py starts them); outside mpiexec (Open MPI's, which
# names the world's size to each rank) they are not collected.
collect_ignore = [] if "OMPI_COMM_WORLD_SIZE" in os.environ else ["mpi"]


def pytest_addoption(parser):
    parser.addoption(
        "--redis-url",
        default=None,
        metavar="URL",
        help="a THROW-AWAY Redis/Valkey for the tests (FLUSHALL between tests); default "
        f"${TEST_URL_ENV}, else a server the suite starts. $VECSERVE_REDIS_URL is never used.",
    )


# The inner-loop subset, ``pytest -m fast`` (about a minute): the tests of these modules,
# less those marked slow, cluster or docker. Chosen by their measured time (``--durations``):
# the library's units, the readers, the loader, the store, the cache and the HTTP API. With
# ``-m fast`` alone the other modules are not even imported.
FAST_MODULES = frozenset(
    {
        "test_acl",
        "test_ann_ivf",
        "test_api",
        "test_api_auth",
        "test_api_fastpath",
        "test_api_similarity",
        "test_architecture",
        "test_cache",
        "test_codec",
        "test_errors",
        "test_exported_members",
        "test_fileio",
        "test_gensim_surface",
        "test_ivfscan",
        "test_keyedvectors_async",
        "test_loader",
        "test_metrics",
        "test_reader",
        "test_readers_fuzz",
        "test_search_batch",
        "test_search_i8rows",
        "test_search_planner",
        "test_similarity_vocab",
        "test_store",
        "test_train_corpus",
        "test_train_kernels",
        "test_train_model",
        "test_train_params",
        "test_train_plan",
    }
)
NOT_FAST = ("slow", "cluster", "docker")


def pytest_ignore_collect(collection_path, config):
    if (
        config.getoption("markexpr") == "fast"
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and collection_path.stem not in FAST_MODULES
    ):
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in FAST_MODULES and not any(map(item.get_closest_marker, NOT_FAST)):
            item.add_marker(pytest.mark.fast)


def pytest_configure(config):
    # $VECSERVE_REDIS_URL names a user's own server: nothing in the suite may reach it
    os.environ.pop("VECSERVE_REDIS_URL", None)
    here = os.path.dirname(__file__)
    if gone := sorted(m for m in FAST_MODULES if not os.path.exists(f"{here}/{m}.py")):
        raise pytest.UsageError(f"FAST_MODULES in tests/conftest.py names no such module: {gone}")


@pytest.fixture(autouse=True)
def _collect_after_cluster_tests(request):
    """After a cluster test, collect the garbage: a connection it left unclosed (a cluster
    client's socket, typically after a failover) is reported against that test (its
    teardown fails: ResourceWarning is an error here), not against whichever later test
    the garbage collector happens to run in."""
    yield
    if "cluster_nodes" in request.fixturenames or request.node.get_closest_marker("cluster"):
        gc.collect()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory, pytestconfig):
    url = pytestconfig.getoption("--redis-url") or os.environ.get(TEST_URL_ENV)
    if url:
        yield url
        return
    server = EmbeddedServer(tmp_path_factory.mktemp("embedded"))
    server.acquire()
    yield server.url
    server.release()
    server.stop()


@pytest.fixture
def store(redis_url):
    s = Store.from_url(redis_url)
    s.client.flushall()
    yield s
    try:
        s.client.flushall()
    finally:
        s.close()


@pytest.fixture(scope="session")
def cluster_nodes(tmp_path_factory):
    nodes = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield nodes
    for p in nodes:
        p.stop()


@pytest.fixture
def cluster_url(cluster_nodes):
    url = f"redis://127.0.0.1:{cluster_nodes[0].port}"
    s = Store.from_url(url)
    s.client.flushall(target_nodes="primaries")
    yield url
    s.client.flushall(target_nodes="primaries")
    s.close()


@pytest.fixture
def cluster_store(cluster_url):
    s = Store.from_url(cluster_url)
    yield s
    s.close()


@pytest.fixture
def small_bin(tmp_path):
    """A 500 x 20 word2vec .bin with a few non-ASCII tokens, and its arrays."""
    rng = np.random.default_rng(7)
    tokens = [f"w{i}" for i in range(497)] + ["café", "日本", "naïve"]
    vectors = rng.standard_normal((500, 20)).astype(np.float32)
    path = write_w2v(tmp_path / "small.bin", tokens, vectors)
    return path, tokens, vectors


@pytest.fixture
def app_client():
    """``app_client(app)``: a client of ``app`` with its lifespan running, closed after."""
    with contextlib.ExitStack() as stack:
        yield lambda app: stack.enter_context(AppClient(app))


@pytest.fixture
def live_server():
    """``live_server(app)``: the base URL of ``app`` under a real uvicorn, stopped after."""
    pytest.importorskip("uvicorn")
    with contextlib.ExitStack() as stack:
        yield lambda app: stack.enter_context(running_app(app))


@pytest.fixture
def service_url(redis_url, store, tmp_path, live_server):
    """The real vecserve HTTP service (``create_app`` under uvicorn) on ``redis_url``."""
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    settings = Settings(redis_url=redis_url, cache_dir=tmp_path / "service", model_ttl=0)
    return live_server(create_app(settings))
