"""How a delivery reaches a target: event bodies from templates, provider profiles and
signing, transports (in-process ASGI, real socket, the fault wrapper), faults, bounded reads.

The bottom of the harness: imports nothing of it but `harness.errors`.
"""
