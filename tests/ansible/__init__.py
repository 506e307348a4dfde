"""The ansible tier."""
