"""Device plugin API v1beta1: ``api.proto`` and its generated ``api_pb2`` / ``api_pb2_grpc`` modules.

Import the generated modules directly::

    from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
"""
