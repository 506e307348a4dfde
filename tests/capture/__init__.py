"""The capture tier."""
