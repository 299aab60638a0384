"""Tests of shipyard.builders.zipapp."""
