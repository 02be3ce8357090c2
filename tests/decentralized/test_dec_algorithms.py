"""The algorithms as pure functions: walk path, contribution cap, gossip rounds, local DP, keyed noise,
and resuming from a checkpoint."""

import dataclasses

import numpy as np
import pytest
import torch

from testbed.decentralized import kernels, steps
from testbed.decentralized.backends import local_chunk
from testbed.decentralized.phase import PhaseArgs, build_phase, walk_path
from testbed.decentralized.problem import build_problem
from testbed.run import RunFolder
from testbed.scenario import Scenario


def _setup(scenario: dict, algorithm: str, steps_planned: int = 40, sigma: float = 1.0):
    data = Scenario.model_validate(scenario).model_dump(mode="json")
    problem = build_problem(data)
    args = PhaseArgs(algorithm, lr=0.2, sigma=sigma, stop=steps_planned, planned=steps_planned, eval_every=10)
    return data, problem, args, build_phase(problem, args)


def test_walk_path_moves_along_w_from_the_seed_alone(tiny_scenario):
    _, problem, _, _ = _setup(tiny_scenario, "random_walk")

    path = walk_path(problem.walk, root=11, steps=4000)

    assert np.all(problem.walk[path[:-1], path[1:]] > 0)
    np.testing.assert_array_equal(walk_path(problem.walk, root=11, steps=50), path[:51])
    visits = np.bincount(path, minlength=problem.n) / len(path)
    np.testing.assert_allclose(visits, 1 / problem.n, atol=0.03)  # uniform stationary law


def test_node_past_its_cap_only_adds_noise(tiny_scenario):
    _, problem, args, phase = _setup(tiny_scenario, "random_walk")
    phase = dataclasses.replace(phase, cap=1)
    state = steps.initial_state(problem, phase)
    attack = steps.Attack(problem, phase)

    noise_only = 0
    for step in range(30):
        node = int(phase.path[step])
        before, counted = state["token"].clone(), int(state["contributions"][node])
        steps.walk_step(problem, phase, state, step, attack)
        if counted >= 1:
            expected = before - args.lr * phase.noise_scale * kernels.release_noise(problem, kernels.WALK_NOISE, step)
            torch.testing.assert_close(state["token"], expected, rtol=0, atol=0)
            noise_only += 1
    assert int(state["contributions"].max()) == 1 and noise_only > 0


@pytest.mark.parametrize("gamma", [1.0, 1.4])
def test_gossip_rounds_keep_the_average_and_reach_consensus(tiny_scenario, gamma):
    _, problem, _, _ = _setup(tiny_scenario, "gossip")
    messages = torch.randn(problem.n, 5, generator=torch.Generator().manual_seed(0))
    rows, previous = kernels.walk_rows(problem, np.arange(problem.n)), None

    current = messages
    for _ in range(60):
        current, previous = kernels.gossip_round(rows, current, previous, gamma), current

    torch.testing.assert_close(current.mean(dim=0), messages.mean(dim=0), rtol=0, atol=1e-5)
    assert (current - messages.mean(dim=0)).abs().max() < 1e-3


def test_blocks_of_nodes_compute_what_all_nodes_compute(tiny_scenario):
    _, problem, _, phase = _setup(tiny_scenario, "gossip")
    params = steps.initial_state(problem, phase)["params"] + 0.1

    everything = kernels.gossip_local_update(problem, phase, params, np.arange(8), iteration=4)
    block = kernels.gossip_local_update(problem, phase, params[[6, 2, 5]], np.array([6, 2, 5]), iteration=4)

    torch.testing.assert_close(block, everything[[6, 2, 5]], rtol=1e-6, atol=1e-7)


def test_local_dp_moves_the_shared_model_by_the_mean_release(tiny_scenario):
    _, problem, args, phase = _setup(tiny_scenario, "local_dp")
    state = steps.initial_state(problem, phase)
    start = state["params"].clone()
    releases = kernels.local_dp_releases(problem, phase, start, np.arange(8), 0)

    steps.local_dp_step(problem, phase, state, 0)

    torch.testing.assert_close(state["params"], start - args.lr * releases.mean(dim=0))
    source = phase.source
    size = problem.spec.num_params
    torch.testing.assert_close(state["attack_score"], releases[source, size:].double())


@pytest.mark.parametrize("algorithm", ["random_walk", "gossip", "local_dp"])
def test_two_halves_through_a_checkpoint_equal_a_straight_run(tiny_scenario, tmp_path, algorithm):
    data, problem, args, phase = _setup(tiny_scenario, algorithm, steps_planned=12)
    straight, straight_records = local_chunk(data, args, steps.initial_state(problem, phase), 0, 12)

    first, records = local_chunk(data, args, steps.initial_state(problem, phase), 0, 5)
    run = RunFolder.create(tmp_path / "run", data)
    run.save_checkpoint(5, {"state": first})
    resumed, more = local_chunk(data, args, run.latest_checkpoint()["state"], 5, 12)

    assert records + more == straight_records
    assert resumed.keys() == straight.keys()
    for key in straight:
        torch.testing.assert_close(resumed[key], straight[key], rtol=0, atol=0)


@pytest.mark.parametrize("algorithm", ["random_walk", "gossip"])
def test_canaries_leave_the_model_unchanged(tiny_scenario, algorithm):
    audited = _setup(tiny_scenario, algorithm, steps_planned=8)
    tiny_scenario["decentralized"]["audit"]["canaries"] = 0
    plain = _setup(tiny_scenario, algorithm, steps_planned=8)

    finals = [local_chunk(data, args, steps.initial_state(problem, phase), 0, 8)[0]
              for data, problem, args, phase in (audited, plain)]

    key, size = ("token", slice(None, plain[1].spec.num_params)) if algorithm == "random_walk" else ("params", (
        slice(None), slice(None, plain[1].spec.num_params)))
    assert audited[1].dimension == plain[1].dimension + 20
    torch.testing.assert_close(finals[0][key][size], finals[1][key], rtol=0, atol=0)
