"""The test tiers (one package each) and what they share (tests/support)."""
