"""Pairwise verifiers: math answers with units, and code run in a sandbox that cannot be gamed."""
