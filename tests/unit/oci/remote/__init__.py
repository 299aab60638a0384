"""Tests of shipyard.oci.remote."""
