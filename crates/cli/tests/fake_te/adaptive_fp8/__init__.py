"""A stand-in for the real package in the TE-backend protocol test (no torch, no GPU)."""
