"""Tests of shipyard.builders.image."""
