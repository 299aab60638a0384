"""OCI images: the pure model, layers, layouts, docker-archives, bases, and the registry client."""

from shipyard.oci.archive import read_docker_archive, write_docker_archive
from shipyard.oci.auth import Credentials, find_credentials
from shipyard.oci.base import Base, blob_store, load_base
from shipyard.oci.layer import BlobStore, Entry, layer_from_tarball, scan_tree, write_layer
from shipyard.oci.layout import read_layout, write_layout
from shipyard.oci.model import (
    Config,
    Descriptor,
    Image,
    Index,
    Layer,
    OCIError,
    Platform,
    append_layer,
    canonical_json,
    config_json,
    index_descriptor,
    index_json,
    make_index,
    manifest_descriptor,
    manifest_json,
    with_config,
)
from shipyard.oci.reference import InvalidReference, Reference, parse_reference
from shipyard.oci.registry import NotFound, Registry, RegistryError

__all__ = [
    "Base",
    "BlobStore",
    "Config",
    "Credentials",
    "Descriptor",
    "Entry",
    "Image",
    "Index",
    "InvalidReference",
    "Layer",
    "NotFound",
    "OCIError",
    "Platform",
    "Reference",
    "Registry",
    "RegistryError",
    "append_layer",
    "blob_store",
    "canonical_json",
    "config_json",
    "find_credentials",
    "index_descriptor",
    "index_json",
    "layer_from_tarball",
    "load_base",
    "make_index",
    "manifest_descriptor",
    "manifest_json",
    "parse_reference",
    "read_docker_archive",
    "read_layout",
    "scan_tree",
    "with_config",
    "write_docker_archive",
    "write_layer",
    "write_layout",
]
