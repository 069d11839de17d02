"""Fixtures for the tests that run `voxgate bench --serve` in this process: what a run does
besides serving and measuring its points is done once per test session, or cut where it only
waits."""

from __future__ import annotations

import dataclasses

import pytest

# The ladder modes' pause between points (LadderConfig.settle_s: 2 s, which --settle does not
# set; it sets the rate search's). The same as test_bench_smoke's --settle 0.2.
LADDER_SETTLE_S = 0.2


@pytest.fixture(scope="session")
def machine_name() -> str:
    """This machine's name as a bench run records it, probed once: report.machine_name()
    starts a Python that imports torch to look for a GPU, ~2 s of a 2-core CI box each run,
    and its answer is the same for every run of a test session."""
    from voxbench import report

    return report.machine_name()


@pytest.fixture
def served_bench(monkeypatch, machine_name):
    """A bench run in this test as the command line runs it, but for two costs that test
    nothing of it:

    - the machine's name is the one probed once for the session (above);
    - a --capacity or --conversations ladder settles 0.2 s between points, not 2 s: after
      each point the ladder has already waited for the server to go idle (its sessions closed,
      no engine request: servers.wait_idle), and after the last point the settle only waits."""
    from voxbench import cli, report

    monkeypatch.setattr(report, "machine_name", lambda: machine_name)
    for name in ("capacity_config_from_args", "turn_capacity_config_from_args"):
        build = getattr(cli, name)

        def settled(args, build=build):
            return dataclasses.replace(build(args), settle_s=LADDER_SETTLE_S)

        monkeypatch.setattr(cli, name, settled)
