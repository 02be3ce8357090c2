"""Graphs, random-walk and gossip algorithms, and pairwise network-DP accountants (installed as
`testbed.topologies`; a library that imports nothing else of the testbed)."""

from .accounting import (
    clip_to_local,
    closed_form_tail_bound,
    harmonic_number,
    local_dp_loss,
    max_valid_order,
    random_walk_first_hit_sum,
    random_walk_graph_term,
    random_walk_pndp,
    random_walk_visit_sum,
    walk_length,
)
from .conversion import (
    DistanceProfile,
    epsilon_by_distance,
    linear_rdp_to_dp,
    rdp_to_dp,
    zcdp_to_dp,
)
from .errors import TopologyError
from .gossip import gossip_leakage_weights, gossip_pndp
from .graphs import GRAPH_BUILDERS, build_graph, graph_from_spec
from .spectral import (
    eigenvalues,
    mixing_time,
    relaxation_time,
    spectral_gap,
    stationary_distribution,
)
from .walks import (
    adjacency,
    check_aperiodic,
    check_doubly_stochastic,
    check_irreducible,
    check_stochastic,
    check_symmetric,
    lazy_walk,
    metropolis_hastings,
    period,
    simple_random_walk,
    validate_walk,
)

__all__ = [
    "DistanceProfile",
    "GRAPH_BUILDERS",
    "TopologyError",
    "adjacency",
    "build_graph",
    "check_aperiodic",
    "check_doubly_stochastic",
    "check_irreducible",
    "check_stochastic",
    "check_symmetric",
    "clip_to_local",
    "closed_form_tail_bound",
    "eigenvalues",
    "epsilon_by_distance",
    "gossip_leakage_weights",
    "gossip_pndp",
    "graph_from_spec",
    "harmonic_number",
    "lazy_walk",
    "linear_rdp_to_dp",
    "local_dp_loss",
    "max_valid_order",
    "metropolis_hastings",
    "mixing_time",
    "period",
    "random_walk_first_hit_sum",
    "random_walk_graph_term",
    "random_walk_pndp",
    "random_walk_visit_sum",
    "rdp_to_dp",
    "relaxation_time",
    "simple_random_walk",
    "spectral_gap",
    "stationary_distribution",
    "validate_walk",
    "walk_length",
    "zcdp_to_dp",
]
