"""The pairwise epsilon matrix streamed in blocks of rows, and the parallel, symmetric conversion.

References: the in-memory path of the benchmark (`random_walk_pndp` with the Chebyshev graph term,
then one `linear_rdp_to_dp` call), `epsilon_by_distance` for the distance profile, a full sort
for the largest pairs.
"""

import dataclasses

import numpy as np
import pytest

from testbed.decentralized.matrix_stream import (
    FLOAT32_RELATIVE_ERROR,
    Conversion,
    block_rows,
    convert,
    is_symmetric,
    pairwise_epsilon,
    random_walk_rows,
)
from testbed.decentralized.privacy import gossip_unit_rho, local_dp_unit_rho, walk_first_hit_unit_rho, walk_unit_rho
from testbed.topologies import (
    build_graph,
    epsilon_by_distance,
    linear_rdp_to_dp,
    max_valid_order,
    metropolis_hastings,
    random_walk_pndp,
)
from testbed.topologies.symmetry import row_symmetry

N, T, SIGMA, DELTA = 150, 400, 1.0, 1e-5
CONVERSION = Conversion(DELTA, "balle", max_valid_order(SIGMA))
BUDGET = 48 * N * 40  # 40 rows by the budget: blocks of 32 rows, the series' alignment


@pytest.fixture(scope="module")
def setting():
    graph = build_graph("erdos_renyi", n=N, seed=3)
    walk = metropolis_hastings(graph, sparse=True)
    rho = random_walk_pndp(walk, T=T, sigma=SIGMA, alpha=2.0, graph_term="chebyshev") / 2.0
    eps, _ = linear_rdp_to_dp(rho, DELTA, max_order=max_valid_order(SIGMA))
    return graph, walk, eps


def _stream(setting, tmp_path, symmetric=True, dtype=np.float64, keep=()):
    graph, walk, _ = setting
    source = random_walk_rows(walk, T, SIGMA)
    source = source if symmetric else dataclasses.replace(source, symmetric=False)
    return pairwise_epsilon(source, graph, CONVERSION, mode="stream", path=tmp_path / "eps.npy", budget=BUDGET,
                            dtype=dtype, keep=keep)


def test_streamed_matrix_is_the_in_memory_one_entry_by_entry(setting, tmp_path):
    result = _stream(setting, tmp_path, symmetric=False)
    assert result.mode == "stream" and result.block_rows == 32  # five blocks, the last of 22 rows
    assert np.array_equal(np.load(result.path), setting[2])
    assert not (tmp_path / "eps.npy.partial").exists()


def test_streamed_summaries_are_those_of_the_whole_matrix(setting, tmp_path):
    graph, _, eps = setting
    summary = _stream(setting, tmp_path, symmetric=False, keep=(0, 77)).summary
    reference = epsilon_by_distance(eps, graph)
    for name in ("distance", "count", "minimum", "maximum"):
        assert np.array_equal(getattr(summary.profile, name), getattr(reference, name)), name
    np.testing.assert_allclose(summary.profile.mean, reference.mean, rtol=1e-13)
    off = ~np.eye(N, dtype=bool)
    np.testing.assert_allclose(summary.mean, eps[off].mean(), rtol=1e-13)
    u, v = np.nonzero(off)
    order = np.lexsort((v, u, -eps[off]))[:summary.top.size]
    assert summary.top.size == 16
    assert np.array_equal(summary.top, eps[off][order])
    assert np.array_equal(summary.top_pairs, np.stack([u[order], v[order]], axis=1))
    assert set(summary.rows) == {0, 77} and np.array_equal(summary.rows[77], eps[77])


def test_the_symmetric_shortcut_mirrors_within_the_rounding_of_the_series(setting, tmp_path):
    # The walk's rho is symmetric in exact arithmetic; its series rows are about 1e-16 apart, so a
    # mirrored entry is the conversion of rho[v, u]: equal to the full conversion to that rounding.
    result = _stream(setting, tmp_path)
    streamed = np.load(result.path)
    np.testing.assert_allclose(streamed, setting[2], rtol=1e-12, atol=0)
    assert is_symmetric(streamed)  # mirrored, not converted twice
    memory = pairwise_epsilon(random_walk_rows(setting[1], T, SIGMA), setting[0], CONVERSION, mode="memory")
    np.testing.assert_allclose(memory.matrix, setting[2], rtol=1e-12, atol=0)
    assert is_symmetric(memory.matrix)


def test_float32_on_disk_stays_within_its_stated_error(setting, tmp_path):
    streamed = np.load(_stream(setting, tmp_path, symmetric=False, dtype=np.float32).path)
    assert streamed.dtype == np.float32
    error = np.abs(streamed.astype(np.float64) - setting[2])
    assert np.all(error <= FLOAT32_RELATIVE_ERROR * np.abs(setting[2]))
    assert error.max() > 0  # float32 indeed


def test_a_failed_block_leaves_no_matrix_behind(setting, tmp_path):
    graph, walk, _ = setting
    source = random_walk_rows(walk, T, SIGMA)

    def failing(index):
        if index[0] >= 64:
            raise RuntimeError("killed")
        return source.rows(index)

    with pytest.raises(RuntimeError, match="killed"):
        pairwise_epsilon(dataclasses.replace(source, rows=failing), graph, CONVERSION, mode="stream",
                         path=tmp_path / "eps.npy", budget=BUDGET)
    assert list(tmp_path.iterdir()) == []


def test_the_block_follows_the_budget_and_auto_streams_what_does_not_fit():
    assert block_rows(30_000, 1 << 30, 32) == 736  # 1 GiB at 48 bytes an entry
    assert block_rows(30_000, 1, 32) == 32  # never below one aligned block
    assert block_rows(100, 1 << 30, 32) == 100
    graph = build_graph("erdos_renyi", n=64, seed=1)
    source = random_walk_rows(metropolis_hastings(graph, sparse=True), 100, SIGMA)
    assert pairwise_epsilon(source, graph, CONVERSION).mode == "memory"
    with pytest.raises(ValueError, match="needs a path"):
        pairwise_epsilon(source, graph, CONVERSION, budget=16 * 64 * 64 - 1)


def test_the_symmetric_shortcut_equals_the_full_conversion_bit_for_bit():
    rng = np.random.default_rng(0)
    raw = rng.exponential(0.05, size=(300, 300))
    symmetric = raw + raw.T  # IEEE addition commutes: exactly symmetric
    full = CONVERSION(symmetric)
    assert is_symmetric(symmetric) and not is_symmetric(raw)
    assert np.array_equal(convert(symmetric, CONVERSION, symmetric=True, workers=2), full)
    assert np.array_equal(convert(symmetric, CONVERSION, workers=2), full)  # checked, then mirrored
    assert np.array_equal(convert(raw, CONVERSION, workers=2), CONVERSION(raw))  # checked: converted whole
    mirrored = convert(raw, CONVERSION, symmetric=True)  # what the shortcut would do to an asymmetric one
    assert not np.array_equal(mirrored, CONVERSION(raw)) and np.array_equal(mirrored, mirrored.T)


def test_which_training_matrices_are_exactly_symmetric():
    """The claims of `matrix_stream`'s docstring: where `privacy.to_epsilon` can mirror."""
    cube = build_graph("hypercube", dim=4)
    walk = metropolis_hastings(cube)
    random = metropolis_hastings(build_graph("erdos_renyi", n=64, seed=0))
    assert is_symmetric(local_dp_unit_rho(16, 5, 1.0, keep=5).matrix)
    assert is_symmetric(walk_unit_rho(walk, 30, 5, 1.0, keep=30, difference=row_symmetry(cube, walk)).matrix)
    assert not is_symmetric(walk_unit_rho(random, 30, 5, 1.0, keep=30).matrix)  # symmetric to 1e-16 only
    ring = build_graph("ring", n=16)
    ring_walk = metropolis_hastings(ring)  # translation-invariant, but row0[v - u] and row0[u - v] differ
    assert not is_symmetric(walk_unit_rho(ring_walk, 30, 5, 1.0, keep=30,
                                          difference=row_symmetry(ring, ring_walk)).matrix)
    assert not is_symmetric(gossip_unit_rho(random, 5, 3, 1.0, 1.0, keep=5).matrix)
    assert not is_symmetric(walk_first_hit_unit_rho(random, 30, 5, 1.0, keep=30).matrix)


@dataclasses.dataclass(frozen=True)
class _Counting(Conversion):
    """A conversion that records how many entries it converted."""

    sizes: list = dataclasses.field(default_factory=list)

    def __call__(self, rho):
        self.sizes.append(np.size(rho))
        return super().__call__(rho)


@pytest.mark.parametrize("symmetric", [True, False])
def test_a_symmetric_matrix_is_converted_once_per_pair(setting, tmp_path, symmetric):
    graph, walk, eps = setting
    counting = _Counting(DELTA, "balle", max_valid_order(SIGMA))
    source = dataclasses.replace(random_walk_rows(walk, T, SIGMA), symmetric=symmetric)
    result = pairwise_epsilon(source, graph, counting, mode="stream", path=tmp_path / "eps.npy", budget=BUDGET)
    converted = sum(counting.sizes)
    # Right of the diagonal of each 32-row block: (n^2 + 32 n) / 2 in all, against n^2.
    assert converted == (sum(min(32, N - start) * (N - start) for start in range(0, N, 32)) if symmetric else N * N)
    np.testing.assert_allclose(np.load(result.path), eps, rtol=1e-12, atol=0)
