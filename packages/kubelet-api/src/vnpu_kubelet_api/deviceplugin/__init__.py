"""Kubernetes device plugin API; one subpackage per API version (only ``v1beta1`` exists)."""
