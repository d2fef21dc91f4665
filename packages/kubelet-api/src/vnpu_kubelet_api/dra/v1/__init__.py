"""DRA plugin API v1: ``api.proto`` and its generated ``api_pb2`` / ``api_pb2_grpc`` modules.

A DRA driver serves ``DRAPlugin`` on its endpoint socket; the kubelet calls it. Import the
generated modules directly::

    from vnpu_kubelet_api.dra.v1 import api_pb2, api_pb2_grpc
"""
