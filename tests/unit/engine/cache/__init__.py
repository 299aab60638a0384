"""Tests of shipyard.engine.cache."""
