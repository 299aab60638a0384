"""Tests of shipyard.cli."""
