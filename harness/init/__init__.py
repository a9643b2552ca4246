"""acklab init: a target spec, a pytest test and a CI snippet for a service, its effects found by diffing its database."""
