"""The kernel tier."""
