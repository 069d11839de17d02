"""Servers sharing one Ray cluster each own their replicas (gateway/ray_cluster.py): the
replicas of a server with --gateway-processes are named in its own Ray namespace
(--ray-namespace, or one made for it), so a second server's start never collides with the
first's names, and each server's gateway processes attach to its own replicas. Ray's named
actors are faked (a name is taken once per namespace, as Ray has it): no Ray runtime starts."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

pytest.importorskip("ray", reason="Ray is not installed: pip install 'voxgate[ray]'")

from engine import ray_engine  # noqa: E402
from engine.api import ConfigError, EngineStats, StepTiming  # noqa: E402
from gateway import ray_cluster  # noqa: E402
from gateway.config import GatewaySettings  # noqa: E402
from gateway.ray_cluster import (  # noqa: E402
    attach_replica_pool,
    build_replica_pool,
    with_namespace,
)

STATS = EngineStats(0, 0, 10, 0, 0, StepTiming(), True)


class Method:
    """An actor method: `.remote(...)` gives a reference, which FakeRay.get resolves."""

    def __init__(self, body) -> None:
        self._body = body

    def remote(self, *args):
        return lambda: self._body(*args)


class FakeReplicaActor:
    """A replica's actor, as RayEngine calls it: warmed up at once, no events."""

    def __init__(self, options: dict) -> None:
        self.options = options
        self.start = Method(lambda timeout_s: SimpleNamespace(facts=SimpleNamespace(), stats=STATS))
        self.where = Method(lambda: {"pid": id(self), "host": "fake"})
        self.poll = Method(lambda client, wait_s: time.sleep(0.01) or [])
        self.send = self.detach = self.stop = Method(lambda *args: None)


class FakeRay:
    """Ray's named actors as RayEngine and the replica pool use them: an actor named in a
    namespace is found there by get_actor; a second of the same name in the same namespace is
    refused with a ValueError (Ray's ActorAlreadyExistsError)."""

    def __init__(self) -> None:
        self.named: dict[tuple[str, str], FakeReplicaActor] = {}
        self.inits: list[dict] = []

    # replica_actor().options(...).remote(spec)
    def options(self, **options):
        def remote(spec) -> FakeReplicaActor:
            actor = FakeReplicaActor(options)
            if "name" in options:
                key = (options["namespace"], options["name"])
                if key in self.named:
                    raise ValueError(f"The name {key[1]} (namespace={key[0]}) is already taken.")
                self.named[key] = actor
            return actor

        return SimpleNamespace(remote=remote)

    # the ray module's calls
    def get(self, ref, timeout=None):
        return ref()

    def get_actor(self, name: str, namespace: str) -> FakeReplicaActor:
        if (namespace, name) not in self.named:
            raise ValueError(f"Failed to look up actor {name} in namespace {namespace}")
        return self.named[(namespace, name)]

    def kill(self, actor, no_restart: bool = True) -> None:
        self.named = {k: a for k, a in self.named.items() if a is not actor}

    def is_initialized(self) -> bool:
        return bool(self.inits)

    def init(self, **kwargs) -> None:
        self.inits.append(kwargs)

    def shutdown(self) -> None:
        pass


@pytest.fixture
def fake_ray(monkeypatch) -> FakeRay:
    fake = FakeRay()
    monkeypatch.setattr(ray_engine, "ray", fake)
    monkeypatch.setattr(ray_engine, "replica_actor", lambda: fake)
    monkeypatch.setattr(ray_cluster, "import_ray", lambda: fake)
    monkeypatch.setattr(ray_cluster, "connect", lambda settings: False)
    monkeypatch.setattr(
        ray_cluster, "replica_resources", lambda settings: ray_engine.ReplicaResources()
    )
    spec = SimpleNamespace(config=SimpleNamespace(engine_start_timeout_s=5.0))
    monkeypatch.setattr(ray_cluster, "engine_spec", lambda settings, gpus: spec)
    return fake


# Two `voxgate serve --replicas 2 --gateway-processes 2 --ray-address …` on one cluster.
SERVER = GatewaySettings(replicas=2, gateway_processes=2, ray_address="auto")


def actors(pool) -> list:
    return [replica.engine._actor for replica in pool.replicas]


async def test_two_servers_on_one_cluster_each_name_and_find_their_own_replicas(fake_ray):
    # What each server's main process does before starting its gateway processes.
    one, two = with_namespace(SERVER), with_namespace(SERVER)
    assert one.ray_namespace != two.ray_namespace
    assert one.ray_namespace.startswith("voxgate-") and with_namespace(one) == one
    owners = [build_replica_pool(one, shared=True), build_replica_pool(two, shared=True)]
    assert len(fake_ray.named) == 4  # the second server's names did not collide
    # A gateway process of each server (given its server's settings) attaches to its own.
    gateways = [attach_replica_pool(one, "head:6379"), attach_replica_pool(two, "head:6379")]
    try:
        for owner, gateway in zip(owners, gateways, strict=True):
            assert actors(gateway) == actors(owner)
        assert not set(map(id, actors(owners[0]))) & set(map(id, actors(owners[1])))
        assert [init["namespace"] for init in fake_ray.inits] == [one.ray_namespace]
    finally:
        for pool in [*gateways, *owners]:
            await pool.shutdown()


async def test_two_servers_given_the_same_namespace_are_told_what_to_do(fake_ray):
    named = GatewaySettings(**{**SERVER.__dict__, "ray_namespace": "voxgate-prod"})
    assert with_namespace(named).ray_namespace == "voxgate-prod"
    first = build_replica_pool(named, shared=True)
    try:
        with pytest.raises(ConfigError, match="give each server its own"):
            build_replica_pool(named, shared=True)
    finally:
        await first.shutdown()


def test_a_namespace_is_checked_and_needs_replicas():
    with pytest.raises(ConfigError, match="give --replicas N too"):
        GatewaySettings(ray_namespace="voxgate-prod")
    with pytest.raises(ConfigError, match="use 1 to 64 letters"):
        GatewaySettings(replicas=1, ray_namespace="two words")
    assert GatewaySettings(replicas=1, ray_namespace="voxgate-prod.eu_1").ray_namespace
