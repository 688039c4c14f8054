"""Protobuf and gRPC modules for Nomad's plugin wire contract.

Generated from the .proto files here by plugins/generate_protos.py; do not edit the *_pb2* files by hand.
"""
