"""Plugin registration API v1: ``api.proto`` and its generated ``api_pb2`` / ``api_pb2_grpc``.

A plugin serves ``Registration`` on a socket in the kubelet's ``plugins_registry`` directory;
the kubelet dials it. Import the generated modules directly::

    from vnpu_kubelet_api.pluginregistration.v1 import api_pb2, api_pb2_grpc
"""
