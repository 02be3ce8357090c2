"""GPGVAE: the game equilibrium, the gated prior, the paper's GCN decoder and correlation-free encoder, the estimators,
the gated-vs-ungated claim, config errors (resume: test_workload_contract.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.workloads.gpgvae import games, model
from testbed.workloads.gpgvae.config import GPGVAEConfig
from testbed.workloads.runner import build_workload

# Small but enough: 6 complement + 6 substitute graphs, a 200-game pretraining set for the type classifier.
SMALL = {"graphs_per_sign": 6, "pretrain_graphs": 200, "grad_samples": 2}
TINY = {"graphs_per_sign": 2, "pretrain_graphs": 20, "pretrain_steps": 5, "nodes": 6, "games": 20, "width": 16,
        "grad_samples": 2}


def scenario(seed: int = 0, **workload):
    return validate_raw({"name": "t", "kind": "workload", "seed": seed, "data": {"dataset": "digits"},
                         "workload": {"name": "gpgvae", **workload}, "training": {"steps": 10}}, "s.yaml")


def test_equilibrium_actions_are_a_fixed_point_of_every_best_response():
    rng = np.random.default_rng(0)
    adjacency = games.random_graph("ba", 15, rng)
    benefits = rng.standard_normal((15, 7))
    for beta in (0.8, -0.8):
        actions = games.equilibrium_actions(adjacency, benefits, beta)
        best_response = benefits + beta * games.normalised_adjacency(adjacency) @ actions
        np.testing.assert_allclose(actions, best_response, atol=1e-12)


def test_generated_games_have_unit_norm_columns_and_a_symmetric_graph_without_loops():
    data = games.game_set([0.8, -0.8], 12, 30, 0.5, 10.0, "ws", np.random.default_rng(1))
    np.testing.assert_allclose(np.linalg.norm(data.actions, axis=1), 1.0, rtol=1e-5)
    assert np.array_equal(data.adjacency, np.swapaxes(data.adjacency, 1, 2))
    assert not data.adjacency[:, range(12), range(12)].any() and (data.adjacency.sum(-1) > 0).all()


def test_gated_prior_is_the_mirror_image_for_substitutes_and_one_half_when_random():
    corr = games.correlation(np.random.default_rng(2).standard_normal((3, 9, 40)))
    complement = games.gated_prior(corr, "complement")
    np.testing.assert_allclose(games.gated_prior(corr, "substitute"), 1 - complement, atol=1e-12)
    np.testing.assert_allclose(complement, (1 + corr) / 2, atol=1e-3)  # up to the clip away from 0 and 1
    assert np.all(games.gated_prior(corr, "random") == 0.5)
    per_graph = games.gated_prior(corr, np.array(["complement", "substitute", "random"]))
    np.testing.assert_allclose(per_graph[1], 1 - complement[1], atol=1e-12)


def test_bernoulli_kl_matches_torch_distributions_over_the_upper_triangle():
    logits, prior = torch.randn(2, 6, 6), torch.rand(2, 6, 6) * 0.9 + 0.05
    reference = torch.distributions.kl_divergence(torch.distributions.Bernoulli(logits=logits),
                                                  torch.distributions.Bernoulli(probs=prior))
    expected = torch.stack([r[torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)].sum() for r in reference])
    torch.testing.assert_close(model.bernoulli_kl(logits, prior), expected)


def test_encoder_is_symmetric_and_equivariant_to_relabelling_players():
    torch.manual_seed(0)
    encoder = model.EdgeEncoder(games=16, width=16).eval()
    actions = torch.randn(1, 7, 16)
    permutation = torch.randperm(7)
    logits = encoder(actions)
    torch.testing.assert_close(logits, logits.transpose(1, 2))
    torch.testing.assert_close(encoder(actions[:, permutation]), logits[:, permutation][:, :, permutation],
                               atol=1e-5, rtol=1e-5)


def test_default_encoder_does_not_see_the_pair_correlations(monkeypatch):
    """The paper's q(A|X) reads only the action vectors: the correlation input is an ablation, off by default."""
    assert GPGVAEConfig().pair_correlation is False
    workload = build_workload(scenario(**TINY))
    assert workload.encoder.pair[0].in_features == workload.config.width
    def refuse(actions):
        raise AssertionError("the default encoder computed the pair correlations")
    monkeypatch.setattr(model, "action_correlation", refuse)
    workload.edge_probabilities()  # the default path never asks for them
    ablation = model.EdgeEncoder(games=20, width=16, pair_correlation=True)
    with pytest.raises(AssertionError, match="pair correlations"):
        ablation(torch.randn(1, 5, 20))


def test_default_decoder_is_the_gcn_on_latent_embeddings_not_the_best_response_map(monkeypatch):
    """Fails if the default likelihood reads the observed actions through the best-response equation again: the
    default workload must train and evaluate without `best_response_nll`, and its mean of X is the GCN decoder's
    output on the sampled graph and the latent Z = mu(X) + noise, not a function of the observed actions."""
    def refuse(*args):
        raise AssertionError("the default decoder used the best-response map of the observed actions")
    monkeypatch.setattr(model, "best_response_nll", refuse)
    workload = build_workload(scenario(**TINY))
    assert workload.config.decoder == "gcn"
    workload.train(2)
    workload.evaluate()
    seen = {}
    original = model.gaussian_nll
    def spy(actions, mean, log_scale):
        seen["mean"] = mean
        return original(actions, mean, log_scale)
    monkeypatch.setattr(model, "gaussian_nll", spy)
    index, graph = torch.arange(2), torch.from_numpy(workload.games.adjacency[:2])
    with torch.no_grad():
        nll_of, _ = workload._decoder_nll(index, torch.Generator().manual_seed(0))
        nll_of(graph)
        mu = workload.node_encoder(workload.actions[index])
        latent = mu + torch.randn(mu.shape, generator=torch.Generator().manual_seed(0))
        torch.testing.assert_close(seen["mean"], workload.decoder(latent, graph))
        assert not torch.allclose(workload.decoder(latent, torch.zeros_like(graph)), seen["mean"])


def test_gcn_propagation_and_decoder_are_symmetric_normalised_and_equivariant():
    path = torch.tensor([[[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]])
    degree = torch.tensor([2.0, 3.0, 2.0])  # with the self-loops
    expected = (path[0] + torch.eye(3)) / torch.sqrt(degree[:, None] * degree[None, :])
    torch.testing.assert_close(model.gcn_propagation(path)[0], expected)
    torch.manual_seed(0)
    decoder = model.GCNDecoder(games=5, width=8)
    latent, adjacency = torch.randn(1, 6, 8), model.symmetric(torch.rand(1, 6, 6))
    permutation = torch.randperm(6)
    mean = decoder(latent, adjacency)
    torch.testing.assert_close(decoder(latent[:, permutation], adjacency[:, permutation][:, :, permutation]),
                               mean[:, permutation], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(decoder(latent, torch.zeros_like(adjacency)), mean)  # the graph matters


def test_samples_are_symmetric_loop_free_graphs_and_the_relaxation_is_differentiable():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 8, 8, requires_grad=True)
    hard, soft = model.sample_hard(logits, generator), model.sample_relaxed(logits, 0.5, generator)
    for sample in (hard, soft):
        assert torch.equal(sample, sample.transpose(1, 2)) and torch.all(sample.diagonal(dim1=1, dim2=2) == 0)
    assert set(hard.unique().tolist()) <= {0.0, 1.0} and bool(((soft >= 0) & (soft <= 1)).all())
    soft.sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_elbo_loss_gradients_are_unbiased_on_a_three_player_graph():
    """Catches a score-function term with the wrong sign, without log q(A), with an undetached or badly placed
    baseline, a decoder term missing, or a wrong KL weight: averaged over many draws, the gradients of
    `elbo_loss` (estimator "score") must match the exact gradients of E_q[NLL(A)] + beta_1 KL, summed here over
    all 8 graphs of 3 players, within four standard errors."""
    logits = torch.tensor([[0.0, 0.4, -0.7], [0.4, 0.0, 1.1], [-0.7, 1.1, 0.0]], dtype=torch.float64)[None]
    actions = torch.tensor([[[1.0, -0.5, 0.3, 2.0], [0.8, -0.2, 0.5, 1.5], [-1.0, 0.7, 0.0, -1.2]]],
                           dtype=torch.float64)
    prior = torch.full((1, 3, 3), 0.3, dtype=torch.float64)
    slope, log_scale = torch.tensor([0.9], dtype=torch.float64), torch.tensor([-0.2], dtype=torch.float64)
    kl_weight = 0.5
    pairs = ((0, 1), (0, 2), (1, 2))
    # Exact: E_q[NLL] over the 8 graphs, plus the analytic KL written out from the Bernoulli formula.
    exact_logits, exact_slope = logits.clone().requires_grad_(True), slope.clone().requires_grad_(True)
    probability = torch.sigmoid(exact_logits)[0]
    expectation = torch.zeros((), dtype=torch.float64)
    for bits in range(8):
        graph, q = torch.zeros(1, 3, 3, dtype=torch.float64), torch.ones((), dtype=torch.float64)
        for k, (i, j) in enumerate(pairs):
            bit = (bits >> k) & 1
            graph[0, i, j] = graph[0, j, i] = bit
            q = q * (probability[i, j] if bit else 1 - probability[i, j])
        expectation = expectation + q * model.best_response_nll(actions, graph, exact_slope, log_scale)[0]
    p = torch.stack([probability[i, j] for i, j in pairs])
    kl = (p * torch.log(p / 0.3) + (1 - p) * torch.log((1 - p) / 0.7)).sum()
    exact_grad_logits, exact_grad_slope = torch.autograd.grad(expectation + kl_weight * kl, (exact_logits, exact_slope))
    # Estimated: one elbo_loss over a batch of identical graphs; each copy's gradient is one draw / samples.
    samples = 40000
    batch = lambda t, *shape: t.float().expand(samples, *shape).clone()  # sample_hard draws float32 graphs
    batch_logits, batch_slope = batch(logits, 3, 3).requires_grad_(True), batch(slope).requires_grad_(True)
    batch_actions, batch_log_scale = batch(actions, 3, 4), batch(log_scale)
    nll_of = lambda graph: model.best_response_nll(batch_actions, graph, batch_slope, batch_log_scale)
    loss, _ = model.elbo_loss(batch_logits, nll_of, batch(prior, 3, 3), "score", kl_weight, 0.5,
                              torch.tensor(float(expectation.detach())), torch.Generator().manual_seed(0))
    draws_logits, draws_slope = (g.double() * samples for g in torch.autograd.grad(loss, (batch_logits, batch_slope)))
    for i, j in pairs:  # the upper triangle holds a pair's logit
        draws = draws_logits[:, i, j]
        error = 4 * float(draws.std()) / samples**0.5
        assert float(draws.mean()) == pytest.approx(float(exact_grad_logits[0, i, j]), abs=error)
        assert abs(float(exact_grad_logits[0, i, j])) > 2 * error  # the check can tell a wrong gradient
    assert float(draws_logits[:, 1, 0].abs().max()) == 0.0  # the mirrored entry is not a variable
    error = 4 * float(draws_slope.std()) / samples**0.5
    assert float(draws_slope.mean()) == pytest.approx(float(exact_grad_slope[0]), abs=error)


def test_type_classifier_reads_the_sign_of_the_interaction():
    workload = build_workload(scenario(**SMALL))
    assert workload.evaluate()["test_type_accuracy"] >= 0.9


@pytest.mark.slow
def test_gated_prior_recovers_substitute_graphs_that_the_ungated_prior_inverts():
    """With the paper's GCN decoder (250 steps, 6+6 graphs, seed 0): substitute AUC of the gated VAE 0.93 (its
    prior alone 0.95). The likelihood alone does not find these graphs, so the prior decides the ranking."""
    auc = {}
    for variant in ("gpgvae", "ungated"):
        workload = build_workload(scenario(variant=variant, **SMALL))
        workload.train(250)
        auc[variant] = workload.evaluate()["test_auc_substitute"]
    assert auc["ungated"] < 0.5
    assert auc["gpgvae"] >= 0.7 and auc["gpgvae"] >= auc["ungated"] + 0.3


@pytest.mark.parametrize("workload, field", [
    ({"variant": "nuggets"}, "workload.variant"),
    ({"estimator": "reinforce_plus"}, "workload.estimator"),
    ({"beta": 1.0}, "workload.beta"),
    ({"nodes": 2}, "workload.nodes"),
    ({"tau": -0.5}, "workload.tau"),
    ({"decoder": "oracle"}, "workload.decoder"),
    ({"batch_size": 9, "graphs_per_sign": 4}, "workload.batch_size"),
])
def test_bad_config_values_are_refused_with_the_field_named(workload, field):
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        scenario(**workload)
