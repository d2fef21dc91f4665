"""Kubelet DRA plugin API; one subpackage per API version (this package ships ``v1``)."""
