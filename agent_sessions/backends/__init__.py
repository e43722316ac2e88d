"""Stores: each keeps ordered JSON items per session id, and nothing else."""
