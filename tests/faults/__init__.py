"""The faults tier."""
