"""Spec files (``apiVersion: acklab/v1``, loaded bounded and checked against their schema),
experiment specs, and the credentials a spec names (``env:`` values, URL passwords).
"""
