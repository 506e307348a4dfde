"""The cli tier."""
