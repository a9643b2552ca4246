"""Every ``acklab`` command of the harness (run, plan, validate, demo, explore, replay, sweep,
janitor) and the terminal display; commands parse options and call the other sub-packages.
"""
