"""The storm tier."""
