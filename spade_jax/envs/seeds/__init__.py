"""Seed environment library."""
