"""The devices tier."""
