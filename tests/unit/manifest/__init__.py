"""Tests of shipyard.manifest."""
