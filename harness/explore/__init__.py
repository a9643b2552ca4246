"""The schedule explorer: delivery schedules as steps over a few events, generated and shrunk
by Hypothesis against a model of what is allowed (``acklab explore``, ``acklab replay``).
"""
