"""Tests of shipyard.files."""
