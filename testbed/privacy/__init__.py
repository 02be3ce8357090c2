"""Privacy statistics shared by every kind (federated and decentralized): the one-run canary audit's
lower bound, power and verdict (`testbed.privacy.one_run`)."""
