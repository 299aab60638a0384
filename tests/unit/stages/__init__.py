"""Tests of shipyard.stages (`shipyard test`)."""
