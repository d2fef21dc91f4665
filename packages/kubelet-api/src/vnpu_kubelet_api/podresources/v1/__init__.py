"""PodResources API v1: ``api.proto`` and its generated ``api_pb2`` / ``api_pb2_grpc`` modules.

Import the generated modules directly::

    from vnpu_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc
"""
