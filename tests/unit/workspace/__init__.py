"""Tests of shipyard.workspace."""
