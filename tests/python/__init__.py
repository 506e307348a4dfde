"""The python tier."""
