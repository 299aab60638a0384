"""Tests of shipyard.oci."""
