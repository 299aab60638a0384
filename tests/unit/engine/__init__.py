"""Tests of shipyard.engine."""
