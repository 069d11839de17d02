"""`voxgate serve --replicas N`: a Ray runtime (started here, or joined with `--ray-address`),
N engine replicas as Ray actors on its GPUs (or CPUs), each under its own supervisor, and the
pool that places sessions on them (gateway/replica_pool.py).

The only module of the gateway that imports Ray, and only when `--replicas` is given.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor, wait

from engine.api import ConfigError
from gateway.config import GatewaySettings
from gateway.replica_pool import ReplicaPool
from gateway.supervisor import RestartPolicy, SupervisedEngine

log = logging.getLogger("voxgate.gateway")

RAY_MISSING = (
    "--replicas runs engine replicas on Ray, which is not installed: "
    "pip install 'voxgate[ray]' (or pip install 'ray>=2.40,<3')"
)


def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


def with_namespace(settings: GatewaySettings) -> GatewaySettings:
    """The settings with the Ray namespace of this server's replicas settled: --ray-namespace,
    else one made for this server (`voxgate-` and a random id). Two servers on one Ray cluster
    then never take each other's replicas' names, and this server's gateway processes, given
    these settings, find its own replicas."""
    if settings.ray_namespace:
        return settings
    return dataclasses.replace(settings, ray_namespace=f"voxgate-{uuid.uuid4().hex[:12]}")


def connect(settings: GatewaySettings) -> bool:
    """Join the cluster at --ray-address, or start a Ray runtime on this machine; True when
    this process started it (and so stops it at exit). This process's Ray job is in the
    server's namespace (`with_namespace`), so its replicas list under it (`ray list actors`).
    A runtime already connected in this process (an embedder's, a test's) is used as it is."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    common = dict(
        include_dashboard=False, configure_logging=False, namespace=settings.ray_namespace
    )
    if settings.ray_address:
        check_reachable(settings.ray_address)
        try:
            ray.init(address=settings.ray_address, **common)
        except ConnectionError as exc:  # `auto` with no cluster running on this machine
            raise ConfigError(
                f"no Ray cluster found at --ray-address {settings.ray_address}: start one "
                "(ray start --head) or give its head's host:port"
                f" ({str(exc).splitlines()[0]})"
            ) from None
        return False
    # "local": a runtime of this server's own, even where another Ray cluster runs on this
    # machine (without it, ray.init would join that one and refuse num_cpus).
    ray.init(address="local", num_cpus=os.cpu_count() or 1, **common)
    return True


# How long --ray-address's head may take to accept a TCP connection before the server gives up
# (Ray itself retries an unreachable head for minutes, saying nothing useful).
RAY_HEAD_CONNECT_S = 5.0


def check_reachable(address: str) -> None:
    """ConfigError at once when --ray-address names a host:port nothing answers on (`auto`,
    `local` and ray:// addresses are left to Ray)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), RAY_HEAD_CONNECT_S):
            pass
    except OSError as exc:
        raise ConfigError(
            f"cannot reach the Ray head at --ray-address {address} ({exc.strerror or exc}): "
            "check the address, that the head runs (ray start --head) and that its port is open"
        ) from None


def default_replica_gpus(device: str, ray_address: str | None, cluster_gpus: float) -> float:
    """GPUs a replica takes when --replica-gpus is not given: none with --device cpu; on a
    cluster (--ray-address) one, since its GPU workers may join after the gateway starts (the
    replicas wait for them); on this machine one if it has a GPU."""
    if device == "cpu":
        return 0.0
    if ray_address:
        return 1.0
    return 1.0 if cluster_gpus >= 1 else 0.0


def replica_resources(settings: GatewaySettings):
    """What each replica takes: --replica-gpus (default_replica_gpus) and --replica-cpus. A local runtime that cannot hold them all is a
    ConfigError now, rather than replicas waiting for resources that never come."""
    ray = import_ray()
    from engine.ray_engine import ReplicaResources

    cluster = ray.cluster_resources()
    gpus = settings.replica_gpus
    device = settings.engine.device or ""
    if gpus is None:
        gpus = default_replica_gpus(device, settings.ray_address, cluster.get("GPU", 0))
    if gpus == 0 and device.startswith("cuda"):
        raise ConfigError(
            f"--device {device} with replicas of no GPU (--replica-gpus 0, or no GPU on this "
            "machine): give the replicas GPUs, or serve with --device cpu"
        )
    wanted = ReplicaResources(gpus=gpus, cpus=settings.replica_cpus)
    if not settings.ray_address:  # a cluster may grow (autoscaler); this machine will not
        for kind, each in (("GPU", wanted.gpus), ("CPU", wanted.cpus)):
            have = cluster.get(kind, 0)
            if each * settings.replicas > have + 1e-9:
                raise ConfigError(
                    f"{settings.replicas} replicas of {each:g} {kind} each need "
                    f"{each * settings.replicas:g}, and this machine has {have:g}: lower "
                    f"--replicas or --replica-{kind.lower()}s"
                )
    return wanted


def engine_spec(settings: GatewaySettings, gpus: float):
    """The engine each replica builds. Ray hands a replica its GPU as the only one it sees
    (CUDA_VISIBLE_DEVICES), so --device cuda:N becomes cuda; a replica on CPUs runs as many
    torch threads as it has CPUs unless --cpu-threads says otherwise."""
    from engine.engine_host import EngineSpec
    from models.registry import DEFAULT_MODEL

    config = settings.engine
    if gpus > 0 and (config.device or "").startswith("cuda:"):
        config = dataclasses.replace(config, device="cuda")
    if gpus == 0:
        threads = config.cpu_threads or max(1, int(settings.replica_cpus))
        config = dataclasses.replace(config, device="cpu", cpu_threads=threads)
    model = settings.model or DEFAULT_MODEL
    return EngineSpec(model, settings.codec, config, settings.random_weights, settings.voices_dir)


def replica_names(settings: GatewaySettings) -> list[str]:
    return [f"replica-{i}" for i in range(settings.replicas)]


def build_replica_pool(
    settings: GatewaySettings, policy: RestartPolicy | None = None, shared: bool = False
) -> ReplicaPool:
    """Connect to Ray, start every replica (in parallel) and wait until all are warmed up.
    `shared`: the replicas are named in the server's Ray namespace, for its gateway processes
    to attach to (gateway/gateway_processes.py, which settles the namespace first:
    `with_namespace`); this pool owns and restarts them."""
    settings = with_namespace(settings)
    log.info("engine replicas in Ray namespace %s", settings.ray_namespace)
    started_here = connect(settings)
    ray = import_ray()
    try:
        from engine.ray_engine import RayEngine

        resources = replica_resources(settings)
        spec = engine_spec(settings, resources.gpus)
        names = replica_names(settings)
        # Every gateway process polls each replica, and so does this pool.
        callers = 1 + (settings.gateway_processes if shared else 0)
        namespace = settings.ray_namespace if shared else None  # named only to be shared
        factories = [
            (
                lambda name=name: RayEngine.start(
                    spec, resources, name, namespace=namespace, callers=callers
                )
            )
            for name in names
        ]
        engines = _start_all(factories)
    except BaseException:
        if started_here:
            ray.shutdown()
        raise
    replicas = [
        SupervisedEngine(factory, engine, policy)
        for factory, engine in zip(factories, engines, strict=True)
    ]
    stop = ray.shutdown if started_here else None
    return ReplicaPool(replicas, names, settings, on_shutdown=stop)


def attach_replica_pool(
    settings: GatewaySettings, address: str, policy: RestartPolicy | None = None
) -> ReplicaPool:
    """A gateway process's pool of the shared replicas another process of its server owns
    (gateway/gateway_processes.py): joins its Ray runtime and attaches to each replica by name
    in the server's Ray namespace (settled by the owner: `with_namespace`). When one dies, this
    pool's supervisor attaches again once the owner has rebuilt it."""
    ray = import_ray()
    from engine.ray_engine import RayEngine

    namespace = settings.ray_namespace
    if not namespace:
        raise ValueError("attach_replica_pool needs the owner's settings (with_namespace)")
    if not ray.is_initialized():
        ray.init(
            address=address, include_dashboard=False, configure_logging=False, namespace=namespace
        )
    names = replica_names(settings)
    timeout_s = settings.engine.engine_start_timeout_s
    factories = [(lambda name=name: RayEngine.attach(name, namespace, timeout_s)) for name in names]
    engines = _start_all(factories)
    replicas = [
        SupervisedEngine(factory, engine, policy)
        for factory, engine in zip(factories, engines, strict=True)
    ]
    return ReplicaPool(replicas, names, settings)


def _start_all(factories: list) -> list:
    """Every replica started in parallel; if one fails, the others are stopped and its error
    raised (on a cluster they would otherwise hold their GPUs)."""
    with ThreadPoolExecutor(len(factories)) as pool:
        futures = [pool.submit(factory) for factory in factories]
        wait(futures)
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        for started in (f.result() for f in futures if f.exception() is None):
            asyncio.run(started.shutdown())
        raise failed[0]
    return [f.result() for f in futures]
